// GPU dropout, scale, sum of squares and the non-finite check
// (src/core/cuda/kernels.cu) against the CPU kernels. Dropout draws the same
// Philox counters on both (core/rng.h), so masks and kept values are bitwise
// equal; scaling is one float multiply on both; the sum of squares accumulates
// in double in a different order (relative 1e-10, against float rounding at
// 1e-7); all_finite is a yes or no, equal on both. On bf16/f16 activations
// (fp32 math, one rounding per store) the GPU matches the CPU's 16-bit
// kernels bitwise, the sum of squares again to 1e-10. copy_rows (a strided
// device copy) is bitwise the CPU's.
#include <algorithm>
#include <cmath>

#include "support/act16.h"
#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

ops::Dropout dropout_of(float p) {
  ops::Dropout d;
  d.p = p;
  d.key = RngKey{.seed = 1234, .purpose = RngPurpose::dropout, .step = 7, .layer = 2, .site = 1};
  d.sample0 = 5;
  return d;
}

TEST_F(CudaOps, DropoutMatchesCpuBitwise) {
  // S = 1003 is not a multiple of four: the last group of a row is partial.
  const Shape shape{3, 17, 59};
  const ops::Dropout d = dropout_of(0.3f);
  Tensor inp = random_tensor(shape, DType::f32, 1), dout = random_tensor(shape, DType::f32, 2);
  Tensor out = Tensor::empty(shape, DType::f32), dinp = Tensor::empty(shape, DType::f32);
  Tensor out_g = empty_gpu(shape), dinp_g = empty_gpu(shape);
  ops::dropout_forward(out, inp, d);
  ops::dropout_forward(out_g, gpu(inp), d);
  EXPECT_TRUE(same_bits(host(out_g), out));
  ops::dropout_backward(dinp, dout, d);
  ops::dropout_backward(dinp_g, gpu(dout), d);
  EXPECT_TRUE(same_bits(host(dinp_g), dinp));
  int64_t dropped = 0;
  for (int64_t i = 0; i < out.numel(); ++i) dropped += out.data<float>()[i] == 0.0f;
  EXPECT_NEAR(double(dropped) / double(out.numel()), 0.3, 0.05);
}

TEST_F(CudaOps, DropoutInPlaceAndZeroRate) {
  const Shape shape{4, 101};
  Tensor x = random_tensor(shape, DType::f32, 3), ref = Tensor::empty(shape, DType::f32);
  ops::dropout_forward(ref, x, dropout_of(0.5f));
  Tensor x_g = gpu(x);
  ops::dropout_forward(x_g, x_g, dropout_of(0.5f));
  EXPECT_TRUE(same_bits(host(x_g), ref));
  Tensor copy_g = empty_gpu(shape);
  ops::dropout_forward(copy_g, gpu(x), dropout_of(0.0f));
  EXPECT_TRUE(same_bits(host(copy_g), x));
}

TEST_F(CudaOps, ScaleMatchesCpuBitwise) {
  Tensor x = random_tensor({1001}, DType::f32, 4);
  Tensor x_g = gpu(x);
  ops::scale_inplace(x, 0.37);
  ops::scale_inplace(x_g, 0.37);
  EXPECT_TRUE(same_bits(host(x_g), x));
}

TEST_F(CudaOps, SumSquaresMatchesCpu) {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(300001)}) {
    SCOPED_TRACE(n);
    Tensor x = random_tensor({n}, DType::f32, 5 + uint64_t(n));
    const double cpu = ops::sum_squares(x);
    Tensor x_g = gpu(x);
    const double first = ops::sum_squares(x_g);
    EXPECT_NEAR(first, cpu, 1e-10 * cpu);
    EXPECT_EQ(ops::sum_squares(x_g), first);  // deterministic: fixed blocks, fixed tree
  }
}

// The loss sums a step adds up where they lie (ops::sum_into): the device's
// accumulator against the CPU's, over sizes of one and several grid passes,
// added twice (it accumulates; it does not overwrite).
TEST_F(CudaOps, SumIntoAccumulatesAsTheCpu) {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(300001)}) {
    SCOPED_TRACE(n);
    Tensor x = random_tensor({n}, DType::f32, 7 + uint64_t(n));
    Tensor acc = Tensor::from<double>({0.5}, {1});
    ops::sum_into(acc, x);
    ops::sum_into(acc, x);
    Tensor acc_g = gpu(Tensor::from<double>({0.5}, {1})), x_g = gpu(x);
    ops::sum_into(acc_g, x_g);
    ops::sum_into(acc_g, x_g);
    const double cpu = acc.data<double>()[0], dev = host(acc_g).data<double>()[0];
    EXPECT_NEAR(dev, cpu, 1e-10 * std::max(1.0, std::fabs(cpu)));
  }
}

// n = 300001 is more than one pass of the reduction's grid, so the bad
// element is found whether it is in a block's first pass or a later one.
TEST_F(CudaOps, AllFiniteMatchesCpu) {
  const int64_t n = 300001;
  Tensor x = random_tensor({n}, DType::f32, 20, 1e30);  // large but finite
  EXPECT_TRUE(ops::all_finite(x));
  EXPECT_TRUE(ops::all_finite(gpu(x)));
  for (int64_t at : {int64_t(0), int64_t(4097), n - 1}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      SCOPED_TRACE(testing::Message() << "x[" << at << "] = " << bad);
      Tensor y = x.clone();
      y.data<float>()[at] = bad;
      EXPECT_FALSE(ops::all_finite(y));
      EXPECT_FALSE(ops::all_finite(gpu(y)));
    }
  }
  EXPECT_TRUE(ops::all_finite(empty_gpu({0})));
}

