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

// sum_into adds in double, in index order: the same bits as the loop the
// head's loss sum used to run on the host, so the loss a step reports is
// unchanged on the CPU; it accumulates, and takes one f64 and f32 only.
TEST(OpsElementwise, SumIntoAddsInDoubleInIndexOrder) {
  Tensor x = Tensor::from<float>({0.1f, 1e8f, -1e8f, 0.3f, 7.0f}, {5});
  double expect = 0;
  for (int i = 0; i < 5; ++i) expect += double(x.data<float>()[i]);
  Tensor acc = Tensor::from<double>({2.0}, {1});
  ops::sum_into(acc, x);
  EXPECT_EQ(acc.data<double>()[0], 2.0 + expect);
  ops::sum_into(acc, x);
  EXPECT_EQ(acc.data<double>()[0], (2.0 + expect) + expect);
  Tensor wrong = Tensor::zeros({1}, DType::f32);
  EXPECT_HAS(lattice::test::error_text([&] { ops::sum_into(wrong, x); }), "acc must be one f64");
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
  EXPECT_HAS(error_text([&] { ops::add(c, a, b); }), "f32 beside one 16-bit type");
  Tensor d = Tensor::zeros({4}, DType::f64);
  EXPECT_HAS(error_text([&] { ops::add_inplace(d, a); }), "ops::add_inplace");
  EXPECT_HAS(error_text([&] { ops::add_inplace(c, Tensor::zeros({5}, DType::bf16)); }), "ops::add_inplace");
  EXPECT_HAS(error_text([&] { ops::sum_squares(Tensor::zeros({4}, DType::i32)); }), "bf16 or f16");
}

// f32 beside one 16-bit type: one fp32 add, rounded once into a 16-bit out
// (an fp32 position table into 16-bit rows), exact into an f32 out (16-bit
// row gradients into the fp32 table gradient).
TEST(OpsElementwise, Act16MixedWithF32BothDirections) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = act16({3, 40001}, dt, 85), x = random_tensor({3, 40001}, DType::f32, 86);
    Tensor ref = zeros_like(x);
    ops::add(ref, as_f32(a), x);  // the f32 op on the widened values
    Tensor acc = a.clone();
    ops::add_inplace(acc, x);
    expect_rounded_equal(acc, ref);
    Tensor out = zeros_like(a);
    ops::add(out, x, a);
    expect_rounded_equal(out, ref);
    Tensor acc32 = x.clone(), out32 = zeros_like(x);
    ops::add_inplace(acc32, a);
    EXPECT_TRUE(bitwise_equal(acc32, ref));
    ops::add(out32, a, x);
    EXPECT_TRUE(bitwise_equal(out32, ref));
    Tensor b = act16({3, 40001}, dt, 87), ab = zeros_like(x), ab_ref = zeros_like(x);
    ops::add(ab, a, b);  // two 16-bit values into f32: unrounded
    ops::add(ab_ref, as_f32(a), as_f32(b));
    EXPECT_TRUE(bitwise_equal(ab, ab_ref));
  }
}

