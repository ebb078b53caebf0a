// Tests of core/kernels/cpu/vec_math.h: the vectorisable exp, sigmoid and erfc against
// f64 libm, and the softmax row pieces against plain two-pass references.
// This file is compiled with the kernels' flags (tests/core/CMakeLists.txt),
// so its `omp simd` loops vectorise the way the kernels' do.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/cpu/vec_math.h"
#include "core/rng.h"

using namespace lattice;
using namespace lattice::cpu;

namespace {

// Spacing of floats at |v| (one ulp).
double ulp_at(double v) {
  const float f = std::fabs(float(v));
  return double(std::nextafter(f, std::numeric_limits<float>::infinity())) - double(f);
}

std::vector<float> uniform_row(int64_t n, float lo, float hi, uint64_t seed) {
  RngKey k;
  k.seed = seed;
  k.purpose = RngPurpose::data;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = lo + (hi - lo) * rng_uniform(k, 0, uint64_t(i));
  return x;
}

// max and sum of exp(x - max) in double, two passes.
std::pair<double, double> reference_max_sum(const std::vector<float>& x) {
  double m = -INFINITY, s = 0;
  for (float v : x) m = std::max(m, double(v));
  if (m == -INFINITY) return {m, 0.0};
  for (float v : x) s += std::exp(double(v) - m);
  return {m, s};
}

}  // namespace

// Over the whole finite range, through the vectorised loop (exp_minus with
// shift 0) and the scalar call: within 1.1 ulp of the f64 exp, rounded.
TEST(VecMath, ExpF32IsWithinAnUlpOfF64) {
  const int64_t n = 2000001;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = -87.3f + 175.3f * float(i) / float(n - 1);
  exp_minus(y.data(), x.data(), n, 0.0f);
  for (int64_t i = 0; i < n; i += 1) {
    const double ref = std::exp(double(x[size_t(i)]));
    ASSERT_LE(std::fabs(double(y[size_t(i)]) - ref), 1.1 * ulp_at(ref)) << "x = " << x[size_t(i)];
    if (i % 97 == 0) {
      ASSERT_EQ(exp_f32(x[size_t(i)]), y[size_t(i)]) << "scalar and vector differ at " << x[size_t(i)];
    }
  }
}

TEST(VecMath, ExpF32Limits) {
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-87.31f), 0.0f);  // below the normal range: 0, as expf rounds toward there
  EXPECT_EQ(exp_f32(-1e4f), 0.0f);
  EXPECT_EQ(exp_f32(-INFINITY), 0.0f);       // so masked (-inf) scores add exactly nothing
  EXPECT_EQ(exp_f32(1e4f), exp_f32(88.0f));  // clamped: finite, not inf
  EXPECT_TRUE(std::isfinite(exp_f32(INFINITY)));
  EXPECT_TRUE(std::isnan(exp_f32(NAN)));
  EXPECT_EQ(exp_of(-0.5), std::exp(-0.5));  // double: libm
}

TEST(VecMath, SigmoidF32IsCloseToF64) {
  for (int i = 0; i <= 400000; ++i) {
    const float x = -40.0f + 80.0f * float(i) / 400000.0f;
    const double want = 1.0 / (1.0 + std::exp(-double(x)));
    ASSERT_NEAR(sigmoid_f32(x), want, 2e-7 * want + 1e-30) << "x = " << x;
  }
  EXPECT_EQ(sigmoid_f32(1e4f), 1.0f);
  EXPECT_GE(sigmoid_f32(-1e4f), 0.0f);
  EXPECT_LT(sigmoid_f32(-1e4f), 1e-37f);
}

