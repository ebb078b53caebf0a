// verify_plans: every schedule family passes on every shape up to 8 stages,
// 16 microbatches and 4 chunks; deliberately broken plans fail with a report
// that names the problem.
#include <gtest/gtest.h>

#include "pipeline/schedule.h"

namespace lattice::pipeline {
namespace {

using K = ActionKind;

template <typename Make>
std::vector<Plan> all_stages(int stages, Make make) {
  std::vector<Plan> plans;
  for (int s = 0; s < stages; ++s) plans.push_back(make(s));
  return plans;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(VerifyPlans, EveryScheduleOnEveryShapePasses) {
  int verified = 0;
  for (int stages = 1; stages <= 8; ++stages) {
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE(testing::Message() << "stages " << stages << " microbatches " << m);
      auto gpipe = all_stages(stages, [&](int s) { return plan_gpipe(stages, s, m); });
      auto ofob = all_stages(stages, [&](int s) { return plan_1f1b(stages, s, m); });
      auto fwd = all_stages(stages, [&](int s) { return plan_forward_only(stages, s, m); });
      for (const auto* plans : {&gpipe, &ofob, &fwd}) {
        VerifyReport r = verify_plans(*plans);
        EXPECT_TRUE(r.ok) << r.text();
        ++verified;
      }
      if (stages < 2 || m % stages != 0) continue;
      for (int v = 2; v <= 4; ++v) {
        SCOPED_TRACE(testing::Message() << "virtual stages " << v);
        auto inter = all_stages(stages, [&](int s) { return plan_interleaved_1f1b(stages, s, m, v); });
        auto inter_fwd = all_stages(stages, [&](int s) { return plan_forward_only(stages, s, m, v); });
        VerifyReport r = verify_plans(inter, v);
        EXPECT_TRUE(r.ok) << r.text();
        VerifyReport rf = verify_plans(inter_fwd, v);
        EXPECT_TRUE(rf.ok) << rf.text();
        verified += 2;
      }
    }
  }
  EXPECT_GT(verified, 400);
}

TEST(VerifyPlans, BothStagesSendingFirstDeadlocks) {
  // 1F1B on 2 stages with the fused transfers split: stage 0 sends forward
  // before it receives backward, stage 1 sends backward before it receives
  // forward. With blocking sends each waits for the other.
  auto plans = all_stages(2, [](int s) { return plan_1f1b(2, s, 4); });
  for (Plan& p : plans)
    for (Action& a : p) a.fused = false;
  VerifyReport r = verify_plans(plans);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(
      contains(r.text(), "deadlock: stage 0 is stuck at action 3: send_forward microbatch 1 chunk 0 to stage 1"))
      << r.text();
  EXPECT_TRUE(
      contains(r.text(), "deadlock: stage 1 is stuck at action 3: send_backward microbatch 0 chunk 0 to stage 0"))
      << r.text();
}

TEST(VerifyPlans, MissingReceiveIsReported) {
  auto plans = all_stages(3, [](int s) { return plan_1f1b(3, s, 4); });
  Plan& p = plans[2];
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].kind == K::recv_forward && p[i].microbatch == 2) {
      p.erase(p.begin() + long(i));
      break;
    }
  }
  VerifyReport r = verify_plans(plans);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.text(), "stage 2 action"));
  EXPECT_TRUE(contains(r.text(), "(forward microbatch 2 chunk 0): its input is not received before it")) << r.text();
}

TEST(VerifyPlans, ReceivesInTheWrongOrderDeadlock) {
  // Stage 1 takes microbatch 1 before 0; stage 0 sends 0 first and blocks.
  std::vector<Plan> plans = {
      plan_gpipe(2, 0, 2), build_plan(2, 1, 1, {{K::forward, 1}, {K::forward, 0}, {K::backward, 1}, {K::backward, 0}})};
  VerifyReport r = verify_plans(plans);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.text(), "stage 0 is stuck at action 1: send_forward microbatch 0 chunk 0 to stage 1"))
      << r.text();
  EXPECT_TRUE(contains(r.text(), "stage 1 is stuck at action 0: recv_forward microbatch 1 chunk 0 from stage 0"))
      << r.text();
}

TEST(VerifyPlans, MissingMicrobatchAndLocalOrderErrors) {
  // Stage 1 runs only 3 of 4 microbatches: stage 0's last send finds no receive.
  std::vector<Plan> short_plans = {plan_1f1b(2, 0, 4), plan_1f1b(2, 1, 3)};
  VerifyReport r = verify_plans(short_plans);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.text(), "stage 0 is stuck at")) << r.text();

  // A transfer with no peer: the last stage sends its output forward.
  std::vector<Plan> extra = {plan_gpipe(2, 0, 1), plan_gpipe(2, 1, 1)};
  extra[1].insert(extra[1].begin() + 2, Action{K::send_forward, 0, 0, false});
  VerifyReport e = verify_plans(extra);
  ASSERT_FALSE(e.ok);
  EXPECT_TRUE(contains(e.text(), "stage 1 action 2 (send_forward microbatch 0 chunk 0): model chunk 1 has no peer"))
      << e.text();

  // Backward before forward on one stage.
  std::vector<Plan> early = {plan_gpipe(1, 0, 2)};
  std::swap(early[0][0], early[0][2]);  // B0 first
  VerifyReport b = verify_plans(early);
  ASSERT_FALSE(b.ok);
  EXPECT_TRUE(contains(b.text(), "backward before its forward")) << b.text();

  // A microbatch that no stage ever runs backward for.
  std::vector<Plan> no_bwd = {build_plan(1, 0, 1, {{K::forward, 0}, {K::forward, 1}, {K::backward, 0}})};
  VerifyReport n = verify_plans(no_bwd);
  ASSERT_FALSE(n.ok);
  EXPECT_TRUE(contains(n.text(), "microbatch 1 model chunk 0 (stage 0 chunk 0) never runs backward")) << n.text();
}

TEST(VerifyPlans, InterleavedChunkOutOfRangeOrRingMismatch) {
  auto plans = all_stages(2, [](int s) { return plan_interleaved_1f1b(2, s, 2, 2); });
  // Verified as if there were one chunk per stage: chunk 1 is out of range.
  VerifyReport r = verify_plans(plans, 1);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.text(), "chunk must be in [0, 1)")) << r.text();
}

TEST(VerifyPlans, TransfersPostedInDifferentOrdersAreReported) {
  // One fused batch on each side: matched by key (MPI tags) this completes,
  // but NCCL pairs transfers in posting order, so microbatch 0's activation
  // would land in microbatch 1's buffer.
  std::vector<Plan> plans = {{{K::forward, 0}, {K::forward, 1}, {K::send_forward, 0}, {K::send_forward, 1, 0, true}},
                             {{K::recv_forward, 1}, {K::recv_forward, 0, 0, true}, {K::forward, 0}, {K::forward, 1}}};
  VerifyReport r = verify_plans(plans);
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.text(),
                       "posting order: transfer 0 from stage 0 to stage 1 is the activation of microbatch 0 across "
                       "boundary 0 on the sender but the activation of microbatch 1 across boundary 0 on the receiver"))
      << r.text();
}

}  // namespace
}  // namespace lattice::pipeline
