#include "pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"

namespace lattice::pipeline {
namespace {

Action compute(ActionKind k, int microbatch, int chunk) { return Action{k, microbatch, chunk, false}; }

void check_shape(int stages, int stage, int microbatches, int virtual_stages) {
  LATTICE_CHECK(stages >= 1 && stage >= 0 && stage < stages, "schedule: stage {} of {} stages", stage, stages);
  LATTICE_CHECK(microbatches >= 1, "schedule: {} microbatches (need at least 1)", microbatches);
  LATTICE_CHECK(virtual_stages >= 1, "schedule: {} virtual stages (need at least 1)", virtual_stages);
}

// Megatron's interleaved order: virtual microbatch k of the forward (or
// backward) pass -> (microbatch, chunk). Rounds of `stages` microbatches go
// through chunk 0, then chunk 1, ...; the backward walks chunks in reverse.
Action interleaved_step(ActionKind kind, int k, int stages, int virtual_stages) {
  const int round = k / (stages * virtual_stages), r = k % (stages * virtual_stages);
  int chunk = r / stages;
  if (kind == ActionKind::backward) chunk = virtual_stages - 1 - chunk;
  return compute(kind, round * stages + r % stages, chunk);
}

}  // namespace

const char* action_name(ActionKind k) {
  switch (k) {
    case ActionKind::forward:
      return "forward";
    case ActionKind::backward:
      return "backward";
    case ActionKind::send_forward:
      return "send_forward";
    case ActionKind::recv_forward:
      return "recv_forward";
    case ActionKind::send_backward:
      return "send_backward";
    case ActionKind::recv_backward:
      return "recv_backward";
  }
  return "?";
}

bool is_p2p(ActionKind k) { return k != ActionKind::forward && k != ActionKind::backward; }

std::string describe_action(const Action& a) {
  return fmt::format("{} microbatch {} chunk {}", action_name(a.kind), a.microbatch, a.chunk);
}

Plan build_plan(int stages, int stage, int virtual_stages, const std::vector<std::vector<Action>>& steps) {
  const int last_chunk = stages * virtual_stages - 1;
  auto model_chunk = [&](const Action& a) { return a.chunk * stages + stage; };
  Plan plan;
  std::vector<Action> batch;  // the sends of the previous step, then the receives of the next
  auto flush = [&] {
    for (size_t i = 0; i < batch.size(); ++i)
      plan.push_back({batch[i].kind, batch[i].microbatch, batch[i].chunk, i > 0});
    batch.clear();
  };
  for (const std::vector<Action>& step : steps) {
    for (const Action& a : step) {
      LATTICE_CHECK(!is_p2p(a.kind), "build_plan: the order holds {}", describe_action(a));
      const int c = model_chunk(a);
      if (a.kind == ActionKind::forward && c > 0)
        batch.push_back(compute(ActionKind::recv_forward, a.microbatch, a.chunk));
      if (a.kind == ActionKind::backward && c < last_chunk)
        batch.push_back(compute(ActionKind::recv_backward, a.microbatch, a.chunk));
    }
    flush();
    for (const Action& a : step) {
      const int c = model_chunk(a);
      plan.push_back(a);
      if (a.kind == ActionKind::forward && c < last_chunk)
        batch.push_back(compute(ActionKind::send_forward, a.microbatch, a.chunk));
      if (a.kind == ActionKind::backward && c > 0)
        batch.push_back(compute(ActionKind::send_backward, a.microbatch, a.chunk));
    }
  }
  flush();
  return plan;
}

Plan build_plan(int stages, int stage, int virtual_stages, const std::vector<Action>& order) {
  std::vector<std::vector<Action>> steps;
  for (const Action& a : order) steps.push_back({a});
  return build_plan(stages, stage, virtual_stages, steps);
}

Plan plan_gpipe(int stages, int stage, int microbatches) {
  check_shape(stages, stage, microbatches, 1);
  std::vector<Action> order;
  for (int i = 0; i < microbatches; ++i) order.push_back(compute(ActionKind::forward, i, 0));
  for (int i = 0; i < microbatches; ++i) order.push_back(compute(ActionKind::backward, i, 0));
  return build_plan(stages, stage, 1, order);
}

Plan plan_1f1b(int stages, int stage, int microbatches) {
  check_shape(stages, stage, microbatches, 1);
  const int warmup = std::min(stages - stage - 1, microbatches);
  std::vector<Action> order;
  for (int i = 0; i < warmup; ++i) order.push_back(compute(ActionKind::forward, i, 0));
  for (int i = 0; i < microbatches - warmup; ++i) {
    order.push_back(compute(ActionKind::forward, warmup + i, 0));
    order.push_back(compute(ActionKind::backward, i, 0));
  }
  for (int i = microbatches - warmup; i < microbatches; ++i) order.push_back(compute(ActionKind::backward, i, 0));
  return build_plan(stages, stage, 1, order);
}

Plan plan_interleaved_1f1b(int stages, int stage, int microbatches, int virtual_stages) {
  check_shape(stages, stage, microbatches, virtual_stages);
  LATTICE_CHECK(microbatches % stages == 0,
                "parallel.microbatches: {} is not a multiple of pp ({}) — the interleaved schedule runs whole rounds "
                "of pp microbatches",
                microbatches, stages);
  const int total = microbatches * virtual_stages;
  const int warmup =
      microbatches == stages ? total : std::min((stages - stage - 1) * 2 + (virtual_stages - 1) * stages, total);
  auto step = [&](ActionKind kind, int k) { return interleaved_step(kind, k, stages, virtual_stages); };
  std::vector<std::vector<Action>> steps;  // Megatron's iterations: F, then F + B, then B
  for (int k = 0; k < warmup; ++k) steps.push_back({step(ActionKind::forward, k)});
  for (int k = 0; k < total - warmup; ++k)
    steps.push_back({step(ActionKind::forward, warmup + k), step(ActionKind::backward, k)});
  for (int k = total - warmup; k < total; ++k) steps.push_back({step(ActionKind::backward, k)});
  return build_plan(stages, stage, virtual_stages, steps);
}

Plan plan_forward_only(int stages, int stage, int microbatches, int virtual_stages) {
  check_shape(stages, stage, microbatches, virtual_stages);
  std::vector<Action> order;
  if (virtual_stages == 1) {
    for (int i = 0; i < microbatches; ++i) order.push_back(compute(ActionKind::forward, i, 0));
  } else {
    LATTICE_CHECK(microbatches % stages == 0, "parallel.microbatches: {} is not a multiple of pp ({})", microbatches,
                  stages);
    for (int k = 0; k < microbatches * virtual_stages; ++k)
      order.push_back(interleaved_step(ActionKind::forward, k, stages, virtual_stages));
  }
  return build_plan(stages, stage, virtual_stages, order);
}

double bubble_theory(int stages, int microbatches, int virtual_stages) {
  const double p = stages, m = microbatches, v = virtual_stages;
  return (p - 1) / (v * m + p - 1);
}

int count_actions(const Plan& plan, ActionKind kind) {
  return int(std::count_if(plan.begin(), plan.end(), [&](const Action& a) { return a.kind == kind; }));
}

int max_in_flight(const Plan& plan) {
  const bool forward_only = count_actions(plan, ActionKind::backward) == 0;
  if (forward_only) return count_actions(plan, ActionKind::forward) > 0 ? 1 : 0;
  std::set<std::pair<int, int>> live;  // (chunk, microbatch)
  size_t most = 0;
  for (const Action& a : plan) {
    if (a.kind == ActionKind::forward) live.insert({a.chunk, a.microbatch});
    most = std::max(most, live.size());
    if (a.kind == ActionKind::backward) live.erase({a.chunk, a.microbatch});
  }
  return int(most);
}

std::string format_schedule_table(const std::vector<Plan>& plans, int virtual_stages) {
  static const std::map<ActionKind, const char*> code = {
      {ActionKind::forward, "F"},       {ActionKind::backward, "B"},       {ActionKind::send_forward, "SF"},
      {ActionKind::recv_forward, "RF"}, {ActionKind::send_backward, "SB"}, {ActionKind::recv_backward, "RB"}};
  std::vector<std::vector<std::string>> cols;
  size_t width = 6, rows = 0;
  for (const Plan& plan : plans) {
    std::vector<std::string> cells;
    for (const Action& a : plan) {
      std::string cell = fmt::format("{}{}", code.at(a.kind), a.microbatch);
      if (virtual_stages > 1) cell += fmt::format(".c{}", a.chunk);
      if (a.fused && !cells.empty()) {
        cells.back() += "+" + cell;
      } else {
        cells.push_back(cell);
      }
      width = std::max(width, cells.back().size() + 2);
    }
    rows = std::max(rows, cells.size());
    cols.push_back(std::move(cells));
  }
  std::string out = fmt::format("{:>5}", "step");
  for (size_t r = 0; r < cols.size(); ++r) out += fmt::format("  {:<{}}", fmt::format("stage {}", r), width);
  out += "\n";
  for (size_t i = 0; i < rows; ++i) {
    out += fmt::format("{:>5}", i);
    for (const auto& c : cols) out += fmt::format("  {:<{}}", i < c.size() ? c[i] : "", width);
    out += "\n";
  }
  return out;
}

}  // namespace lattice::pipeline
