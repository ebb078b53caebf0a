// fp16 matmuls on the CPU (core/kernels/cpu/matmul_f16.h), an emulation:
// round_to_f16 (vectorised) gives exactly the scalar reference
// f16_to_f32(f32_to_f16(x)) of core/dtype.h on every class of input
// (round-to-nearest-even ties, subnormals, the overflow edge at 65520,
// infinities, NaN, signed zeros) at every row offset, so the vector body and
// the scalar tail are both covered; gemm_f16 is bit for bit sgemm on the
// rounded operands for every transpose and stride (fp16 products are exact
// in fp32); an operand beyond 65504 turns the product into inf; and the
// process-wide switch routes every cpu::gemm<float>, attention's per-head
// products included, and leaves f64 alone.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_f16.h"
#include "core/ops.h"
#include "core/rng.h"
#include "ops_test_helpers.h"
#include "support/error_text.h"

namespace lattice {
namespace {

float reference(float x) { return f16_to_f32(f32_to_f16(x)); }

class F16Matmul : public ::testing::Test {
 protected:
  void TearDown() override { cpu::set_matmul_dtype(DType::f32); }
};

// Inputs of every class the conversion distinguishes.
std::vector<float> edge_values() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          -65504.0f,
                          65519.0f,
                          65520.0f,
                          -65520.0f,
                          65536.0f,
                          1e6f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          5.96046448e-8f,   // 2^-24, the smallest fp16 subnormal
                          2.98023224e-8f,   // 2^-25: a tie between 0 and 2^-24, to even (0)
                          2.98023259e-8f,   // just above it: up to 2^-24
                          8.94069672e-8f,   // 1.5 * 2^-24: a tie, to even (2 * 2^-24)
                          6.09755516e-5f,   // the largest fp16 subnormal
                          6.10351562e-5f};  // 2^-14, the smallest fp16 normal
  // Ties at 1 (an fp16 ulp is 2^-10 there): 1 + 2^-11 to 1, 1 + 3 * 2^-11 and 1 + 5 * 2^-11 to 1 + 2^-9.
  for (int k : {1, 3, 5})
    v.push_back(1.0f + float(k) * std::ldexp(1.0f, -11)), v.push_back(-1.0f - float(k) * std::ldexp(1.0f, -11));
  // Every bit pattern near a few binades, ties and non-ties alike.
  for (uint32_t base : {0x3f800000u, 0x33800000u, 0x38800000u, 0x477fe000u, 0x387fc000u})
    for (uint32_t d = 0; d < 0x4000u; d += 0x3fu)
      v.push_back(f32_from_bits(base + d)), v.push_back(f32_from_bits(base - d));
  RngKey key{.seed = 3, .purpose = RngPurpose::data};
  for (uint64_t i = 0; i < 20000; ++i)  // random signs and exponents from 2^-30 to 2^20
    v.push_back((rng_uniform(key, 0, i) < 0.5f ? -1.0f : 1.0f) *
                std::ldexp(1.0f + rng_uniform(key, 1, i), int(rng_uniform(key, 2, i) * 50) - 30));
  return v;
}

