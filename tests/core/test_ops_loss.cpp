// Tests of core/kernels/cpu/loss.cpp (fused softmax cross-entropy) through core/ops.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {
constexpr int kIgnore = -100;
const std::vector<int32_t> kTargets = {3, kIgnore, 0, 6, 2, kIgnore};
constexpr int64_t kN = 6, kV = 7;
constexpr float kDloss = 0.37f;

Tensor logits_of(DType dt) { return random_tensor({2, 3, kV}, dt, 61, 4.0); }
}  // namespace

TEST(OpsLoss, ForwardMatchesDefinitionAndIgnoresRows) {
  Tensor logits = logits_of(DType::f64), targets = Tensor::from<int32_t>(kTargets, {2, 3});
  Tensor losses = Tensor::zeros({2, 3}, DType::f64), lse = Tensor::zeros({2, 3}, DType::f64);
  ops::cross_entropy_forward(losses, lse, logits, targets, kIgnore);
  const double* x = logits.data<double>();
  for (int64_t n = 0; n < kN; ++n) {
    double sum = 0;
    for (int64_t j = 0; j < kV; ++j) sum += std::exp(x[n * kV + j]);
    EXPECT_NEAR(lse.data<double>()[n], std::log(sum), 1e-12);
    double expect = kTargets[size_t(n)] == kIgnore ? 0.0 : std::log(sum) - x[n * kV + kTargets[size_t(n)]];
    EXPECT_NEAR(losses.data<double>()[n], expect, 1e-12) << "row " << n;
  }
}

TEST(OpsLoss, GradcheckAndIgnoredRowsGetZeroGradient) {
  Tensor logits = logits_of(DType::f64), targets = Tensor::from<int32_t>(kTargets, {kN});
  Tensor losses = Tensor::zeros({kN}, DType::f64), lse = Tensor::zeros({kN}, DType::f64);
  ops::cross_entropy_forward(losses, lse, logits, targets, kIgnore);
  Tensor dlogits = random_tensor(logits.shape(), DType::f64, 62);  // dirty: overwritten
  ops::cross_entropy_backward(dlogits, logits, lse, targets, kDloss, kIgnore);
  auto loss = [&] {
    ops::cross_entropy_forward(losses, lse, logits, targets, kIgnore);
    double s = 0;
    for (int64_t n = 0; n < kN; ++n) s += losses.data<double>()[n];
    return double(kDloss) * s;
  };
  expect_gradients(loss, {{&logits, dlogits}});
  for (int64_t n = 0; n < kN; ++n) {
    if (kTargets[size_t(n)] != kIgnore) continue;
    for (int64_t j = 0; j < kV; ++j) EXPECT_EQ(dlogits.data<double>()[n * kV + j], 0.0);
  }
}

TEST(OpsLoss, InPlaceBackwardEqualsOutOfPlace) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor logits = logits_of(dt), targets = Tensor::from<int32_t>(kTargets, {kN});
    Tensor losses = Tensor::zeros({kN}, dt), lse = Tensor::zeros({kN}, dt);
    ops::cross_entropy_forward(losses, lse, logits, targets, kIgnore);
    Tensor separate = zeros_like(logits);
    ops::cross_entropy_backward(separate, logits, lse, targets, kDloss, kIgnore);
    ops::cross_entropy_backward(logits, logits, lse, targets, kDloss, kIgnore);
    EXPECT_TRUE(bitwise_equal(logits, separate)) << dtype_name(dt);
  }
}

TEST(OpsLoss, F32MatchesF64) {
  auto run = [](DType dt) {
    Tensor logits = logits_of(dt), targets = Tensor::from<int32_t>(kTargets, {kN});
    Tensor losses = Tensor::zeros({kN}, dt), lse = Tensor::zeros({kN}, dt), d = zeros_like(logits);
    ops::cross_entropy_forward(losses, lse, logits, targets, kIgnore);
    ops::cross_entropy_backward(d, logits, lse, targets, kDloss, kIgnore);
    return std::vector<Tensor>{losses, lse, d};
  };
  expect_f32_matches_f64(run(DType::f32), run(DType::f64));
}