// Relative accuracy of erfc over the range where it is a normal float, and of
// Phi in both tails (GELU's x Phi(x) needs the left tail relative, the right
// tail absolute).
TEST(VecMath, ErfcAndNormalCdfF32AreCloseToF64) {
  for (int i = 0; i <= 400000; ++i) {
    const float z = 9.0f * float(i) / 400000.0f;
    const double want = std::erfc(double(z));
    ASSERT_NEAR(erfc_pos_f32(z), want, (z < 4.0f ? 2e-6 : 8e-6) * want) << "z = " << z;
  }
  EXPECT_EQ(erfc_pos_f32(0.0f), 1.0f);
  EXPECT_EQ(erfc_pos_f32(20.0f), 0.0f);
  for (int i = 0; i <= 400000; ++i) {
    const float x = -12.0f + 24.0f * float(i) / 400000.0f;
    const double want = 0.5 * std::erfc(-double(x) / std::sqrt(2.0));
    ASSERT_NEAR(normal_cdf_f32(x), want, 2e-6 * want + 1e-7) << "x = " << x;
    // Left tail, relative: rounding x / sqrt 2 to float alone moves e^(-x^2 / 2) by up to x^2 6e-8.
    if (x < -1.0f) {
      ASSERT_NEAR(normal_cdf_f32(x), want, (2e-6 + 1.5e-7 * double(x) * double(x)) * want) << "left tail, x = " << x;
    }
  }
  EXPECT_EQ(normal_cdf_f32(20.0f), 1.0f);
  EXPECT_TRUE(std::isnan(normal_cdf_f32(NAN)));
}

// The one-pass blocked statistics against two passes in f64: a wide row as
// the LM head's, one whose max grows block by block (every block rescales the
// running sum), and rows with -inf blocks.
TEST(VecMath, MaxSumExpMatchesTwoPasses) {
  std::vector<std::vector<float>> rows = {uniform_row(50257, -30.0f, 30.0f, 1), uniform_row(7, -3.0f, 3.0f, 2)};
  std::vector<float> rising(9000);
  for (size_t i = 0; i < rising.size(); ++i) rising[i] = -20.0f + 0.004f * float(i);
  rows.push_back(rising);
  std::vector<float> masked = uniform_row(5000, -5.0f, 5.0f, 3);
  std::fill(masked.begin(), masked.begin() + 2500, -INFINITY);  // a whole leading block of -inf
  rows.push_back(masked);
  rows.push_back(std::vector<float>(3000, -INFINITY));
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto [m, s] = reference_max_sum(rows[r]);
    const MaxSumExp<float> got = max_sum_exp(rows[r].data(), int64_t(rows[r].size()));
    EXPECT_EQ(double(got.max), m) << "row " << r;
    EXPECT_NEAR(double(got.sum), s, 1e-5 * s) << "row " << r;
    EXPECT_EQ(max_of(rows[r].data(), int64_t(rows[r].size())), got.max) << "row " << r;
  }
}

// softmax_row_inplace and softmax_row_backward against f64 on a row with
// large logits (max subtraction needed) and the exp's whole useful range.
TEST(VecMath, SoftmaxRowPiecesMatchF64) {
  std::vector<float> x = uniform_row(1000, -90.0f, 60.0f, 4), dy = uniform_row(1000, -1.0f, 1.0f, 5);
  const auto [m, s] = reference_max_sum(x);
  std::vector<float> y = x, dx(x.size());
  softmax_row_inplace(y.data(), int64_t(y.size()));
  double dot = 0;
  for (size_t j = 0; j < x.size(); ++j) dot += double(dy[j]) * std::exp(double(x[j]) - m) / s;
  softmax_row_backward(dx.data(), dy.data(), y.data(), int64_t(y.size()));
  for (size_t j = 0; j < x.size(); ++j) {
    // x - max is rounded to float first: relative error |x - max| 2^-24 on top of a few ulp.
    const double p = std::exp(double(x[j]) - m) / s, rel = 4e-7 + (m - double(x[j])) * 6e-8;
    ASSERT_NEAR(y[j], p, rel * p + 1e-37) << "j = " << j;
    ASSERT_NEAR(dx[j], p * (double(dy[j]) - dot), rel * p + 1e-37) << "j = " << j;
  }
}
