// Tests of core/kernels/cpu/elementwise.cpp through core/ops.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

TEST(OpsElementwise, AddAddInplaceScale) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor a = random_tensor({3, 50001}, dt, 81), b = random_tensor({3, 50001}, dt, 82), out = zeros_like(a);
    ops::add(out, a, b);
    Tensor a64 = to_f64(a), b64 = to_f64(b), o64 = to_f64(out);
    for (int64_t i = 0; i < a.numel(); i += 997)
      EXPECT_EQ(o64.data<double>()[i], dt == DType::f64 ? a64.data<double>()[i] + b64.data<double>()[i]
                                                        : double(float(a64.data<double>()[i] + b64.data<double>()[i])));
    Tensor acc = a.clone();
    ops::add_inplace(acc, b);
    EXPECT_TRUE(bitwise_equal(acc, out));
    ops::scale_inplace(acc, -0.5);
    Tensor acc64 = to_f64(acc);
    for (int64_t i = 0; i < a.numel(); i += 997) EXPECT_EQ(acc64.data<double>()[i], -0.5 * o64.data<double>()[i]);
  }
  Tensor a = Tensor::zeros({4}, DType::f32), b = Tensor::zeros({5}, DType::f32);
  EXPECT_THROW(ops::add(a, a, b), Error);
  EXPECT_THROW(ops::add_inplace(a, Tensor::zeros({4}, DType::f64)), Error);
}

TEST(OpsElementwise, SumSquaresIsDoubleAccurateAndThreadIndependent) {
  Tensor x = random_tensor({100003}, DType::f32, 83, 3.0);
  Tensor x64 = to_f64(x);
  double expect = 0;
  for (int64_t i = 0; i < x.numel(); ++i) expect += x64.data<double>()[i] * x64.data<double>()[i];
  double got = ops::sum_squares(x);
  EXPECT_NEAR(got, expect, 1e-12 * expect);
  EXPECT_NEAR(ops::sum_squares(x64), expect, 1e-12 * expect);
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  double one = ops::sum_squares(x);
  omp_set_num_threads(std::max(2, saved));
  double many = ops::sum_squares(x);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, many);
  EXPECT_EQ(ops::sum_squares(Tensor::zeros({0}, DType::f32)), 0.0);
}

TEST(OpsElementwise, AllFiniteFindsNanAndInf) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = random_tensor({70000}, dt, 84);
    EXPECT_TRUE(ops::all_finite(x));
    Tensor y = x.clone();
    if (dt == DType::f32)
      y.data<float>()[65432] = std::numeric_limits<float>::quiet_NaN();
    else
      y.data<double>()[65432] = std::numeric_limits<double>::quiet_NaN();
    EXPECT_FALSE(ops::all_finite(y));
    Tensor z = x.clone();
    if (dt == DType::f32)
      z.data<float>()[7] = -std::numeric_limits<float>::infinity();
    else
      z.data<double>()[7] = std::numeric_limits<double>::infinity();
    EXPECT_FALSE(ops::all_finite(z));
  }
}