// The f32 kernels take a vectorised exp (kernels/cpu/vec_math.h) and a
// blocked one-pass max / sum: on rows as wide as a vocabulary, with logits
// spread over +-40, f32 stays within the f32 tolerance of f64.
TEST(OpsLoss, F32MatchesF64OnWideRows) {
  const int64_t N = 4, V = 9001;
  const std::vector<int32_t> targets = {0, 4500, kIgnore, 9000};
  auto run = [&](DType dt) {
    Tensor logits = random_tensor({N, V}, DType::f64, 63, 80.0).to(dt), t = Tensor::from<int32_t>(targets, {N});
    Tensor losses = Tensor::zeros({N}, dt), lse = Tensor::zeros({N}, dt);
    ops::cross_entropy_forward(losses, lse, logits, t, kIgnore);
    ops::cross_entropy_backward(logits, logits, lse, t, kDloss, kIgnore);  // in place, as the models call it
    return std::vector<Tensor>{losses, lse, logits};
  };
  expect_f32_matches_f64(run(DType::f32), run(DType::f64));
}

TEST(OpsLoss, RejectsOutOfRangeTargets) {
  Tensor logits = logits_of(DType::f64), lse = Tensor::zeros({kN}, DType::f64), losses = zeros_like(lse);
  std::vector<int32_t> bad = kTargets;
  bad[2] = int32_t(kV);
  Tensor targets = Tensor::from<int32_t>(bad, {kN});
  EXPECT_THROW(ops::cross_entropy_forward(losses, lse, logits, targets, kIgnore), Error);
  Tensor short_targets = Tensor::from<int32_t>({1, 2}, {2});
  EXPECT_THROW(ops::cross_entropy_forward(losses, lse, logits, short_targets, kIgnore), Error);
}

// Cross-entropy on bf16/f16 logits with fp32 losses and lse: the row sums
// are fp32 over the widened logits, as in the f32 kernel but maybe in other
// vector lanes, so losses and lse agree to fp32 rounding; dlogits (each one
// fp32 formula, rounded once) within 1 ulp of the rounded f32 result.
TEST(OpsLoss, Act16MatchesRoundedF32) {
  const int64_t N = 9, V = 3001;
  const Tolerance tight{1e-6, 1e-6};
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[size_t(n)] = int32_t((n * 977) % V);
  t[3] = -100;  // ignored
  Tensor targets = Tensor::from<int32_t>(t, {N});
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor logits = act16({N, V}, dt, 91, 8.0), logits32 = as_f32(logits);
    Tensor losses = Tensor::zeros({N}, DType::f32), lse = zeros_like(losses);
    Tensor losses32 = zeros_like(losses), lse32 = zeros_like(losses);
    ops::cross_entropy_forward(losses, lse, logits, targets, -100);
    ops::cross_entropy_forward(losses32, lse32, logits32, targets, -100);
    EXPECT_TENSOR_NEAR(losses, losses32, tight);
    EXPECT_TENSOR_NEAR(lse, lse32, tight);
    Tensor d = zeros_like(logits), d32 = zeros_like(logits32);
    ops::cross_entropy_backward(d, logits, lse32, targets, 0.25f, -100);
    ops::cross_entropy_backward(d32, logits32, lse32, targets, 0.25f, -100);
    expect_rounded_equal(d, d32, 1);
    Tensor in_place = logits.clone();
    ops::cross_entropy_backward(in_place, in_place, lse32, targets, 0.25f, -100);
    EXPECT_TRUE(bitwise_equal(in_place, d));
    Tensor lse16 = lse.to(dt);  // statistics stay fp32
    EXPECT_THROW(ops::cross_entropy_forward(losses, lse16, logits, targets, -100), Error);
  }
}
