// The plans of every schedule, in one process: action counts, warm-up
// lengths, the transfers build_plan derives, max_in_flight and the table.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pipeline/schedule.h"

namespace lattice::pipeline {
namespace {

using K = ActionKind;

std::vector<Action> compute_only(const Plan& p) {
  std::vector<Action> out;
  for (const Action& a : p)
    if (!is_p2p(a.kind)) out.push_back(a);
  return out;
}

// Forwards before the first backward.
int warmup_of(const Plan& p) {
  int n = 0;
  for (const Action& a : p) {
    if (a.kind == K::backward) return n - 1;  // the forward that starts the steady state is not warm-up
    n += a.kind == K::forward;
  }
  return n;
}

TEST(Schedule, OneFOneBWarmsUpWithStagesMinusStageMinusOneForwards) {
  for (int stages = 1; stages <= 6; ++stages) {
    for (int stage = 0; stage < stages; ++stage) {
      for (int m = 1; m <= 9; ++m) {
        Plan p = plan_1f1b(stages, stage, m);
        SCOPED_TRACE(testing::Message() << "stages " << stages << " stage " << stage << " m " << m);
        EXPECT_EQ(count_actions(p, K::forward), m);
        EXPECT_EQ(count_actions(p, K::backward), m);
        const int warmup = std::min(stages - stage - 1, m);
        if (warmup < m) {
          EXPECT_EQ(warmup_of(p), warmup);
        }
        EXPECT_EQ(max_in_flight(p), std::min(stages - stage, m));
        // Transfers: one per boundary the stage has, per microbatch and direction.
        const int expect = stage > 0 ? m : 0;
        EXPECT_EQ(count_actions(p, K::recv_forward), expect);
        EXPECT_EQ(count_actions(p, K::send_backward), expect);
        const int expect_next = stage < stages - 1 ? m : 0;
        EXPECT_EQ(count_actions(p, K::send_forward), expect_next);
        EXPECT_EQ(count_actions(p, K::recv_backward), expect_next);
      }
    }
  }
}

TEST(Schedule, OneFOneBSteadyStateFusesTransfersLikeMegatron) {
  // Middle stage of 3, 4 microbatches: warm-up F0, then F1 [SF1+RB0] B0 [SB0+RF2] ...
  Plan p = plan_1f1b(3, 1, 4);
  const Plan head(p.begin(), p.begin() + 9);
  const Plan expect = {{K::recv_forward, 0, 0, false}, {K::forward, 0, 0, false},  {K::send_forward, 0, 0, false},
                       {K::recv_forward, 1, 0, true},  {K::forward, 1, 0, false},  {K::send_forward, 1, 0, false},
                       {K::recv_backward, 0, 0, true}, {K::backward, 0, 0, false}, {K::send_backward, 0, 0, false}};
  EXPECT_EQ(head, expect);
  EXPECT_EQ(p[9], (Action{K::recv_forward, 2, 0, true}));
}

TEST(Schedule, GPipeRunsEveryForwardThenEveryBackward) {
  for (int stages = 1; stages <= 4; ++stages) {
    for (int stage = 0; stage < stages; ++stage) {
      Plan p = plan_gpipe(stages, stage, 5);
      auto order = compute_only(p);
      ASSERT_EQ(order.size(), 10u);
      for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(order[size_t(i)], (Action{K::forward, i, 0, false}));
        EXPECT_EQ(order[size_t(5 + i)], (Action{K::backward, i, 0, false}));
      }
      EXPECT_EQ(max_in_flight(p), 5);
    }
  }
}

TEST(Schedule, InterleavedRunsRoundsOfStagesMicrobatchesThroughEachChunk) {
  const int stages = 2, v = 2, m = 4;
  for (int stage = 0; stage < stages; ++stage) {
    Plan p = plan_interleaved_1f1b(stages, stage, m, v);
    EXPECT_EQ(count_actions(p, K::forward), m * v);
    EXPECT_EQ(count_actions(p, K::backward), m * v);
    auto order = compute_only(p);
    // Forward order: (mb 0, c0) (1, c0) (0, c1) (1, c1) (2, c0) (3, c0) (2, c1) (3, c1).
    std::vector<std::pair<int, int>> fwd;
    for (const Action& a : order)
      if (a.kind == K::forward) fwd.push_back({a.microbatch, a.chunk});
    EXPECT_EQ(fwd, (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}, {3, 0}, {2, 1}, {3, 1}}));
    std::vector<std::pair<int, int>> bwd;
    for (const Action& a : order)
      if (a.kind == K::backward) bwd.push_back({a.microbatch, a.chunk});
    EXPECT_EQ(bwd, (std::vector<std::pair<int, int>>{{0, 1}, {1, 1}, {0, 0}, {1, 0}, {2, 1}, {3, 1}, {2, 0}, {3, 0}}));
    // Warm-up: (stages - stage - 1) * 2 + (v - 1) * stages.
    EXPECT_EQ(warmup_of(p), (stages - stage - 1) * 2 + (v - 1) * stages);
  }
  // microbatches == stages: everything is warm-up (Megatron), all contexts held.
  Plan all = plan_interleaved_1f1b(4, 1, 4, 2);
  EXPECT_EQ(max_in_flight(all), 8);
  EXPECT_THROW(plan_interleaved_1f1b(4, 0, 6, 2), Error);
  // The ring: stage 0 receives chunk 1's input from the last stage, which sends chunk 0's output.
  EXPECT_GT(count_actions(plan_interleaved_1f1b(2, 0, 4, 2), K::recv_forward), 0);
  EXPECT_EQ(count_actions(plan_interleaved_1f1b(2, 0, 4, 2), K::recv_forward), 4);
  EXPECT_EQ(count_actions(plan_interleaved_1f1b(2, 1, 4, 2), K::send_forward), 4);
}

