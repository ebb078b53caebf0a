// bf16 matmuls on the CPU (core/kernels/cpu/matmul_bf16.h): with inputs that
// bf16 holds exactly the result equals OpenBLAS's fp32 one bit for bit (fp32
// accumulation), for every transpose, stride, alpha and beta; with arbitrary
// inputs it equals the f64 product of the bf16-rounded inputs within fp32
// accumulation error, and differs from the fp32 product (so bf16 really ran).
// The process-wide switch routes every cpu::gemm<float> (ops::gemm, linear
// layers, and attention's per-head products inside its parallel region) and
// leaves f64 alone. Skips, saying why, on CPUs without AVX512-BF16 or builds
// without oneDNN.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "core/ops.h"
#include "core/rng.h"
#include "ops_test_helpers.h"
#include "support/error_text.h"

namespace lattice {
namespace {

class Bf16Matmul : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cpu::bf16_matmul_available(&why)) GTEST_SKIP() << "no bf16 matmuls here: " << why;
  }
  void TearDown() override { cpu::set_matmul_dtype(DType::f32); }
};

// rows x cols stored with row stride ld (ld >= cols; the gap holds garbage).
std::vector<float> matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed, bool bf16_exact) {
  std::vector<float> v(size_t(rows * ld), 1e30f);
  RngKey k{.seed = seed, .purpose = RngPurpose::data};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float u = rng_uniform(k, uint64_t(r), uint64_t(c));
      // exact: multiples of 1/8 in [-4, 4] (few mantissa bits: products and sums stay exact in fp32)
      v[size_t(r * ld + c)] = bf16_exact ? std::round((u - 0.5f) * 64.0f) / 8.0f : (u - 0.5f) * 3.0f;
    }
  return v;
}

struct Gemm {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
};

TEST_F(Bf16Matmul, ExactInputsGiveTheFp32ResultBitForBit) {
  for (const Gemm& g : {Gemm{false, false, 37, 53, 64, 1.0f, 0.0f}, Gemm{false, true, 64, 48, 96, 0.5f, 1.0f},
                        Gemm{true, false, 33, 70, 40, 1.0f, 1.0f}, Gemm{true, true, 16, 16, 128, 2.0f, 0.0f}}) {
    const int64_t lda = (g.ta ? g.m : g.k) + 3, ldb = (g.tb ? g.k : g.n) + 5, ldc = g.n + 2;
    auto a = matrix(g.ta ? g.k : g.m, g.ta ? g.m : g.k, lda, 1, true);
    auto b = matrix(g.tb ? g.n : g.k, g.tb ? g.k : g.n, ldb, 2, true);
    auto c0 = matrix(g.m, g.n, ldc, 3, true);
    std::vector<float> want = c0, got = c0;
    cpu::gemm<float>(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta, want.data(), ldc);
    cpu::gemm_bf16(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta, got.data(), ldc);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j)
        ASSERT_EQ(got[size_t(i * ldc + j)], want[size_t(i * ldc + j)])
            << "ta " << g.ta << " tb " << g.tb << " at (" << i << ", " << j << ")";
    for (int64_t i = 0; i < g.m; ++i)  // the gap between rows is untouched
      for (int64_t j = g.n; j < ldc; ++j) ASSERT_EQ(got[size_t(i * ldc + j)], c0[size_t(i * ldc + j)]);
  }
}

TEST_F(Bf16Matmul, RoundsTheInputsToBf16AndAccumulatesInFp32) {
  const int64_t m = 64, n = 96, k = 768;
  auto a = matrix(m, k, k, 4, false), b = matrix(n, k, k, 5, false);  // b stored (n, k): op(b) = b^T
  std::vector<float> got(size_t(m * n)), fp32(size_t(m * n));
  cpu::gemm_bf16(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, got.data(), n);
  cpu::gemm<float>(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, fp32.data(), n);
  double worst_rounded = 0, worst_fp32 = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, norm = 0;  // f64 product of the bf16-rounded inputs
      for (int64_t p = 0; p < k; ++p) {
        const double x =
            bf16_to_f32(f32_to_bf16(a[size_t(i * k + p)])) * bf16_to_f32(f32_to_bf16(b[size_t(j * k + p)]));
        ref += x;
        norm += std::fabs(x);
      }
      worst_rounded = std::max(worst_rounded, std::fabs(got[size_t(i * n + j)] - ref) / norm);
      worst_fp32 = std::max(worst_fp32, std::fabs(double(got[size_t(i * n + j)]) - fp32[size_t(i * n + j)]) / norm);
    }
  EXPECT_LT(worst_rounded, 1e-5);  // fp32 accumulation of the rounded products
  EXPECT_GT(worst_fp32, 1e-4);     // and visibly not the fp32 product: bf16 ran
  EXPECT_LT(worst_fp32, 1e-2);     // while staying within bf16's 8 bits
}