TEST(RoundToF16, MatchesTheScalarReferenceOnEveryInputClass) {
  const std::vector<float> v = edge_values();
  // Each offset shifts where the vector body ends and the scalar tail starts.
  for (int64_t off : {0, 1, 7, 15}) {
    const int64_t n = int64_t(v.size()) - off;
    std::vector<float> out(static_cast<size_t>(n));
    cpu::round_to_f16(out.data(), v.data() + off, 1, n, n);
    for (int64_t i = 0; i < n; ++i) {
      const float x = v[size_t(i + off)], want = reference(x), got = out[size_t(i)];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "x " << x;
      } else {
        EXPECT_EQ(f32_bits(got), f32_bits(want)) << "x " << x << " (bits " << std::hex << f32_bits(x) << ")";
      }
    }
  }
  // Spot checks of the reference itself, so both cannot be wrong together.
  EXPECT_EQ(reference(65504.0f), 65504.0f);
  EXPECT_EQ(reference(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(reference(65520.0f)));  // the tie at the top rounds to even: inf
  EXPECT_EQ(reference(1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_EQ(reference(1.0f + 3 * std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(reference(2.98023224e-8f), 0.0f);
  EXPECT_EQ(reference(8.94069672e-8f), 2 * 5.96046448e-8f);
  EXPECT_TRUE(std::signbit(reference(-0.0f)));
}

TEST(RoundToF16, StridedRowsArePacked) {
  const int64_t rows = 5, cols = 37, ld = 41;
  std::vector<float> src(size_t(rows * ld));
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0.001f * float(i) + 1e-4f;
  std::vector<float> out(size_t(rows * cols));
  cpu::round_to_f16(out.data(), src.data(), rows, cols, ld);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(out[size_t(r * cols + c)], reference(src[size_t(r * ld + c)]));
}

// rows x cols with row stride ld (the gap holds garbage), values in [-2, 2).
std::vector<float> matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  return test::strided_matrix(rows, cols, ld, seed, 2.0f);
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = reference(x);
  return v;
}

TEST_F(F16Matmul, GemmIsSgemmOnTheRoundedOperands) {
  const int64_t m = 19, n = 23, k = 71;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a " << ta << " trans_b " << tb);
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
      auto a = matrix(ta ? k : m, ta ? m : k, lda, 1), b = matrix(tb ? n : k, tb ? k : n, ldb, 2);
      auto c = matrix(m, n, ldc, 3), want = c;
      cpu::gemm_f16(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, c.data(), ldc);
      const auto ar = rounded(a), br = rounded(b);
      cpu::gemm<float>(ta, tb, m, n, k, 0.5f, ar.data(), lda, br.data(), ldb, 0.25f, want.data(), ldc);
      int differ_from_fp32 = 0;
      auto fp32 = matrix(m, n, ldc, 3);
      cpu::gemm<float>(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, fp32.data(), ldc);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const size_t at = size_t(i * ldc + j);
          EXPECT_EQ(c[at], want[at]) << i << ", " << j;
          differ_from_fp32 += c[at] != fp32[at];
        }
      EXPECT_GT(differ_from_fp32, m * n / 2) << "fp16 rounding changed nothing";
    }
}

TEST_F(F16Matmul, AnOperandBeyond65504OverflowsToInf) {
  std::vector<float> a = {70000.0f, 1.0f}, b = {1e-3f, 1.0f}, c(1);
  cpu::gemm_f16(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1);
  EXPECT_TRUE(std::isinf(c[0])) << c[0];  // fp32 would give 71
  a[0] = 65504.0f;
  cpu::gemm_f16(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1);
  EXPECT_TRUE(std::isfinite(c[0]));
}

TEST_F(F16Matmul, TheSwitchRoutesFloatGemmsOnly) {
  const int64_t m = 8, n = 8, k = 256;
  auto a = matrix(m, k, k, 6), b = matrix(k, n, n, 7);
  std::vector<float> plain(size_t(m * n)), direct(size_t(m * n)), routed(size_t(m * n)), inside(size_t(m * n));
  cpu::gemm<float>(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, plain.data(), n);
  cpu::gemm_f16(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, direct.data(), n);
  cpu::set_matmul_dtype(DType::f16);
  EXPECT_EQ(cpu::matmul_dtype(), DType::f16);
  cpu::gemm<float>(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, routed.data(), n);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    cpu::gemm<float>(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, inside.data(), n);
  }
  std::vector<double> a64(a.begin(), a.end()), b64(b.begin(), b.end()), c64(size_t(m * n));
  cpu::gemm<double>(false, false, m, n, k, 1.0, a64.data(), k, b64.data(), n, 0.0, c64.data(), n);
  int differ = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(routed[i], direct[i]);
    EXPECT_EQ(inside[i], direct[i]);
    EXPECT_NEAR(c64[i], plain[i], 1e-4);  // f64 is never rounded
    differ += routed[i] != plain[i];
  }
  EXPECT_GT(differ, 0);
}

// Attention under the switch: its products in fp16, so the result moves off
// fp32's, by no more than fp16 rounding of q, k, v and P explains.
TEST_F(F16Matmul, AttentionProductsRunInF16) { test::expect_attention_rounded_within(DType::f16, 4e-3); }

TEST(MatmulDtype, RefusesTypesThatAreNotMatmulOperands) {
  EXPECT_HAS(test::error_text([] { cpu::set_matmul_dtype(DType::i32); }), "must be f32, bf16 or f16, not i32");
  EXPECT_EQ(cpu::matmul_dtype(), DType::f32);
}

}  // namespace
}  // namespace lattice
