#include "optim/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace lattice;

TEST(GradClip, NormOverAllEntriesAndFactor) {
  ParamSpec a{.name = "a", .shape = {2}}, b{.name = "b", .shape = {1}};
  FlatParams p({a, b}, DType::f32);
  float* g = p.grads().data<float>();
  g[0] = 3, g[1] = 0, g[2] = 4;
  double norm = std::sqrt(optim::weighted_grad_squares(p, 1, 0, p.numel()));
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_FLOAT_EQ(optim::clip_factor(norm, 1.0), float(1.0 / (5.0 + 1e-6)));
  EXPECT_FLOAT_EQ(optim::clip_factor(norm, 10.0), 1.0f);
  EXPECT_FLOAT_EQ(optim::clip_factor(norm, 0.0), 1.0f);
}

TEST(GradClip, WeightedSquaresCountReplicatedOnceAndSkipTieReplicas) {
  ParamSpec w{.name = "w", .shape = {4}, .placement = Placement::column};
  ParamSpec b{.name = "b", .shape = {2}};
  ParamSpec t{.name = "t", .shape = {1}, .tie_group = "wte", .tie_replica = true};
  FlatParams p({w, b, t}, DType::f64, Device::cpu(), {.rank = 0, .size = 2});  // w holds 2 elements here
  double* g = p.grads().data<double>();
  for (int i = 0; i < 5; ++i) g[i] = i + 1;  // w: 1 2, b: 3 4, t: 5
  EXPECT_DOUBLE_EQ(optim::weighted_grad_squares(p, 2, 0, p.numel()), 1 + 4 + (9 + 16) / 2.0);
  // A range cuts entries partially: elements [1, 3) are w's second and b's first.
  EXPECT_DOUBLE_EQ(optim::weighted_grad_squares(p, 2, 1, 3), 4 + 9 / 2.0);
  EXPECT_DOUBLE_EQ(optim::weighted_grad_squares(p, 2, 4, 5), 0.0);
}
