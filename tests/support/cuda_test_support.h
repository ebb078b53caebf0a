// Shared fixture of the GPU tests (tests/core/cuda/test_cuda_*.cpp and the
// CUDA cases of test_ops.cpp): each test runs an op on the CPU (the
// reference) and on cuda:0 through lattice::ops, and compares.
//
// Tolerances: tolerance(DType::f32) from tests/support (rtol 1e-4, atol 1e-5)
// for kernels whose reductions run in a different order on the GPU (a fixed
// tree instead of the CPU's sequence) or whose transcendental functions differ
// in the last ulp (expf, erff, tanhf, double cos/sin); exact equality where the
// GPU does the same float operations in the same order (copies, masks, the
// embedding gradient, scaling).
//
// Without a device every test skips and says why (cudaGetDeviceCount's
// message); it never passes silently.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/kernels/cpu/matmul_f16.h"
#include "core/ops.h"
#include "support/test_support.h"

namespace lattice::test {

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
  static Tensor gpu(const Tensor& t) { return t.to(Device::cuda(0)); }
  static Tensor host(const Tensor& t) { return t.to(Device::cpu()); }
  static Tensor empty_gpu(const Shape& s) { return Tensor::empty(s, DType::f32, Device::cuda(0)); }
};

// ||got - want|| / ||want|| of two f32 host tensors, over every element, or
// over part `part` of rows made of `parts` blocks of `width` (e.g. the q, k
// or v columns of a (B, T, 3C) gradient: width C, parts 3).
inline double rel_l2(const Tensor& got, const Tensor& want, int64_t width = 1, int parts = 1, int part = 0) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if ((i % (width * parts)) / width != part) continue;
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / den);
}

// Whether attention_plain_reason's `why` is one of Lattice's own rules for
// the cuDNN it runs with (sdpa_version_refusal: 9.10.0 and 9.10.1 not at all,
// and up to 9.15.0 the fused backward needs T a multiple of 128), not a
// refusal by cuDNN: a fused-path test skips with it instead of failing.
inline bool is_cudnn_version_rule(const std::string& why) {
  return why.find("multiple of 128") != std::string::npos || why.find("known bugs") != std::string::npos;
}

// The GPU's matmuls in `d` for a scope, f32 again however it ends.
struct GpuMatmuls {
  explicit GpuMatmuls(DType d) { cuda_backend().set_matmul_dtype(d); }
  ~GpuMatmuls() { cuda_backend().set_matmul_dtype(DType::f32); }
};

// CudaOps with the GPU's matmuls in bf16 for the test (runtime.precision
// bf16), back in f32 after it, also after a skip in the test's body.
class CudaBf16Matmuls : public CudaOps {
 protected:
  void SetUp() override {
    CudaOps::SetUp();
    if (!IsSkipped()) bf16_.emplace(DType::bf16);
  }
  void TearDown() override { bf16_.reset(); }

 private:
  std::optional<GpuMatmuls> bf16_;
};

// An activation's forward(out, inp) and backward(dinp, dout, inp) on random
// inputs (scaled by `scale`) on both devices, compared at the f32 tolerance.
template <typename Forward, typename Backward>
void expect_activation_matches_cpu(Forward forward, Backward backward, const Shape& in_shape, const Shape& out_shape,
                                   uint64_t seed, double scale) {
  Tensor inp = random_tensor(in_shape, DType::f32, seed, scale), dout = random_tensor(out_shape, DType::f32, seed + 1);
  Tensor out = Tensor::empty(out_shape, DType::f32), dinp = Tensor::empty(in_shape, DType::f32);
  Tensor out_g = out.to(Device::cuda(0)), dinp_g = dinp.to(Device::cuda(0)), inp_g = inp.to(Device::cuda(0));
  forward(out, inp);
  forward(out_g, inp_g);
  EXPECT_TENSOR_NEAR(out_g.to(Device::cpu()), out, tolerance(DType::f32));
  backward(dinp, dout, inp);
  backward(dinp_g, dout.to(Device::cuda(0)), inp_g);
  EXPECT_TENSOR_NEAR(dinp_g.to(Device::cpu()), dinp, tolerance(DType::f32));
}

// runtime.precision bf16 or fp16 on the GPU rounds matmul operands to the
// 16-bit type (nearest even; in fp16 beyond 65504 to inf) and sums in fp32.
// The CPU reference is the fp32 product of the operands rounded as the CPU
// rounds them (f32_to_bf16; for fp16 the CPU emulation's own
// cpu::round_to_f16), held in fp32: t so rounded.
inline Tensor rounded_to(const Tensor& t, DType operands) {
  Tensor r = t.clone();
  float* v = r.data<float>();
  if (operands == DType::f16) {
    cpu::round_to_f16(v, t.data<float>(), 1, t.numel(), t.numel());
    return r;
  }
  for (int64_t i = 0; i < r.numel(); ++i) v[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

// i32 ids in [lo, hi) from a fixed linear congruential sequence.
inline Tensor random_ids(int64_t n, int32_t lo, int32_t hi, uint32_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + int32_t((s >> 8) % uint32_t(hi - lo));
  }
  return Tensor::from<int32_t>(v, {n});
}

}  // namespace lattice::test