TEST(OpsElementwise, ConvertRoundsOnceAndWidensExactly) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, -70000.0f, 1e-8f, 3.0e38f, 1.00390625f};
  for (int i = 0; i < 5000; ++i) v.push_back(std::ldexp(float(i % 97) - 48.0f, i % 40 - 20) / 7.0f);
  Tensor x = Tensor::from(v, {int64_t(v.size())});
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor h = Tensor::zeros(x.shape(), dt), want = Tensor::zeros(x.shape(), dt);
    ops::convert(h, x);
    ops::round_to_half(want, x);  // the matmuls' rounding, dtype.h's converters
    EXPECT_TRUE(bitwise_equal(h, want));
    Tensor back = zeros_like(x), again = zeros_like(h);
    ops::convert(back, h);
    EXPECT_TRUE(bitwise_equal(back, as_f32(h)));  // exact widening
    ops::convert(again, back);
    EXPECT_TRUE(bitwise_equal(again, h));  // 16 -> 32 -> 16 is the identity
    Tensor copy = zeros_like(h);
    ops::convert(copy, h);
    EXPECT_TRUE(bitwise_equal(copy, h));
  }
  Tensor f16 = Tensor::zeros(x.shape(), DType::f16);
  ops::convert(f16, x);
  const Tensor w = as_f32(f16);
  EXPECT_EQ(w.data<float>()[3], 65504.0f);
  EXPECT_EQ(w.data<float>()[4], 65504.0f);                                // below the rounding edge
  EXPECT_EQ(w.data<float>()[5], std::numeric_limits<float>::infinity());  // overflows to inf
  EXPECT_EQ(w.data<float>()[6], -std::numeric_limits<float>::infinity());
  // bf16 <-> f16 goes through f32: bf16 keeps 3e38, f16 cannot.
  Tensor bf = Tensor::zeros(x.shape(), DType::bf16), bf_to_f16 = zeros_like(f16), f16_to_bf = zeros_like(bf);
  ops::convert(bf, x);
  ops::convert(bf_to_f16, bf);
  Tensor want = zeros_like(f16);
  ops::convert(want, as_f32(bf));
  EXPECT_TRUE(bitwise_equal(bf_to_f16, want));
  ops::convert(f16_to_bf, f16);
  ops::convert(want = zeros_like(bf), as_f32(f16));
  EXPECT_TRUE(bitwise_equal(f16_to_bf, want));
  EXPECT_HAS(error_text([&] { ops::convert(f16, Tensor::zeros({3}, DType::f32)); }), "ops::convert");
  EXPECT_HAS(error_text([&] { ops::convert(f16, Tensor::zeros(x.shape(), DType::i32)); }), "f32, bf16 or f16");
}

// copy_rows against an element loop over the same index arithmetic, every
// dtype (it moves bytes), a block in the middle of wider rows on both sides.
TEST(OpsElementwise, CopyRowsMovesABlockBetweenRowLengths) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t rows = 7, width = 5, src_ld = 13, dst_ld = 9, src_off = 3, dst_off = 2;
    Tensor src = Tensor::zeros({rows * src_ld + 4}, dt), dst = Tensor::zeros({rows * dst_ld + 1}, dt);
    const size_t es = dtype_size(dt);
    auto* sb = static_cast<unsigned char*>(src.raw());
    for (size_t i = 0; i < src.nbytes(); ++i) sb[i] = static_cast<unsigned char>(i * 37 + 11);
    Tensor want = dst.clone();
    auto* wb = static_cast<unsigned char*>(want.raw());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < width; ++j)
        for (size_t b = 0; b < es; ++b)
          wb[(dst_off + r * dst_ld + j) * es + b] = sb[(src_off + r * src_ld + j) * es + b];
    ops::copy_rows(dst, dst_off, dst_ld, src, src_off, src_ld, rows, width);
    EXPECT_TRUE(bitwise_equal(dst, want));
  }
  Tensor a = Tensor::zeros({40}, DType::f32), b = Tensor::zeros({40}, DType::f32);
  ops::copy_rows(a, 0, 8, b, 0, 8, 0, 3);      // nothing to copy: no check of the spans
  ops::copy_rows(a, 38, 1000, b, 0, 1, 1, 2);  // one row reads no row length
  EXPECT_HAS(error_text([&] { ops::copy_rows(a, 0, 8, b, 0, 8, 6, 3); }), "reach element 43");
  EXPECT_HAS(error_text([&] { ops::copy_rows(a, 0, 2, b, 0, 8, 2, 3); }), "rows of 3 elements overlap");
  EXPECT_HAS(error_text([&] { ops::copy_rows(a, 0, 8, a, 4, 8, 2, 3); }), "one span of memory");
  EXPECT_HAS(error_text([&] { ops::copy_rows(a, 0, 8, b, -1, 8, 2, 3); }), "must not be negative");
  EXPECT_HAS(error_text([&] { ops::copy_rows(a, 0, 8, Tensor::zeros({40}, DType::f64), 0, 8, 2, 3); }), "mixed");
}
