// Tests of ops::add_bias_forward / add_bias_backward (the cpu::add_bias and
// cpu::bias_backward kernels of core/kernels/cpu/matmul.cpp on their own).
#include <gtest/gtest.h>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

TEST(OpsBias, ForwardAddsTheBiasToEveryRow) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor out = random_tensor({2, 3, 5}, dt, 1), bias = random_tensor({5}, dt, 2);
    Tensor before = to_f64(out), b = to_f64(bias);
    ops::add_bias_forward(out, bias);
    Tensor got = to_f64(out);
    for (int64_t n = 0; n < 6; ++n)
      for (int64_t j = 0; j < 5; ++j)
        EXPECT_NEAR(got.data<double>()[n * 5 + j], before.data<double>()[n * 5 + j] + b.data<double>()[j], 1e-6)
            << dtype_name(dt) << " row " << n << " col " << j;
  }
}

TEST(OpsBias, GradcheckAndBackwardAccumulates) {
  Tensor x = random_tensor({4, 3}, DType::f64, 3), bias = random_tensor({3}, DType::f64, 4);
  Tensor R = random_tensor({4, 3}, DType::f64, 5);
  Tensor dbias = random_tensor({3}, DType::f64, 6);  // accumulated into
  Tensor start = dbias.clone();
  ops::add_bias_backward(dbias, R);
  Tensor grad = zeros_like(bias);
  ops::add_bias_backward(grad, R);
  for (int64_t j = 0; j < 3; ++j)
    EXPECT_NEAR(dbias.data<double>()[j], start.data<double>()[j] + grad.data<double>()[j], 1e-12);
  auto loss = [&] {
    Tensor out = x.clone();
    ops::add_bias_forward(out, bias);
    return dot(out, R);
  };
  expect_gradients(loss, {{&bias, grad}});
}

TEST(OpsBias, F32MatchesF64) {
  auto run = [](DType dt) {
    Tensor out = random_tensor({7, 4}, dt, 7), bias = random_tensor({4}, dt, 8), dout = random_tensor({7, 4}, dt, 9);
    Tensor dbias = Tensor::zeros({4}, dt);
    ops::add_bias_forward(out, bias);
    ops::add_bias_backward(dbias, dout);
    return std::vector<Tensor>{out, dbias};
  };
  expect_f32_matches_f64(run(DType::f32), run(DType::f64));
}

TEST(OpsBias, RejectsMismatchedShapes) {
  Tensor out = Tensor::zeros({2, 5}, DType::f32), bias = Tensor::zeros({4}, DType::f32);
  EXPECT_THROW(ops::add_bias_forward(out, bias), Error);
  EXPECT_THROW(ops::add_bias_backward(bias, out), Error);
  Tensor b64 = Tensor::zeros({5}, DType::f64);
  EXPECT_THROW(ops::add_bias_forward(out, b64), Error);
}

// bf16/f16 rows beside an fp32 bias: one fp32 add per element rounded once,
// and column sums in fp32 in row order, as the f32 kernels: bitwise.
TEST(OpsBias, Act16MatchesF32Bitwise) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    const Shape shape{3, 97, 300};  // more than one column block and the threading threshold
    Tensor out = act16(shape, dt, 11, 3.0), bias = random_tensor({300}, DType::f32, 12);
    Tensor out32 = as_f32(out);
    ops::add_bias_forward(out, bias);
    ops::add_bias_forward(out32, bias);
    expect_rounded_equal(out, out32);
    Tensor db = random_tensor({300}, DType::f32, 13), db32 = db.clone();
    ops::add_bias_backward(db, out);
    ops::add_bias_backward(db32, as_f32(out));
    EXPECT_TRUE(bitwise_equal(db, db32));
    EXPECT_THROW(ops::add_bias_forward(out, bias.to(dt)), Error);
    EXPECT_THROW(ops::add_bias_backward(out, out), Error);
  }
}
