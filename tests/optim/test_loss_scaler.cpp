// LossScaler's state machine on one process: growth after growth_interval
// finite steps, skip and backoff on overflow with the counter restarted, the
// min/max clamps, the disabled mode, option and state checks with their
// one-line errors, and the state's JSON round trip (also inside an
// ordered_json, as checkpoint files are written).
// The joint decision across ranks is the trainer's (the global gradient norm):
// test_fp16_cpu checks that layouts of 2 and 8 ranks skip the steps one rank
// skips, test_hybrid_parallel_plugin_mpi that one rank's inf skips the step on all.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "comm/self_communicator.h"
#include "optim/loss_scaler.h"
#include "support/error_text.h"

namespace lattice::optim {
namespace {

LossScaleConfig small(double initial, int interval) {
  return {.initial = initial, .growth_interval = interval, .min = 1.0, .max = 1024.0};
}

TEST(LossScaler, DefaultsAreFp16Practice) {
  LossScaler s{LossScaleConfig{}};
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.state(), (LossScalerState{65536.0, 0}));
  for (int i = 1; i < 1000; ++i) ASSERT_FALSE(s.update(false));
  EXPECT_EQ(s.state(), (LossScalerState{65536.0, 999}));
  EXPECT_FALSE(s.update(false));  // the 1000th finite step doubles the scale
  EXPECT_EQ(s.state(), (LossScalerState{131072.0, 0}));
}

TEST(LossScaler, GrowsAfterEachIntervalOfFiniteSteps) {
  LossScaler s(small(8, 3));
  const double expected[] = {8, 8, 16, 16, 16, 32, 32, 32, 64};  // scale after each finite step
  const int64_t good[] = {1, 2, 0, 1, 2, 0, 1, 2, 0};
  for (int i = 0; i < 9; ++i) {
    EXPECT_FALSE(s.update(false)) << "step " << i;
    EXPECT_EQ(s.state(), (LossScalerState{expected[i], good[i]})) << "step " << i;
  }
}

TEST(LossScaler, OverflowSkipsBacksOffAndRestartsTheCount) {
  LossScaler s(small(64, 3));
  s.update(false);
  s.update(false);
  ASSERT_EQ(s.state(), (LossScalerState{64, 2}));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.state(), (LossScalerState{32, 0}));
  EXPECT_EQ(s.inv_scale(), 1.0f / 32);
  // One finite step after the overflow does not complete the old run of two.
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.state(), (LossScalerState{32, 1}));
  EXPECT_TRUE(s.update(true));  // consecutive overflows keep halving
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.state(), (LossScalerState{8, 0}));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.state(), (LossScalerState{16, 0}));
}

TEST(LossScaler, ClampsAtMinAndMax) {
  LossScaler low({.initial = 4, .growth_interval = 2, .min = 1.5, .max = 8});
  EXPECT_TRUE(low.update(true));
  EXPECT_EQ(low.scale(), 2.0f);
  EXPECT_TRUE(low.update(true));
  EXPECT_EQ(low.scale(), 1.5f);   // 1 is below min
  EXPECT_TRUE(low.update(true));  // an overflow at the minimum still skips, and stays there
  EXPECT_EQ(low.state(), (LossScalerState{1.5, 0}));

  LossScaler high({.initial = 4, .growth_interval = 1, .min = 1, .max = 6});
  EXPECT_FALSE(high.update(false));
  EXPECT_EQ(high.state(), (LossScalerState{6, 0}));  // 8 is above max
  EXPECT_FALSE(high.update(false));
  EXPECT_EQ(high.state(), (LossScalerState{6, 0}));  // the count still restarts at the maximum
  EXPECT_TRUE(high.update(true));
  EXPECT_EQ(high.state(), (LossScalerState{3, 0}));
}

TEST(LossScaler, DisabledNeverScalesNorSkips) {
  LossScaler s;
  EXPECT_FALSE(s.enabled());
  for (bool inf : {false, true, true, false}) EXPECT_FALSE(s.update(inf));
  EXPECT_EQ(s.state(), (LossScalerState{1.0, 0}));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f);
  s.load_state({1.0, 0});  // its own state loads
  EXPECT_HAS(test::error_text([&] {
               s.load_state({65536.0, 3});
             }),
             "scale 65536 with 3 good steps comes from fp16 loss scaling, but this run's scaler is disabled");
}

TEST(LossScaler, DynamicOnlyForF16) {
  EXPECT_TRUE(make_loss_scaler(DType::f16).enabled());
  EXPECT_EQ(make_loss_scaler(DType::f16, small(32, 5)).scale(), 32.0f);
  for (DType t : {DType::bf16, DType::f32, DType::f64}) {
    LossScaler s = make_loss_scaler(t, small(32, 5));
    EXPECT_FALSE(s.enabled()) << dtype_name(t);
    EXPECT_EQ(s.scale(), 1.0f) << dtype_name(t);
  }
}

