// Small helpers shared by the tests of core/ops (test_ops_*.cpp).
//
// The gradient checks follow one recipe: loss = sum(out * R) for a fixed
// random R, so the analytic gradient is backward(dout = R), and
// test::gradcheck compares it with central differences in f64.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "core/ops.h"
#include "core/rng.h"
#include "support/act16.h"
#include "support/test_support.h"

namespace lattice::test {

// Attention forward on fixed random q, k, v in fp32 and again with the CPU
// matmul operands in `operands` (the switch is left at f32): every element
// within `tol` of fp32's, and more than half of them moved (the switch ran).
inline void expect_attention_rounded_within(DType operands, double tol) {
  const int64_t B = 2, T = 40, NH = 4, HS = 16, C = NH * HS;
  Tensor qkv = Tensor::empty({B, T, 3 * C}, DType::f32);
  RngKey key{.seed = 9, .purpose = RngPurpose::data};
  for (int64_t i = 0; i < qkv.numel(); ++i) qkv.data<float>()[i] = 2.0f * rng_uniform(key, 0, uint64_t(i)) - 1.0f;
  auto run = [&] {
    Tensor out = Tensor::zeros({B, T, C}, DType::f32), att = Tensor::zeros({B, NH, T, T}, DType::f32);
    ops::attention_forward(out, att, qkv, int(NH), ops::Dropout{});
    return out;
  };
  Tensor fp32 = run();
  cpu::set_matmul_dtype(operands);
  Tensor rounded = run();
  cpu::set_matmul_dtype(DType::f32);
  int differ = 0;
  for (int64_t i = 0; i < fp32.numel(); ++i) {
    EXPECT_NEAR(rounded.data<float>()[i], fp32.data<float>()[i], tol) << "element " << i;
    differ += rounded.data<float>()[i] != fp32.data<float>()[i];
  }
  EXPECT_GT(differ, fp32.numel() / 2);
}

// A test parameterised on a 16-bit matmul type (bf16, f16): the CPU matmuls
// run in it for the test's duration. bf16 skips, saying why, without
// AVX512-BF16 or oneDNN.
class HalfMatmulTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (GetParam() == DType::bf16 && !cpu::bf16_matmul_available(&why)) GTEST_SKIP() << "no bf16 matmuls: " << why;
    cpu::set_matmul_dtype(GetParam());
  }
  void TearDown() override { cpu::set_matmul_dtype(DType::f32); }
};
inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& p) {
  return std::string(dtype_name(p.param));
}

// rows x cols with row stride ld, values uniform in [-half_range, half_range)
// keyed by (seed, row, col); the gap between rows holds 1e30 (beyond fp16's
// range), which no product may read.
inline std::vector<float> strided_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed, float half_range) {
  std::vector<float> v(size_t(rows * ld), 1e30f);
  RngKey k{.seed = seed, .purpose = RngPurpose::data};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v[size_t(r * ld + c)] = half_range * (2.0f * rng_uniform(k, uint64_t(r), uint64_t(c)) - 1.0f);
  return v;
}

// Relative error threshold of the f64 central-difference checks (eps 1e-6).
constexpr double kGradTol = 1e-5;

inline Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype(), t.device()); }

// sum(a * b) in double, for CPU tensors of any float dtype.
inline double dot(const Tensor& a, const Tensor& b) {
  Tensor x = to_f64(a), y = to_f64(b);
  EXPECT_EQ(x.numel(), y.numel());
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += x.data<double>()[i] * y.data<double>()[i];
  return s;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Expects every analytic gradient in `grads` (input, its gradient) to match
// central differences of `loss`.
inline void expect_gradients(const std::function<double()>& loss, const std::vector<std::pair<Tensor*, Tensor>>& grads,
                             double tol = kGradTol) {
  for (size_t i = 0; i < grads.size(); ++i) {
    double err = gradcheck(loss, *grads[i].first, grads[i].second);
    EXPECT_LT(err, tol) << "gradient " << i;
  }
}

// Tensors of one run of an op, compared element-wise between dtypes.
inline void expect_f32_matches_f64(const std::vector<Tensor>& f32, const std::vector<Tensor>& f64) {
  ASSERT_EQ(f32.size(), f64.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_EQ(f32[i].dtype(), DType::f32);
    EXPECT_TENSOR_NEAR(f32[i], f64[i], tolerance(DType::f32)) << "result " << i;
  }
}

}  // namespace lattice::test
