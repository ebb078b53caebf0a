// FlatParams: one flat buffer of named views, laid out from the table, with
// initial values keyed by (seed, name, logical element) — independent of the
// table's order and of which other parameters exist.
#include "core/param.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace lattice;

namespace {
ParamSpec normal(std::string name, Shape shape, float std) {
  return ParamSpec{.name = std::move(name), .shape = std::move(shape), .weight_decay = true,
                   .init = InitKind::normal, .init_std = std};
}
}  // namespace

TEST(FlatParams, LayoutViewsAndGradients) {
  ParamSpec b{.name = "b", .shape = {3}, .init = InitKind::ones};
  FlatParams p({normal("w", {2, 3}, 0.02f), b}, DType::f32);
  EXPECT_EQ(p.numel(), 9);
  EXPECT_EQ(p.entry("b").offset, 6);
  EXPECT_EQ(p.value("w").shape(), (Shape{2, 3}));
  EXPECT_TRUE(p.value("b").same_storage(p.values()));
  p.grad("b").data<float>()[1] = 4.0f;
  EXPECT_EQ(p.grads().data<float>()[7], 4.0f);
  p.zero_grad();
  EXPECT_EQ(p.grads().data<float>()[7], 0.0f);
  EXPECT_THROW(p.value("nope"), Error);
  EXPECT_THROW(FlatParams({b, b}, DType::f32), Error);
}

TEST(FlatParams, InitDependsOnNameSeedAndElementOnly) {
  FlatParams a({normal("x", {64}, 0.5f), normal("y", {4, 8}, 1.0f)}, DType::f32);
  FlatParams b({normal("y", {4, 8}, 1.0f)}, DType::f64);  // other order, other dtype, no "x"
  a.init(5);
  b.init(5);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(a.value("y").data<float>()[i], float(b.value("y").data<double>()[i]));
  FlatParams c({normal("y", {4, 8}, 1.0f)}, DType::f64);
  c.init(6);
  EXPECT_NE(c.value("y").data<double>()[0], b.value("y").data<double>()[0]);
  double sum2 = 0;
  for (int i = 0; i < 64; ++i) sum2 += std::pow(a.value("x").data<float>()[i], 2);
  EXPECT_NEAR(std::sqrt(sum2 / 64), 0.5, 0.15);
}