TEST_F(Bf16Matmul, TheSwitchRoutesFloatGemmsOnly) {
  const int64_t m = 8, n = 8, k = 256;
  auto a = matrix(m, k, k, 6, false), b = matrix(k, n, n, 7, false);
  Tensor ta = Tensor::empty({m, k}, DType::f32), tb = Tensor::empty({k, n}, DType::f32);
  std::copy(a.begin(), a.end(), ta.data<float>());
  std::copy(b.begin(), b.end(), tb.data<float>());
  Tensor plain = Tensor::zeros({m, n}, DType::f32), rounded = Tensor::zeros({m, n}, DType::f32);
  ops::gemm(plain, ta, tb, false, false);
  cpu::set_matmul_dtype(DType::bf16);
  EXPECT_EQ(cpu::matmul_dtype(), DType::bf16);
  ops::gemm(rounded, ta, tb, false, false);
  std::vector<float> direct(size_t(m * n));
  cpu::gemm_bf16(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, direct.data(), n);
  int differ = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    EXPECT_EQ(rounded.data<float>()[i], direct[size_t(i)]);
    differ += rounded.data<float>()[i] != plain.data<float>()[i];
  }
  EXPECT_GT(differ, 0);
  // f64 is never rounded; a float gemm inside a parallel region (attention's per-head products) is.
  Tensor a64 = ta.to(DType::f64), b64 = tb.to(DType::f64), c64 = Tensor::zeros({m, n}, DType::f64);
  ops::gemm(c64, a64, b64, false, false);
  std::vector<float> inside(size_t(m * n));
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    cpu::gemm<float>(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, inside.data(), n);
  }
  for (int64_t i = 0; i < m * n; ++i) {
    EXPECT_NEAR(c64.data<double>()[i], plain.data<float>()[i], 1e-4);
    EXPECT_EQ(inside[size_t(i)], direct[size_t(i)]);
  }
}

// Under the switch, linear_backward rounds dout once for its two products:
// bit for bit what two gemm_bf16 calls give, and the bias gradient in fp32.
TEST_F(Bf16Matmul, LinearBackwardEqualsTwoBf16Gemms) {
  const int64_t N = 24, C = 40, OC = 56;
  auto dout = matrix(N, OC, OC, 20, false), inp = matrix(N, C, C, 21, false), w = matrix(OC, C, C, 22, false);
  auto dw0 = matrix(OC, C, C, 23, false);
  auto tensor = [](const std::vector<float>& v, Shape s) {
    Tensor t = Tensor::empty(std::move(s), DType::f32);
    std::copy(v.begin(), v.end(), t.data<float>());
    return t;
  };
  Tensor tdout = tensor(dout, {N, OC}), tinp = tensor(inp, {N, C}), tw = tensor(w, {OC, C});
  Tensor dinp = Tensor::zeros({N, C}, DType::f32), dw = tensor(dw0, {OC, C}), db = Tensor::zeros({OC}, DType::f32);
  Tensor db_fp32 = Tensor::zeros({OC}, DType::f32);
  ops::linear_backward(nullptr, nullptr, &db_fp32, tdout, tinp, tw);
  cpu::set_matmul_dtype(DType::bf16);
  ops::linear_backward(&dinp, &dw, &db, tdout, tinp, tw);
  std::vector<float> ref_dinp(size_t(N * C)), ref_dw = dw0;
  cpu::gemm_bf16(false, false, N, C, OC, 1.0f, dout.data(), OC, w.data(), C, 0.0f, ref_dinp.data(), C);
  cpu::gemm_bf16(true, false, OC, C, N, 1.0f, dout.data(), OC, inp.data(), C, 1.0f, ref_dw.data(), C);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_EQ(dinp.data<float>()[i], ref_dinp[size_t(i)]) << "dinp " << i;
  for (int64_t i = 0; i < OC * C; ++i) EXPECT_EQ(dw.data<float>()[i], ref_dw[size_t(i)]) << "dweight " << i;
  for (int64_t i = 0; i < OC; ++i) EXPECT_EQ(db.data<float>()[i], db_fp32.data<float>()[i]) << "dbias " << i;
}

// Attention under the switch: its products in bf16, so the result moves off
// fp32's, by no more than bf16 rounding of q, k, v and P explains.
TEST_F(Bf16Matmul, AttentionProductsRunInBf16) { test::expect_attention_rounded_within(DType::bf16, 2e-2); }

TEST(Bf16MatmulAvailability, SaysWhyAndRefusesToSwitchOnWithout) {
  std::string why;
  const bool ok = cpu::bf16_matmul_available(&why);
  EXPECT_FALSE(why.empty());
  if (!ok) {
    EXPECT_HAS(test::error_text([] { cpu::set_matmul_dtype(DType::bf16); }), why);
  }
  EXPECT_EQ(cpu::matmul_dtype(), DType::f32);
}

}  // namespace
}  // namespace lattice
