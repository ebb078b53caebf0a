// Small helpers shared by the tests of core/ops (test_ops_*.cpp).
//
// The gradient checks follow one recipe: loss = sum(out * R) for a fixed
// random R, so the analytic gradient is backward(dout = R), and
// test::gradcheck compares it with central differences in f64.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "core/ops.h"
#include "support/test_support.h"

namespace lattice::test {

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
