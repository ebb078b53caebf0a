// verify_plans: a rendezvous simulation of every rank's plan (schedule.h).
//
// Each rank runs its plan in order. A compute action completes at once; a
// P2P batch completes when each of its transfers has met the complementary
// transfer (same direction, model-chunk boundary and microbatch) in the
// peer's current batch. Transfers are matched by key, as the MPI tags do, so
// a send can never meet the wrong receive. Plans are deterministic, so one
// maximal run decides: if it stops before every rank finishes, the plans
// deadlock on any transport whose sends may block.
#include <fmt/format.h>

#include <map>
#include <optional>
#include <tuple>

#include "pipeline/schedule.h"

namespace lattice::pipeline {
namespace {

struct Route {
  int peer = -1;      // stage
  int boundary = -1;  // model chunks (boundary, boundary + 1)
  bool forward = true, send = true;
};

// Where a P2P action goes, or nullopt when its chunk has no such neighbour.
std::optional<Route> route(const Action& a, int stages, int stage, int vs) {
  const int c = a.chunk * stages + stage, last = stages * vs - 1;
  const int next = (stage + 1) % stages, prev = (stage + stages - 1) % stages;
  switch (a.kind) {
    case ActionKind::send_forward:
      return c < last ? std::optional(Route{next, c, true, true}) : std::nullopt;
    case ActionKind::recv_forward:
      return c > 0 ? std::optional(Route{prev, c - 1, true, false}) : std::nullopt;
    case ActionKind::send_backward:
      return c > 0 ? std::optional(Route{prev, c - 1, false, true}) : std::nullopt;
    case ActionKind::recv_backward:
      return c < last ? std::optional(Route{next, c, false, false}) : std::nullopt;
    default:
      return std::nullopt;
  }
}

class Simulation {
 public:
  Simulation(const std::vector<Plan>& plans, int vs, VerifyReport& report)
      : plans_(plans), vs_(vs), stages_(int(plans.size())), report_(report), pc_(plans.size(), 0) {
    for (const Plan& p : plans) done_.emplace_back(p.size(), false);
  }

  // Runs to completion or deadlock; returns the completion tick of every compute action.
  std::map<std::tuple<int, int, int>, long> run() {  // (kind, microbatch, model chunk) -> tick
    std::map<std::tuple<int, int, int>, long> ticks;
    long tick = 0;
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < stages_; ++r) {
        while (pc_[size_t(r)] < plans_[size_t(r)].size()) {
          const Action& a = plans_[size_t(r)][pc_[size_t(r)]];
          if (!is_p2p(a.kind)) {
            ticks[{int(a.kind), a.microbatch, a.chunk * stages_ + r}] = ++tick;
            ++pc_[size_t(r)];
          } else if (!step_batch(r)) {
            break;
          }
          progress = true;
        }
      }
    }
    for (int r = 0; r < stages_; ++r) {
      size_t i = pc_[size_t(r)];
      if (i == plans_[size_t(r)].size()) continue;
      while (done_[size_t(r)][i]) ++i;  // the first transfer of the batch still waiting
      const Action& a = plans_[size_t(r)][i];
      report_.errors.push_back(fmt::format("deadlock: stage {} is stuck at action {}: {} {} stage {}", r, i,
                                           describe_action(a), route_of(r, a).send ? "to" : "from",
                                           route_of(r, a).peer));
    }
    return ticks;
  }

 private:
  Route route_of(int r, const Action& a) const { return *route(a, stages_, r, vs_); }
  size_t batch_end(int r) const {
    const Plan& p = plans_[size_t(r)];
    size_t e = pc_[size_t(r)] + 1;
    while (e < p.size() && is_p2p(p[e].kind) && p[e].fused) ++e;
    return e;
  }

  // Matches what it can of rank r's current batch; true when the batch completed.
  bool step_batch(int r) {
    const size_t end = batch_end(r);
    bool complete = true;
    for (size_t i = pc_[size_t(r)]; i < end; ++i) {
      if (!done_[size_t(r)][i] && !match(r, i)) complete = false;
    }
    if (complete) pc_[size_t(r)] = end;
    return complete;
  }

  bool match(int r, size_t i) {
    const Action& a = plans_[size_t(r)][i];
    const Route mine = route_of(r, a);
    const int q = mine.peer;
    if (pc_[size_t(q)] >= plans_[size_t(q)].size() || !is_p2p(plans_[size_t(q)][pc_[size_t(q)]].kind)) return false;
    for (size_t j = pc_[size_t(q)], e = batch_end(q); j < e; ++j) {
      const Action& b = plans_[size_t(q)][j];
      const Route theirs = route_of(q, b);
      if (done_[size_t(q)][j] || theirs.peer != r || theirs.send == mine.send || theirs.forward != mine.forward ||
          theirs.boundary != mine.boundary || b.microbatch != a.microbatch)
        continue;
      done_[size_t(r)][i] = done_[size_t(q)][j] = true;
      return true;
    }
    return false;
  }

  const std::vector<Plan>& plans_;
  int vs_, stages_;
  VerifyReport& report_;
  std::vector<size_t> pc_;
  std::vector<std::vector<bool>> done_;
};

