// Tests of core/kernels/cpu/norm.cpp (LayerNorm, RMSNorm) through core/ops.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

struct Norm {
  Tensor inp, weight, bias, R;
};
Norm make_norm(DType dt, int64_t N = 6, int64_t C = 7) {
  return {random_tensor({N, C}, dt, 21, 2.0), random_tensor({C}, dt, 22), random_tensor({C}, dt, 23),
          random_tensor({N, C}, dt, 24)};
}

// All LayerNorm results for one set of inputs: out, mean, rstd, dinp, dweight, dbias.
std::vector<Tensor> run_layernorm(Norm& n) {
  int64_t N = n.inp.dim(0);
  DType dt = n.inp.dtype();
  Tensor out = zeros_like(n.inp), mean = Tensor::zeros({N}, dt), rstd = Tensor::zeros({N}, dt);
  ops::layernorm_forward(out, mean, rstd, n.inp, n.weight, n.bias, 1e-5f);
  Tensor dinp = zeros_like(n.inp), dweight = zeros_like(n.weight), dbias = zeros_like(n.bias);
  ops::layernorm_backward(dinp, dweight, dbias, n.R, n.inp, n.weight, mean, rstd);
  return {out, mean, rstd, dinp, dweight, dbias};
}

std::vector<Tensor> run_rmsnorm(Norm& n) {
  int64_t N = n.inp.dim(0);
  Tensor out = zeros_like(n.inp), rstd = Tensor::zeros({N}, n.inp.dtype());
  ops::rmsnorm_forward(out, rstd, n.inp, n.weight, 1e-5f);
  Tensor dinp = zeros_like(n.inp), dweight = zeros_like(n.weight);
  ops::rmsnorm_backward(dinp, dweight, n.R, n.inp, n.weight, rstd);
  return {out, rstd, dinp, dweight};
}

}  // namespace

TEST(OpsNorm, LayerNormForwardMatchesDefinition) {
  Norm n = make_norm(DType::f64);
  std::vector<Tensor> r = run_layernorm(n);
  const double* x = n.inp.data<double>();
  for (int64_t i = 0; i < 6; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < 7; ++c) m += x[i * 7 + c] / 7;
    for (int c = 0; c < 7; ++c) v += (x[i * 7 + c] - m) * (x[i * 7 + c] - m) / 7;
    double rs = 1 / std::sqrt(v + 1e-5);
    EXPECT_NEAR(r[1].data<double>()[i], m, 1e-12);
    EXPECT_NEAR(r[2].data<double>()[i], rs, 1e-10);
    for (int c = 0; c < 7; ++c)
      EXPECT_NEAR(r[0].data<double>()[i * 7 + c],
                  (x[i * 7 + c] - m) * rs * n.weight.data<double>()[c] + n.bias.data<double>()[c], 1e-12);
  }
}

TEST(OpsNorm, LayerNormGradcheck) {
  Norm n = make_norm(DType::f64);
  std::vector<Tensor> r = run_layernorm(n);
  Tensor out = zeros_like(n.inp), mean = Tensor::zeros({6}, DType::f64), rstd = Tensor::zeros({6}, DType::f64);
  auto loss = [&] {
    ops::layernorm_forward(out, mean, rstd, n.inp, n.weight, n.bias, 1e-5f);
    return dot(out, n.R);
  };
  expect_gradients(loss, {{&n.inp, r[3]}, {&n.weight, r[4]}, {&n.bias, r[5]}});
}

TEST(OpsNorm, LayerNormF32MatchesF64) {
  Norm a = make_norm(DType::f32), b = make_norm(DType::f64);
  expect_f32_matches_f64(run_layernorm(a), run_layernorm(b));
}

