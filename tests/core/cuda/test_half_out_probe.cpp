// Tests src/core/cuda/half_out_probe.h on the CPU: the product the CUDA
// backend runs once per device to decide whether cuBLAS may round 16-bit
// matmul outputs itself. The probe is only as good as its cases, so these
// check that its inputs are exact in the 16-bit type, that every sum is
// exact in fp32 (so the GEMM's summation order cannot change it), that the
// expected bits are Lattice's rounding, and that the cases include ties
// rounded down and up to even, values rounded each way off a tie, exact
// values, negatives, and for f16 an overflow to infinity and subnormals.
// Whether cuBLAS agrees is the GPU's question (test_cuda_matmul16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/cuda/half_out_probe.h"

namespace lattice::cuda {
namespace {

float widen(bool bf16, uint16_t h) { return bf16 ? bf16_to_f32(h) : f16_to_f32(h); }

// Whether fp32 value s lies exactly halfway between two neighbours of the
// 16-bit type (normal range): the bits below the type's significand are 1000...
bool is_tie(bool bf16, float s) {
  const uint32_t u = f32_bits(s);
  return bf16 ? (u & 0xffffu) == 0x8000u : (u & 0x1fffu) == 0x1000u;
}

class HalfOutProbeTest : public testing::TestWithParam<bool> {};

TEST_P(HalfOutProbeTest, InputsAreExactInTheType) {
  const bool bf16 = GetParam();
  const HalfOutProbe p = make_half_out_probe(bf16);
  ASSERT_EQ(p.a.size(), size_t(p.m * p.k));
  ASSERT_EQ(p.b.size(), size_t(p.k * p.n));
  ASSERT_EQ(p.k, 2);
  for (size_t i = 0; i < p.a.size(); ++i) EXPECT_EQ(widen(bf16, p.a16[i]), p.a[i]) << "a[" << i << "]";
  for (size_t i = 0; i < p.b.size(); ++i) EXPECT_EQ(widen(bf16, p.b16[i]), p.b[i]) << "b[" << i << "]";
}

TEST_P(HalfOutProbeTest, SumsAreExactInFp32AndExpectedIsLatticesRounding) {
  const bool bf16 = GetParam();
  const HalfOutProbe p = make_half_out_probe(bf16);
  ASSERT_EQ(p.sums.size(), size_t(p.m * p.n));
  ASSERT_EQ(p.expected.size(), p.sums.size());
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const size_t c = size_t(i * p.n + j);
      // Each product and the sum in double, then the same in fp32 with
      // either order: all three agree only if nothing was rounded.
      const double x = double(p.a[size_t(i * 2)]) * p.b[size_t(j)],
                   y = double(p.a[size_t(i * 2 + 1)]) * p.b[size_t(p.n + j)];
      EXPECT_EQ(double(p.sums[c]), x + y) << "C[" << i << "][" << j << "] is not exact in fp32";
      EXPECT_EQ(float(x) + float(y), p.sums[c]);
      EXPECT_EQ(float(y) + float(x), p.sums[c]);
      EXPECT_EQ(p.expected[c], bf16 ? f32_to_bf16(p.sums[c]) : f32_to_f16(p.sums[c]));
    }
}

TEST_P(HalfOutProbeTest, CoversTiesBothWaysAndEveryRoundingCase) {
  const bool bf16 = GetParam();
  const HalfOutProbe p = make_half_out_probe(bf16);
  int exact = 0, tie_down = 0, tie_up = 0, off_tie_down = 0, off_tie_up = 0, negative = 0, inf = 0, subnormal = 0;
  for (size_t c = 0; c < p.sums.size(); ++c) {
    const float s = p.sums[c], r = widen(bf16, p.expected[c]);
    negative += s < 0;
    if (std::isinf(r)) {
      ++inf;
      continue;
    }
    if (!bf16 && (p.expected[c] & 0x7c00u) == 0 && (p.expected[c] & 0x3ffu) != 0) ++subnormal;
    if (r == s) {
      ++exact;
    } else if (is_tie(bf16, s)) {
      (std::fabs(r) > std::fabs(s) ? tie_up : tie_down)++;
    } else {
      (std::fabs(r) > std::fabs(s) ? off_tie_up : off_tie_down)++;
    }
  }
  EXPECT_GT(exact, 0);
  EXPECT_GT(tie_down, 0);
  EXPECT_GT(tie_up, 0);
  EXPECT_GT(off_tie_down, 0);
  EXPECT_GT(off_tie_up, 0);
  EXPECT_GT(negative, 0);
  if (!bf16) {
    EXPECT_GT(inf, 0) << "no f16 sum overflows: a saturating conversion would pass";
    EXPECT_GT(subnormal, 0) << "no f16 subnormal: flushing to zero would pass";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, HalfOutProbeTest, testing::Values(true, false),
                         [](const testing::TestParamInfo<bool>& i) { return i.param ? "bf16" : "f16"; });

}  // namespace
}  // namespace lattice::cuda