// Per-rank checks: chunk range, peers, and the local data flow of each context.
void check_rank(const Plan& plan, int stages, int r, int vs, int& microbatches, VerifyReport& report) {
  struct Flow {
    bool got_input = false, forwarded = false, got_grad = false, backwarded = false;
  };
  std::map<std::pair<int, int>, Flow> flow;  // (chunk, microbatch)
  const int last = stages * vs - 1;
  auto fail = [&](size_t i, const Action& a, const std::string& why) {
    report.errors.push_back(fmt::format("stage {} action {} ({}): {}", r, i, describe_action(a), why));
  };
  for (size_t i = 0; i < plan.size(); ++i) {
    const Action& a = plan[i];
    if (a.chunk < 0 || a.chunk >= vs || a.microbatch < 0) {
      fail(i, a, fmt::format("chunk must be in [0, {}) and microbatch >= 0", vs));
      continue;
    }
    microbatches = std::max(microbatches, a.microbatch + 1);
    const int c = a.chunk * stages + r;
    Flow& f = flow[{a.chunk, a.microbatch}];
    if (is_p2p(a.kind) && !route(a, stages, r, vs)) {
      fail(i, a, fmt::format("model chunk {} has no peer for it", c));
      continue;
    }
    switch (a.kind) {
      case ActionKind::recv_forward:
        if (f.got_input || f.forwarded) fail(i, a, "input received twice or after its forward");
        f.got_input = true;
        break;
      case ActionKind::forward:
        if (f.forwarded) fail(i, a, "forward runs twice");
        if (c > 0 && !f.got_input) fail(i, a, "its input is not received before it");
        f.forwarded = true;
        break;
      case ActionKind::send_forward:
        if (!f.forwarded) fail(i, a, "sends an output its forward has not produced");
        break;
      case ActionKind::recv_backward:
        if (f.got_grad || f.backwarded) fail(i, a, "gradient received twice or after its backward");
        f.got_grad = true;
        break;
      case ActionKind::backward:
        if (!f.forwarded) fail(i, a, "backward before its forward");
        if (f.backwarded) fail(i, a, "backward runs twice");
        if (c < last && !f.got_grad) fail(i, a, "its output gradient is not received before it");
        f.backwarded = true;
        break;
      case ActionKind::send_backward:
        if (!f.backwarded) fail(i, a, "sends a gradient its backward has not produced");
        break;
    }
  }
}

// Transports without tags (NCCL) pair the transfers between two ranks in the
// order they are posted. The plans must then post them in the same order on
// both sides: rank a's sends to b, in plan order, carry the keys b's receives
// from a expect, in plan order.
void check_posting_order(const std::vector<Plan>& plans, int vs, VerifyReport& report) {
  const int stages = int(plans.size());
  using Key = std::tuple<bool, int, int>;                          // (forward, boundary, microbatch)
  std::map<std::pair<int, int>, std::vector<Key>> sent, received;  // (from, to) -> keys in posting order
  for (int r = 0; r < stages; ++r)
    for (const Action& a : plans[size_t(r)]) {
      if (!is_p2p(a.kind)) continue;
      const Route t = *route(a, stages, r, vs);
      const Key k{t.forward, t.boundary, a.microbatch};
      if (t.send)
        sent[{r, t.peer}].push_back(k);
      else
        received[{t.peer, r}].push_back(k);
    }
  for (const auto& [pair, keys] : sent) {
    const std::vector<Key>& got = received[pair];
    for (size_t i = 0; i < keys.size() && i < got.size(); ++i) {
      if (keys[i] == got[i]) continue;
      auto name = [](const Key& k) {
        return fmt::format("{} of microbatch {} across boundary {}", std::get<0>(k) ? "activation" : "gradient",
                           std::get<2>(k), std::get<1>(k));
      };
      report.errors.push_back(fmt::format(
          "posting order: transfer {} from stage {} to stage {} is the {} on the sender but the {} on the receiver "
          "(a transport without tags would pair them wrongly)",
          i, pair.first, pair.second, name(keys[i]), name(got[i])));
      break;
    }
  }
}

}  // namespace

std::string VerifyReport::text() const {
  if (ok) return "plans verified";
  std::string out;
  for (const std::string& e : errors) out += e + "\n";
  return out;
}

VerifyReport verify_plans(const std::vector<Plan>& plans, int vs) {
  VerifyReport report;
  const int stages = int(plans.size());
  int microbatches = 0;
  bool training = false;
  for (int r = 0; r < stages; ++r) {
    check_rank(plans[size_t(r)], stages, r, vs, microbatches, report);
    training = training || count_actions(plans[size_t(r)], ActionKind::backward) > 0;
  }
  if (!report.errors.empty()) {
    report.ok = false;
    return report;
  }
  check_posting_order(plans, vs, report);
  auto ticks = Simulation(plans, vs, report).run();
  if (!report.errors.empty()) {  // a deadlock: what follows would only repeat it
    report.ok = false;
    return report;
  }
  for (int mb = 0; mb < microbatches; ++mb) {
    for (int c = 0; c < stages * vs; ++c) {
      auto f = ticks.find({int(ActionKind::forward), mb, c});
      auto b = ticks.find({int(ActionKind::backward), mb, c});
      const std::string what =
          fmt::format("microbatch {} model chunk {} (stage {} chunk {})", mb, c, c % stages, c / stages);
      if (f == ticks.end()) report.errors.push_back(what + " never runs forward");
      if (training && b == ticks.end()) report.errors.push_back(what + " never runs backward");
      auto pf = ticks.find({int(ActionKind::forward), mb, c - 1});
      if (c > 0 && f != ticks.end() && pf != ticks.end() && pf->second > f->second)
        report.errors.push_back(what + " runs forward before model chunk " + std::to_string(c - 1));
      auto nb = ticks.find({int(ActionKind::backward), mb, c + 1});
      if (b != ticks.end() && nb != ticks.end() && nb->second > b->second)
        report.errors.push_back(what + " runs backward before model chunk " + std::to_string(c + 1));
    }
  }
  report.ok = report.errors.empty();
  return report;
}

}  // namespace lattice::pipeline