// The options' one check (config's loss_scale_problem): one line naming the runtime.loss_scale key.
TEST(LossScaler, BadOptionsNameTheKey) {
  auto text = [](LossScaleConfig o) { return test::error_text([&] { LossScaler s(o); }); };
  EXPECT_HAS(text({.min = 0}), "runtime.loss_scale.min: must be > 0 and finite in fp32 (got 0)");
  EXPECT_HAS(text({.max = 1e39}), "runtime.loss_scale.max: must lie in [runtime.loss_scale.min = 1,");
  EXPECT_HAS(text({.min = 8, .max = 4}), "runtime.loss_scale.max: must lie in [runtime.loss_scale.min = 8,");
  // The fix names the bound that is in the way.
  EXPECT_HAS(text({.initial = 0.5}),
             "runtime.loss_scale.initial: must lie in [min = 1, max = 16777216] (got 0.5) — lower min to start lower");
  EXPECT_HAS(text({.initial = 1e8}),
             "runtime.loss_scale.initial: must lie in [min = 1, max = 16777216] (got 100000000) — raise max to start "
             "higher");
  EXPECT_HAS(text({.growth_factor = 1}), "runtime.loss_scale.growth_factor: must be > 1 (got 1)");
  EXPECT_HAS(text({.growth_factor = std::numeric_limits<double>::infinity()}),
             "runtime.loss_scale.growth_factor: must be > 1 (got inf) and finite");
  EXPECT_HAS(text({.backoff_factor = 1}), "runtime.loss_scale.backoff_factor: must lie in (0, 1) (got 1)");
  EXPECT_HAS(text({.backoff_factor = 0}), "runtime.loss_scale.backoff_factor: must lie in (0, 1) (got 0)");
  EXPECT_HAS(text({.growth_interval = 0}), "runtime.loss_scale.growth_interval: must be at least 1 step (got 0)");
}

TEST(LossScaler, StateRoundTripsThroughJson) {
  LossScaleConfig o = small(1000.0 / 3, 7);  // a scale with no short decimal form
  o.max = 1e6;
  LossScaler a(o);
  for (bool inf : {false, false, true, false, false, false, false, false, false, false, false})
    a.update(inf);  // 1000/3 -> halved -> doubled -> 1 good step
  ASSERT_EQ(a.state(), (LossScalerState{1000.0 / 3, 1}));

  // As a checkpoint would store it: inside an ordered_json, written and read back as text.
  nlohmann::ordered_json file;
  file["step"] = 11;
  file["loss_scaler"] = loss_scaler_state_json(a.state());
  const std::string text = file.dump(2);
  LossScaler b(o);
  b.load_state(loss_scaler_state_from_json(nlohmann::json::parse(text).at("loss_scaler")));
  EXPECT_EQ(b.state(), a.state());
  for (bool inf : {false, false, false, false, false, false, true, false}) EXPECT_EQ(b.update(inf), a.update(inf));
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(loss_scaler_state_json({65536.0, 12}).dump(), R"({"good_steps":12,"scale":65536.0})");
}

TEST(LossScaler, BadStateJsonNamesTheField) {
  auto text = [](const char* j) {
    return test::error_text([&] { loss_scaler_state_from_json(nlohmann::json::parse(j)); });
  };
  EXPECT_HAS(text(R"({"scale": 8})"), "expected an object with 'scale' and 'good_steps', got {\"scale\":8}");
  EXPECT_HAS(text("[8, 0]"), "expected an object with 'scale' and 'good_steps'");
  EXPECT_HAS(text(R"({"scale": "8", "good_steps": 0})"), "'scale' is \"8\", expected a number > 0");
  EXPECT_HAS(text(R"({"scale": 0, "good_steps": 0})"), "'scale' is 0, expected a number > 0");
  EXPECT_HAS(text(R"({"scale": 1e39, "good_steps": 0})"), "finite in fp32");
  EXPECT_HAS(text(R"({"scale": 8, "good_steps": -1})"), "'good_steps' is -1, expected an integer >= 0");
  EXPECT_HAS(text(R"({"scale": 8, "good_steps": 1.5})"), "'good_steps' is 1.5");
  EXPECT_EQ(loss_scaler_state_from_json(nlohmann::json::parse(R"({"scale": 8, "good_steps": 3})")),
            (LossScalerState{8, 3}));
}

TEST(LossScaler, LoadStateChecksItAgainstTheOptions) {
  LossScaler s(small(8, 5));
  EXPECT_HAS(test::error_text([&] {
               s.load_state({2048, 0});
             }),
             "scale 2048 is outside runtime.loss_scale [min 1, max 1024]");
  EXPECT_HAS(test::error_text([&] { s.load_state({8, 5}); }), "good_steps 5 must lie in [0, growth_interval 5)");
  EXPECT_EQ(s.state(), (LossScalerState{8, 0}));  // a refused state changes nothing
  s.load_state({1024, 4});
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.state(), (LossScalerState{1024, 0}));  // grew, clamped at max
}

}  // namespace
}  // namespace lattice::optim