TEST_F(CudaOps, Act16ElementwiseMatchesCpuBitwise) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    const Shape shape{3, 17, 59};
    Tensor a = act16(shape, dt, 31, 4.0), b = act16(shape, dt, 32, 4.0), out = a.clone();
    Tensor a_g = gpu(a), b_g = gpu(b), out_g = gpu(a);
    ops::add(out, a, b);
    ops::add(out_g, a_g, b_g);
    expect_rounded_equal(host(out_g), out);
    ops::add_inplace(a, b);
    ops::add_inplace(a_g, b_g);
    expect_rounded_equal(host(a_g), a);
    ops::scale_inplace(a, 0.37);
    ops::scale_inplace(a_g, 0.37);
    expect_rounded_equal(host(a_g), a);
    const double cpu = ops::sum_squares(b);
    EXPECT_NEAR(ops::sum_squares(b_g), cpu, 1e-10 * cpu);
    EXPECT_TRUE(ops::all_finite(b_g));
    static_cast<uint16_t*>(b.raw())[100] = dt == DType::bf16 ? 0x7f80 : 0x7c00;  // +inf
    EXPECT_FALSE(ops::all_finite(gpu(b)));
    const ops::Dropout d = dropout_of(0.3f);
    Tensor y = out.clone(), y_g = gpu(out);
    ops::dropout_forward(y, out, d);
    ops::dropout_forward(y_g, out_g, d);
    expect_rounded_equal(host(y_g), y);
  }
}

// The bias ops on bf16/f16 rows with an fp32 bias: the add is bitwise the
// CPU's; the column sums run in another order (a fixed tree), so the fp32
// gradient agrees to the f32 tolerance.
TEST_F(CudaOps, Act16BiasMatchesCpu) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor out = act16({37, 300}, dt, 33, 3.0), bias = random_tensor({300}, DType::f32, 34), out_g = gpu(out);
    ops::add_bias_forward(out, bias);
    ops::add_bias_forward(out_g, gpu(bias));
    expect_rounded_equal(host(out_g), out);
    Tensor db = random_tensor({300}, DType::f32, 35), db_g = gpu(db);
    ops::add_bias_backward(db, out);
    ops::add_bias_backward(db_g, out_g);
    EXPECT_TENSOR_NEAR(host(db_g), db, tolerance(DType::f32));
  }
}

// The bias gradient over 257, 1001 and 16385 rows: the column sums run in
// 2, 4 (the last one shorter) and 64 chunks of rows, the last count capped
// (launch.cuh). Each column within the bound any
// order of an fp32 sum keeps to, 2 (n - 1) u sum |x| of both results (so a
// column that cancels cannot fail on rounding), while a chunk summed twice or
// not at all is off by about sqrt(250) times the terms (at 257 and 1001
// rows; at 16385 the bound is as wide as one chunk, so there it checks only
// the capped launch).
TEST_F(CudaOps, BiasGradientOverManyRowsMatchesCpu) {
  const int64_t cols = 300;
  for (int64_t rows : {int64_t(257), int64_t(1001), int64_t(16385)})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " rows " << rows);
      const Tensor dout =
          dt == DType::f32 ? random_tensor({rows, cols}, DType::f32, 36, 3.0) : act16({rows, cols}, dt, 36, 3.0);
      Tensor db = random_tensor({cols}, DType::f32, 37), db_g = gpu(db);
      const Tensor db0 = db.clone();
      ops::add_bias_backward(db, dout);
      ops::add_bias_backward(db_g, gpu(dout));
      const Tensor got = host(db_g), wide = as_f32(dout);
      for (int64_t c = 0; c < cols; ++c) {
        double abs_sum = std::fabs(db0.data<float>()[c]);
        for (int64_t r = 0; r < rows; ++r) abs_sum += std::fabs(wide.data<float>()[r * cols + c]);
        const double bound = 2.01 * double(rows) * 0x1p-24 * abs_sum;  // gamma_n slightly above n u
        ASSERT_LE(std::fabs(double(got.data<float>()[c]) - double(db.data<float>()[c])), bound) << "column " << c;
      }
    }
}

// copy_rows on the device (one cudaMemcpy2DAsync) against the CPU's memcpy
// per row: a column block of wide rows into narrower ones and back, as the
// tp mappings split and gather, and one contiguous block.
TEST_F(CudaOps, CopyRowsMatchesCpuBitwise) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t rows = 301, wide = 96, narrow = 24;
    const Tensor full = dt == DType::f32 ? random_tensor({rows, wide}, dt, 40) : act16({rows, wide}, dt, 40, 1.0);
    Tensor part = Tensor::zeros({rows, narrow}, dt), part_g = gpu(part);
    ops::copy_rows(part, 0, narrow, full, 48, wide, rows, narrow);
    ops::copy_rows(part_g, 0, narrow, gpu(full), 48, wide, rows, narrow);
    EXPECT_TRUE(same_bits(host(part_g), part));
    Tensor back = Tensor::zeros({rows, wide}, dt), back_g = gpu(back);
    ops::copy_rows(back, 72, wide, part, 0, narrow, rows, narrow);
    ops::copy_rows(back_g, 72, wide, part_g, 0, narrow, rows, narrow);
    EXPECT_TRUE(same_bits(host(back_g), back));
    Tensor flat_g = gpu(Tensor::zeros({rows, narrow}, dt));
    ops::copy_rows(flat_g, 0, narrow, part_g, 0, narrow, rows, narrow);
    EXPECT_TRUE(same_bits(host(flat_g), part));
  }
}

}  // namespace
}  // namespace lattice::test
