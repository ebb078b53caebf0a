// Tests of core/kernels/cpu/matmul.cpp through ops::gemm / ops::linear_*.
#include <gtest/gtest.h>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

// c = alpha * op(a) op(b) + beta * c by a triple loop in double.
Tensor naive_gemm(const Tensor& c0, const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, double beta) {
  Tensor A = to_f64(a), Bm = to_f64(b), C = to_f64(c0);
  int64_t M = C.dim(0), N = C.dim(1), K = ta ? A.dim(0) : A.dim(1);
  const double *pa = A.data<double>(), *pb = Bm.data<double>();
  double* pc = C.data<double>();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += (ta ? pa[k * M + i] : pa[i * K + k]) * (tb ? pb[j * K + k] : pb[k * N + j]);
      pc[i * N + j] = alpha * s + beta * pc[i * N + j];
    }
  return C;
}

struct Linear {
  Tensor inp, weight, bias, R;
};
Linear make_linear(DType dt) {
  return {random_tensor({2, 3, 4}, dt, 1), random_tensor({5, 4}, dt, 2), random_tensor({5}, dt, 3),
          random_tensor({2, 3, 5}, dt, 4)};
}

}  // namespace

TEST(OpsMatmul, GemmAllTransposesMatchTripleLoop) {
  const int64_t M = 5, N = 7, K = 3;
  for (DType dt : {DType::f64, DType::f32})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, dt, 11);
        Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, dt, 12);
        Tensor c = random_tensor({M, N}, dt, 13);
        Tensor expect = naive_gemm(c, a, b, ta, tb, 0.7, 0.3);
        ops::gemm(c, a, b, ta, tb, 0.7f, 0.3f);
        EXPECT_TENSOR_NEAR(c, expect, tolerance(dt == DType::f64 ? DType::f64 : DType::f32))
            << "trans_a " << ta << " trans_b " << tb << " " << dtype_name(dt);
      }
}

TEST(OpsMatmul, GemmRejectsMismatchedShapes) {
  Tensor a = Tensor::zeros({2, 3}, DType::f32), b = Tensor::zeros({4, 5}, DType::f32);
  Tensor c = Tensor::zeros({2, 5}, DType::f32);
  EXPECT_THROW(ops::gemm(c, a, b, false, false), Error);
  Tensor b64 = Tensor::zeros({3, 5}, DType::f64);
  EXPECT_THROW(ops::gemm(c, a, b64, false, false), Error);
}

TEST(OpsMatmul, LinearGradcheck) {
  Linear L = make_linear(DType::f64);
  Tensor out = Tensor::empty({2, 3, 5}, DType::f64);
  auto loss = [&] {
    ops::linear_forward(out, L.inp, L.weight, &L.bias);
    return dot(out, L.R);
  };
  Tensor dinp = zeros_like(L.inp), dweight = zeros_like(L.weight), dbias = zeros_like(L.bias);
  ops::linear_backward(&dinp, &dweight, &dbias, L.R, L.inp, L.weight);
  expect_gradients(loss, {{&L.inp, dinp}, {&L.weight, dweight}, {&L.bias, dbias}});
}

TEST(OpsMatmul, LinearF32MatchesF64) {
  auto run = [](DType dt) {
    Linear L = make_linear(dt);
    Tensor out = Tensor::empty({2, 3, 5}, dt);
    ops::linear_forward(out, L.inp, L.weight, &L.bias);
    Tensor dinp = zeros_like(L.inp), dweight = zeros_like(L.weight), dbias = zeros_like(L.bias);
    ops::linear_backward(&dinp, &dweight, &dbias, L.R, L.inp, L.weight);
    return std::vector<Tensor>{out, dinp, dweight, dbias};
  };
  expect_f32_matches_f64(run(DType::f32), run(DType::f64));
}

TEST(OpsMatmul, LinearBackwardAccumulatesParamsOverwritesInput) {
  Linear L = make_linear(DType::f64);
  Tensor dinp = random_tensor({2, 3, 4}, DType::f64, 9), dweight = zeros_like(L.weight), dbias = zeros_like(L.bias);
  ops::linear_backward(&dinp, &dweight, &dbias, L.R, L.inp, L.weight);
  Tensor dinp1 = dinp.clone(), dweight1 = dweight.clone(), dbias1 = dbias.clone();
  ops::linear_backward(&dinp, &dweight, &dbias, L.R, L.inp, L.weight);
  EXPECT_TRUE(bitwise_equal(dinp, dinp1));
  ops::scale_inplace(dweight1, 2.0);
  ops::scale_inplace(dbias1, 2.0);
  EXPECT_TENSOR_NEAR(dweight, dweight1, tolerance(DType::f64));
  EXPECT_TENSOR_NEAR(dbias, dbias1, tolerance(DType::f64));
}

// On the CPU linear_gelu_forward is the two calls it fuses on the GPU, bit for bit.
TEST(OpsMatmul, LinearGeluIsLinearThenGelu) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool with_bias : {true, false}) {
      Linear L = make_linear(dt);
      const Tensor* bias = with_bias ? &L.bias : nullptr;
      Tensor pre = Tensor::empty({2, 3, 5}, dt), act = Tensor::empty({2, 3, 5}, dt);
      Tensor pre_ref = Tensor::empty({2, 3, 5}, dt), act_ref = Tensor::empty({2, 3, 5}, dt);
      ops::linear_gelu_forward(act, pre, L.inp, L.weight, bias);
      ops::linear_forward(pre_ref, L.inp, L.weight, bias);
      ops::gelu_forward(act_ref, pre_ref);
      EXPECT_TRUE(bitwise_equal(pre, pre_ref));
      EXPECT_TRUE(bitwise_equal(act, act_ref));
    }
  Linear L = make_linear(DType::f32);
  Tensor pre = Tensor::empty({2, 3, 5}, DType::f32), act = Tensor::empty({2, 3, 4}, DType::f32);
  EXPECT_THROW(ops::linear_gelu_forward(act, pre, L.inp, L.weight, &L.bias), Error);
}

TEST(OpsMatmul, LinearWithoutBiasAndNullGradients) {
  Linear L = make_linear(DType::f64);
  Tensor out = Tensor::empty({2, 3, 5}, DType::f64), out_b = Tensor::empty({2, 3, 5}, DType::f64);
  ops::linear_forward(out, L.inp, L.weight, nullptr);
  ops::linear_forward(out_b, L.inp, L.weight, &L.bias);
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t o = 0; o < 5; ++o)
      EXPECT_NEAR(out_b.data<double>()[n * 5 + o] - out.data<double>()[n * 5 + o], L.bias.data<double>()[o], 1e-12);
  Tensor dweight = zeros_like(L.weight), dweight_full = zeros_like(L.weight);
  Tensor dinp = zeros_like(L.inp);
  ops::linear_backward(nullptr, &dweight, nullptr, L.R, L.inp, L.weight);
  ops::linear_backward(&dinp, &dweight_full, nullptr, L.R, L.inp, L.weight);
  EXPECT_TRUE(bitwise_equal(dweight, dweight_full));
  Tensor bad_out = Tensor::empty({6, 4}, DType::f64);
  EXPECT_THROW(ops::linear_forward(bad_out, L.inp, L.weight, nullptr), Error);
}
