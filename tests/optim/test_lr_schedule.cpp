#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

using namespace lattice::optim;

TEST(LrSchedule, WarmupThenCosineToMinLr) {
  LrSchedule s{.lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110, .decay = Decay::cosine};
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 1.0);
  EXPECT_NEAR(learning_rate(s, 60), 0.1 + 0.9 * 0.5, 1e-12);  // half way: cos(pi/2) = 0
  EXPECT_NEAR(learning_rate(s, 110), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(s, 500), 0.1, 1e-12);  // past the horizon stays at min_lr
}

// decay_steps: warm-up, lr held (the stable phase), then the decay over the
// last decay_steps steps only, ending at min_lr at the horizon.
TEST(LrSchedule, WarmupStableDecay) {
  LrSchedule s{.lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110, .decay = Decay::linear,
               .decay_steps = 20};
  EXPECT_DOUBLE_EQ(learning_rate(s, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 50), 1.0);   // stable
  EXPECT_DOUBLE_EQ(learning_rate(s, 90), 1.0);   // the decay's step 0
  EXPECT_NEAR(learning_rate(s, 100), 0.55, 1e-12);  // half way down
  EXPECT_NEAR(learning_rate(s, 110), 0.1, 1e-12);
  s.decay = Decay::cosine;
  EXPECT_DOUBLE_EQ(learning_rate(s, 89), 1.0);
  EXPECT_NEAR(learning_rate(s, 100), 0.55, 1e-12);  // cos(pi/2) = 0
  EXPECT_NEAR(learning_rate(s, 110), 0.1, 1e-12);
  // Decaying over every step after the warm-up is decay_steps 0.
  LrSchedule all = s, last = s;
  all.decay_steps = 0, last.decay_steps = 100;
  for (int64_t step : {11, 40, 77, 110}) EXPECT_DOUBLE_EQ(learning_rate(all, step), learning_rate(last, step)) << step;
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule s{.lr = 2.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 100, .decay = Decay::linear};
  EXPECT_NEAR(learning_rate(s, 25), 1.5, 1e-12);
  s.decay = Decay::constant;
  EXPECT_DOUBLE_EQ(learning_rate(s, 77), 2.0);
  EXPECT_THROW(decay_from_name("exponential"), lattice::Error);
}