TEST(OpsNorm, LayerNormBackwardAccumulatesParamsOverwritesInput) {
  Norm n = make_norm(DType::f64);
  std::vector<Tensor> r = run_layernorm(n);
  Tensor dinp = r[3].clone(), dweight = r[4].clone(), dbias = r[5].clone();
  ops::layernorm_backward(dinp, dweight, dbias, n.R, n.inp, n.weight, r[1], r[2]);
  EXPECT_TRUE(bitwise_equal(dinp, r[3]));
  ops::scale_inplace(r[4], 2.0);
  ops::scale_inplace(r[5], 2.0);
  EXPECT_TENSOR_NEAR(dweight, r[4], tolerance(DType::f64));
  EXPECT_TENSOR_NEAR(dbias, r[5], tolerance(DType::f64));
}

TEST(OpsNorm, ParameterGradientsDoNotDependOnThreadCount) {
  // Large enough that the kernels go parallel (N * C > 2^14).
  Norm n = make_norm(DType::f32, 96, 300);
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<Tensor> one = run_layernorm(n), one_rms = run_rmsnorm(n);
  omp_set_num_threads(std::max(2, saved));
  std::vector<Tensor> many = run_layernorm(n), many_rms = run_rmsnorm(n);
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], many[i])) << "layernorm result " << i;
  for (size_t i = 0; i < one_rms.size(); ++i) EXPECT_TRUE(bitwise_equal(one_rms[i], many_rms[i])) << "rmsnorm " << i;
}

TEST(OpsNorm, RmsNormForwardMatchesDefinition) {
  Norm n = make_norm(DType::f64);
  std::vector<Tensor> r = run_rmsnorm(n);
  const double* x = n.inp.data<double>();
  for (int64_t i = 0; i < 6; ++i) {
    double ms = 0;
    for (int c = 0; c < 7; ++c) ms += x[i * 7 + c] * x[i * 7 + c] / 7;
    double rs = 1 / std::sqrt(ms + 1e-5);
    EXPECT_NEAR(r[1].data<double>()[i], rs, 1e-10);
    for (int c = 0; c < 7; ++c)
      EXPECT_NEAR(r[0].data<double>()[i * 7 + c], x[i * 7 + c] * rs * n.weight.data<double>()[c], 1e-12);
  }
}

TEST(OpsNorm, RmsNormGradcheck) {
  Norm n = make_norm(DType::f64);
  std::vector<Tensor> r = run_rmsnorm(n);
  Tensor out = zeros_like(n.inp), rstd = Tensor::zeros({6}, DType::f64);
  auto loss = [&] {
    ops::rmsnorm_forward(out, rstd, n.inp, n.weight, 1e-5f);
    return dot(out, n.R);
  };
  expect_gradients(loss, {{&n.inp, r[2]}, {&n.weight, r[3]}});
}

TEST(OpsNorm, RmsNormF32MatchesF64) {
  Norm a = make_norm(DType::f32), b = make_norm(DType::f64);
  expect_f32_matches_f64(run_rmsnorm(a), run_rmsnorm(b));
}

TEST(OpsNorm, RmsNormBackwardAccumulatesParamsOverwritesInput) {
  Norm n = make_norm(DType::f64);
  std::vector<Tensor> r = run_rmsnorm(n);
  Tensor dinp = r[2].clone(), dweight = r[3].clone();
  ops::rmsnorm_backward(dinp, dweight, n.R, n.inp, n.weight, r[1]);
  EXPECT_TRUE(bitwise_equal(dinp, r[2]));
  ops::scale_inplace(r[3], 2.0);
  EXPECT_TENSOR_NEAR(dweight, r[3], tolerance(DType::f64));
}

TEST(OpsNorm, RejectsBadShapes) {
  Norm n = make_norm(DType::f64);
  Tensor out = zeros_like(n.inp), mean = Tensor::zeros({5}, DType::f64), rstd = Tensor::zeros({6}, DType::f64);
  EXPECT_THROW(ops::layernorm_forward(out, mean, rstd, n.inp, n.weight, n.bias, 1e-5f), Error);
  Tensor w8 = Tensor::zeros({8}, DType::f64);
  EXPECT_THROW(ops::rmsnorm_forward(out, rstd, n.inp, w8, 1e-5f), Error);
}
