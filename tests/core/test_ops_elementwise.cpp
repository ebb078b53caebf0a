// Tests of core/kernels/cpu/elementwise.cpp through core/ops.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "core/ops.h"
#include "ops_test_helpers.h"
#include "support/error_text.h"

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

// bf16/f16 activations: one float add or multiply per element, rounded once,
// so the 16-bit kernels equal the f32 kernels on the same values bitwise. The
// sum of squares adds the same double terms in another vector-lane order.
TEST(OpsElementwise, Act16MatchesRoundedF32Bitwise) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = act16({3, 50001}, dt, 81, 4.0), b = act16({3, 50001}, dt, 82, 4.0), out = zeros_like(a);
    Tensor a32 = as_f32(a), b32 = as_f32(b), out32 = zeros_like(a32);
    ops::add(out, a, b);
    ops::add(out32, a32, b32);
    expect_rounded_equal(out, out32);
    Tensor acc = a.clone();
    ops::add_inplace(acc, b);
    EXPECT_TRUE(bitwise_equal(acc, out));
    ops::scale_inplace(acc, 0.37);
    Tensor ref = as_f32(out);
    ops::scale_inplace(ref, 0.37);
    expect_rounded_equal(acc, ref);
    const double ss = ops::sum_squares(a32);  // the same double terms, summed in other simd lanes
    EXPECT_NEAR(ops::sum_squares(a), ss, 1e-13 * ss);
    EXPECT_TRUE(ops::all_finite(a));
  }
}

TEST(OpsElementwise, Act16NonFinite) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = act16({70000}, dt, 84);
    const uint16_t nan = dt == DType::bf16 ? 0x7fc0 : 0x7e00, inf = dt == DType::bf16 ? 0x7f80 : 0x7c00;
    Tensor y = x.clone(), z = x.clone();
    static_cast<uint16_t*>(y.raw())[65432] = nan;
    static_cast<uint16_t*>(z.raw())[7] = uint16_t(inf | 0x8000u);
    EXPECT_FALSE(ops::all_finite(y));
    EXPECT_FALSE(ops::all_finite(z));
  }
  // fp16 overflows to inf beyond 65504: the sum of two 40000s is not finite.
  Tensor big = Tensor::from(std::vector<float>{40000.0f, 1.0f}, {2}).to(DType::f16), sum = zeros_like(big);
  ops::add(sum, big, big);
  EXPECT_FALSE(ops::all_finite(sum));
  EXPECT_EQ(as_f32(sum).data<float>()[1], 2.0f);
}

TEST(OpsElementwise, Act16MixedDtypesAreOneError) {
  Tensor a = Tensor::zeros({4}, DType::bf16), b = Tensor::zeros({4}, DType::f16), c = Tensor::zeros({4}, DType::f32);
  std::string text = error_text([&] { ops::add(a, a, b); });
  EXPECT_HAS(text, "ops::add");
  EXPECT_HAS(text, "bf16");
  EXPECT_HAS(text, "f16");
  EXPECT_HAS(text, "cpu");
  EXPECT_HAS(error_text([&] { ops::add_inplace(c, a); }), "ops::add_inplace");
  EXPECT_HAS(error_text([&] { ops::sum_squares(Tensor::zeros({4}, DType::i32)); }), "bf16 or f16");
}
