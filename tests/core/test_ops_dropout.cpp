// Tests of core/kernels/cpu/dropout.cpp through ops::dropout_*.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {
ops::Dropout make(float p, int64_t sample0 = 0) {
  ops::Dropout d;
  d.p = p;
  d.key.seed = 77;
  d.key.step = 4;
  d.key.layer = 2;
  d.key.site = 1;
  d.sample0 = sample0;
  return d;
}
}  // namespace

TEST(OpsDropout, MaskMatchesRngKeepAndScalesKeptElements) {
  // Rows longer than the kernel's 4096-element chunk and of a length that is
  // not a multiple of 4, so blocks of four elements straddle chunk and row ends.
  const int64_t B = 3, S = 70001;
  const float p = 0.3f;
  ops::Dropout d = make(p, 11);
  Tensor x = random_tensor({B, S}, DType::f32, 71, 2.0), y = zeros_like(x);
  ops::dropout_forward(y, x, d);
  int64_t zeros = 0, mismatches = 0;
  const float scale = 1.0f / (1.0f - p);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      bool keep = rng_keep(d.key, uint64_t(d.sample0 + b), uint64_t(s), p);
      float xv = x.data<float>()[b * S + s], yv = y.data<float>()[b * S + s];
      mismatches += keep ? yv != xv * scale : yv != 0.0f;
      zeros += !keep;
    }
  EXPECT_EQ(mismatches, 0);
  double frac = double(zeros) / double(B * S);
  EXPECT_NEAR(frac, p, 0.005);  // 5 standard deviations at this size
}

TEST(OpsDropout, SameMaskWhateverTheRowSplit) {
  ops::Dropout d = make(0.5f, 0);
  Tensor x = random_tensor({4, 37}, DType::f64, 72), y = zeros_like(x);
  ops::dropout_forward(y, x, d);
  Tensor tail = x.slice_rows(2, 4).clone(), ytail = zeros_like(tail);
  ops::dropout_forward(ytail, tail, make(0.5f, 2));
  EXPECT_TRUE(bitwise_equal(ytail, y.slice_rows(2, 4).clone()));
  // A different sample offset draws a different mask.
  Tensor yshift = zeros_like(tail);
  ops::dropout_forward(yshift, tail, make(0.5f, 0));
  EXPECT_FALSE(bitwise_equal(yshift, ytail));
}

TEST(OpsDropout, GradcheckWithRegeneratedMask) {
  ops::Dropout d = make(0.4f, 3);
  Tensor x = random_tensor({3, 10}, DType::f64, 73), R = random_tensor({3, 10}, DType::f64, 74);
  Tensor y = zeros_like(x), dx = random_tensor({3, 10}, DType::f64, 75);  // dirty: overwritten
  ops::dropout_backward(dx, R, d);
  auto loss = [&] {
    ops::dropout_forward(y, x, d);
    return dot(y, R);
  };
  expect_gradients(loss, {{&x, dx}});
}

TEST(OpsDropout, F32MatchesF64AndInPlace) {
  auto run = [](DType dt) {
    Tensor x = random_tensor({5, 33}, dt, 76), y = zeros_like(x);
    ops::dropout_forward(y, x, make(0.2f));
    ops::dropout_backward(x, x, make(0.2f));  // in place
    return std::vector<Tensor>{y, x};
  };
  std::vector<Tensor> a = run(DType::f32), b = run(DType::f64);
  expect_f32_matches_f64(a, b);
  EXPECT_TRUE(bitwise_equal(a[0], a[1]));  // forward and backward are the same map
}

TEST(OpsDropout, ZeroProbabilityCopiesAndBadProbabilityThrows) {
  Tensor x = random_tensor({2, 9}, DType::f32, 77), y = zeros_like(x);
  ops::dropout_forward(y, x, make(0.0f));
  EXPECT_TRUE(bitwise_equal(x, y));
  EXPECT_THROW(ops::dropout_forward(y, x, make(1.0f)), Error);
  EXPECT_THROW(ops::dropout_forward(y, x, make(-0.1f)), Error);
}

// bf16/f16 activations: the same mask and one float multiply per kept
// element, rounded once: bitwise the f32 kernel's result rounded.
TEST(OpsDropout, Act16MatchesRoundedF32Bitwise) {
  const ops::Dropout d = make(0.3f, 5);
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = act16({3, 9001}, dt, 72, 2.0), y = zeros_like(x);
    Tensor x32 = as_f32(x), y32 = zeros_like(x32);
    ops::dropout_forward(y, x, d);
    ops::dropout_forward(y32, x32, d);
    expect_rounded_equal(y, y32);
    ops::dropout_backward(x, x, d);  // in place
    EXPECT_TRUE(bitwise_equal(x, y));
  }
}
