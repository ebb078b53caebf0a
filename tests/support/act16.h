// Helpers of the 16-bit activation tests (bf16 / f16 storage, fp32 math),
// shared by the CPU tests (tests/core/test_ops_*.cpp) and the GPU tests
// (tests/core/cuda/).
//
// The CPU recipe: inputs drawn in f32 and rounded to the 16-bit type (act16),
// the f32 kernel run on their exact f32 values (as_f32), its activation outputs
// rounded to the 16-bit type and compared with the 16-bit kernel's
// (expect_rounded_equal): bitwise where the f32 kernel does the same
// arithmetic, else within a stated number of 16-bit ulps.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/kernels/cpu/matmul_bf16.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "support/test_support.h"

namespace lattice::test {

constexpr DType kAct16[] = {DType::bf16, DType::f16};

// Why the CPU matmuls cannot run in 16-bit type `t` here ("" when they can):
// bf16 needs AVX512-BF16 and oneDNN (matmul_bf16.h); f16 is emulated anywhere.
inline std::string half_matmuls_missing(DType t) {
  std::string why;
  if (t == DType::bf16 && !cpu::bf16_matmul_available(&why)) return "no CPU bf16 matmuls: " + why;
  return "";
}

// The element-wise activations with 16-bit kernels, as forward and backward
// ops (backward takes dinp, dout, inp); glu: out has half of inp's columns.
struct Act16Activation {
  const char* name;
  void (*forward)(Tensor&, const Tensor&);
  void (*backward)(Tensor&, const Tensor&, const Tensor&);
  bool glu;
};
inline const Act16Activation kAct16Activations[] = {{"gelu", ops::gelu_forward, ops::gelu_backward, false},
                                                    {"gelu_erf", ops::gelu_erf_forward, ops::gelu_erf_backward, false},
                                                    {"swiglu", ops::swiglu_forward, ops::swiglu_backward, true}};

inline Tensor act16(const Shape& shape, DType dt, uint64_t seed, double scale = 1.0) {
  return random_tensor(shape, DType::f32, seed, scale).to(dt);
}
// The exact f32 values of a 16-bit CPU tensor (or of one on the GPU).
inline Tensor as_f32(const Tensor& t) { return (t.device().is_cpu() ? t : t.to(Device::cpu())).to(DType::f32); }

// Distance in units in the last place of two 16-bit values (sign-magnitude
// bits mapped onto a line, so +0 and -0 are 0 apart).
inline int ulps16(uint16_t a, uint16_t b) {
  auto line = [](uint16_t h) { return (h & 0x8000u) ? -int(h & 0x7fffu) : int(h); };
  return std::abs(line(a) - line(b));
}

// An absolute floor for comparing two implementations in 16 bits (the GPU
// against the CPU): where a result cancels to near zero, fp32 differences of
// another summation order or a fused multiply-add are a few f16 subnormal
// ulps (6e-8 each) however right both are.
inline constexpr double kCancelAtol = 2.5e-7;

// got (bf16 or f16, CPU) against ref (f32 or the same 16-bit type, CPU)
// rounded to got's dtype: at most `ulps` apart everywhere (0: bitwise
// equal), or within `atol` of each other in value.
inline void expect_rounded_equal(const Tensor& got, const Tensor& ref, int ulps = 0, double atol = 0) {
  ASSERT_EQ(got.numel(), ref.numel());
  ASSERT_TRUE(got.device().is_cpu() && ref.device().is_cpu());
  Tensor want = ref.dtype() == got.dtype() ? ref : ref.to(DType::f32).to(got.dtype());
  const auto* g = static_cast<const uint16_t*>(got.raw());
  const auto* w = static_cast<const uint16_t*>(want.raw());
  int worst = 0, bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    int d = ulps16(g[i], w[i]);
    if (d > ulps && atol > 0) {
      const bool bf = got.dtype() == DType::bf16;
      const double gv = bf ? bf16_to_f32(g[i]) : f16_to_f32(g[i]), wv = bf ? bf16_to_f32(w[i]) : f16_to_f32(w[i]);
      if (std::fabs(gv - wv) <= atol) d = ulps;
    }
    worst = std::max(worst, d);
    if (d > ulps && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": " << d << " ulps (bits " << g[i] << " vs " << w[i] << ")";
  }
  EXPECT_LE(worst, ulps) << dtype_name(got.dtype());
}

}  // namespace lattice::test