TEST(Schedule, InterleavedSteadyStateBatchesFourTransfers) {
  // Megatron's steady iteration: F, B, then one batch with both sends and both receives.
  Plan p = plan_interleaved_1f1b(4, 1, 8, 2);
  size_t widest = 0;
  for (size_t i = 0; i < p.size();) {
    size_t end = i + 1;
    while (end < p.size() && is_p2p(p[end].kind) && p[end].fused) ++end;
    if (is_p2p(p[i].kind)) widest = std::max(widest, end - i);
    i = end;
  }
  EXPECT_EQ(widest, 4u);
}

TEST(Schedule, ForwardOnlyHoldsOneContext) {
  Plan p = plan_forward_only(3, 1, 4);
  EXPECT_EQ(count_actions(p, K::forward), 4);
  EXPECT_EQ(count_actions(p, K::backward), 0);
  EXPECT_EQ(count_actions(p, K::recv_backward), 0);
  EXPECT_EQ(max_in_flight(p), 1);
  Plan q = plan_forward_only(2, 0, 4, 2);
  EXPECT_EQ(count_actions(q, K::forward), 8);
  EXPECT_EQ(count_actions(q, K::send_forward), 8);  // chunk 0 -> stage 1, chunk 1 -> stage 1 chunk 1
}

TEST(Schedule, BubbleTheory) {
  EXPECT_DOUBLE_EQ(bubble_theory(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(bubble_theory(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_theory(4, 8, 2), 3.0 / 19.0);
  EXPECT_LT(bubble_theory(2, 8, 2), bubble_theory(2, 8));
}

TEST(Schedule, TableHasAColumnPerStage) {
  std::vector<Plan> plans;
  for (int s = 0; s < 2; ++s) plans.push_back(plan_1f1b(2, s, 2));
  const std::string t = format_schedule_table(plans);
  EXPECT_NE(t.find("stage 0"), std::string::npos) << t;
  EXPECT_NE(t.find("stage 1"), std::string::npos) << t;
  EXPECT_NE(t.find("SF1+RB0"), std::string::npos) << t;  // stage 0's fused transfer
  EXPECT_NE(t.find("SB0+RF1"), std::string::npos) << t;  // stage 1's
  const std::string ti = format_schedule_table({plan_interleaved_1f1b(2, 0, 2, 2)}, 2);
  EXPECT_NE(ti.find("F0.c1"), std::string::npos) << ti;
}

}  // namespace
}  // namespace lattice::pipeline
