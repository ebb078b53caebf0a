#include "optim/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace lattice;

TEST(GradClip, NormOverAllEntriesAndFactor) {
  ParamSpec a{.name = "a", .shape = {2}}, b{.name = "b", .shape = {1}};
  FlatParams p({a, b}, DType::f32);
  float* g = p.grads().data<float>();
  g[0] = 3, g[1] = 0, g[2] = 4;
  double norm = std::sqrt(optim::grad_sum_squares(p));
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_FLOAT_EQ(optim::clip_factor(norm, 1.0), float(1.0 / (5.0 + 1e-6)));
  EXPECT_FLOAT_EQ(optim::clip_factor(norm, 10.0), 1.0f);
  EXPECT_FLOAT_EQ(optim::clip_factor(norm, 0.0), 1.0f);
}
