#include "pipeline/interpreter.h"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "core/error.h"
#include "core/timer.h"

namespace lattice::pipeline {
namespace {

struct Context {
  Tensor input, output, doutput, dinput;  // (B, T, C) each, or undefined
};

P2PKind p2p_kind(ActionKind k) {
  switch (k) {
    case ActionKind::send_forward:
      return P2PKind::send_forward;
    case ActionKind::recv_forward:
      return P2PKind::recv_forward;
    case ActionKind::send_backward:
      return P2PKind::send_backward;
    default:
      return P2PKind::recv_backward;
  }
}

// "plan actions 7-8 of 24: send_forward microbatch 3 chunk 0 to world rank 2, recv_backward ..."
std::string describe_blocked(const Plan& plan, size_t begin, size_t end, const P2P& p2p) {
  std::string what = end - begin == 1 ? fmt::format("plan action {} of {}:", begin, plan.size())
                                      : fmt::format("plan actions {}-{} of {}:", begin, end - 1, plan.size());
  for (size_t i = begin; i < end; ++i) {
    const Action& a = plan[i];
    const P2PKind k = p2p_kind(a.kind);
    const bool send = k == P2PKind::send_forward || k == P2PKind::send_backward;
    what += fmt::format("{} {} {} world rank {}", i > begin ? "," : "", describe_action(a), send ? "to" : "from",
                        p2p.peer_world_rank(k, a.chunk));
  }
  return what;
}

// The context buffer a transfer moves.
Tensor& transfer_buffer(Context& c, ActionKind k) {
  switch (k) {
    case ActionKind::send_forward:
      return c.output;
    case ActionKind::recv_forward:
      return c.input;
    case ActionKind::send_backward:
      return c.dinput;
    default:
      return c.doutput;
  }
}

}  // namespace

RunStats run_schedule(const Plan& plan, P2P& p2p, StageCallbacks& cb, const RunOptions& opts) {
  const PipelineStageManager& sm = p2p.stages();
  const bool training = count_actions(plan, ActionKind::backward) > 0;
  std::map<std::pair<int, int>, Context> live;  // (chunk, microbatch) -> buffers
  RunStats stats;
  auto buffer = [&] { return Tensor::empty(cb.activation_shape, cb.dtype, cb.device); };
  auto record = [&](const Action& a, double t0) {
    if (opts.trace) stats.trace.push_back({a.kind, a.microbatch, a.chunk, t0, now_seconds()});
  };
  // A P2P batch started and waited on the device: the host waits for it
  // itself (with its deadline) once the next batch has started, or at the end.
  struct Started {
    comm::WorkPtr work;
    size_t begin = 0, end = 0;  // its plan actions
  };
  Started previous;
  auto blocked = [&](const Started& at, auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      LATTICE_FAIL("pipeline stage {} (world rank {}) is blocked at {} — {}", sm.stage(), p2p.world_rank_of(sm.stage()),
                   describe_blocked(plan, at.begin, at.end, p2p), e.message());
    }
  };
  auto finish_previous = [&] {
    if (!previous.work) return;
    blocked(previous, [&] { previous.work->wait(); });
    previous = Started{};
  };
  for (size_t i = 0; i < plan.size();) {
    const Action& a = plan[i];
    const double t0 = now_seconds();
    Context& c = live[{a.chunk, a.microbatch}];
    if (a.kind == ActionKind::forward) {
      if (!sm.is_last_chunk(a.chunk)) c.output = buffer();
      cb.forward(a.chunk, a.microbatch, c.input, c.output);
      if (!training) c.input = Tensor();
      if (!training && sm.is_last_chunk(a.chunk)) live.erase({a.chunk, a.microbatch});
    } else if (a.kind == ActionKind::backward) {
      if (!sm.is_first_chunk(a.chunk)) c.dinput = buffer();
      cb.backward(a.chunk, a.microbatch, c.doutput, c.dinput);
      c.input = c.output = c.doutput = Tensor();
      if (sm.is_first_chunk(a.chunk)) live.erase({a.chunk, a.microbatch});
    }
    if (!is_p2p(a.kind)) {
      stats.compute_s += now_seconds() - t0;
      record(a, t0);
      ++i;
      continue;
    }
    // A P2P batch: this action and the fused ones after it, started together.
    size_t end = i + 1;
    while (end < plan.size() && is_p2p(plan[end].kind) && plan[end].fused) ++end;
    std::vector<Transfer> batch;
    for (size_t j = i; j < end; ++j) {
      const Action& b = plan[j];
      Tensor& t = transfer_buffer(live[{b.chunk, b.microbatch}], b.kind);
      if (b.kind == ActionKind::recv_forward || b.kind == ActionKind::recv_backward) t = buffer();
      batch.push_back({p2p_kind(b.kind), t, b.chunk, b.microbatch});
    }
    Started started{nullptr, i, end};
    blocked(started, [&] { started.work = p2p.start(batch, opts.timeout_s); });
    finish_previous();
    blocked(started, [&] { started.work->wait_on_device(); });
    previous = std::move(started);
    stats.wait_s += now_seconds() - t0;
    for (size_t j = i; j < end; ++j) {
      const Action& b = plan[j];
      record(b, t0);
      const bool sent_last_use =
          b.kind == ActionKind::send_backward || (!training && b.kind == ActionKind::send_forward);
      if (sent_last_use) live.erase({b.chunk, b.microbatch});
    }
    i = end;
  }
  const double t_end = now_seconds();
  finish_previous();
  stats.wait_s += now_seconds() - t_end;
  return stats;
}

}  // namespace lattice::pipeline
