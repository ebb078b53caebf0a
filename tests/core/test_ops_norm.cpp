// Tests of core/kernels/cpu/norm.cpp (LayerNorm, RMSNorm) through core/ops.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "core/ops.h"
#include "ops_test_helpers.h"
#include "support/error_text.h"

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

// bf16/f16 activations with fp32 weights and statistics: the 16-bit kernels
// are the f32 kernels reading widened values, so on the same (rounded) inputs
// the statistics and parameter gradients agree to float rounding (the row
// sums may be vectorised differently) and the activations and input
// gradients, rounded once, within 1 ulp of the 16-bit type.
TEST(OpsNorm, Act16MatchesRoundedF32) {
  const Tolerance tight{1e-6, 1e-6};
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t N = 37, C = 700;
    Tensor inp = act16({N, C}, dt, 25, 2.0), dout = act16({N, C}, dt, 26);
    Tensor weight = random_tensor({C}, DType::f32, 27), bias = random_tensor({C}, DType::f32, 28);
    Tensor inp32 = as_f32(inp), dout32 = as_f32(dout);
    // LayerNorm: 16-bit, then f32 on the same values.
    Tensor out = zeros_like(inp), mean = Tensor::zeros({N}, DType::f32), rstd = Tensor::zeros({N}, DType::f32);
    Tensor out32 = zeros_like(inp32), mean32 = zeros_like(mean), rstd32 = zeros_like(rstd);
    ops::layernorm_forward(out, mean, rstd, inp, weight, bias, 1e-5f);
    ops::layernorm_forward(out32, mean32, rstd32, inp32, weight, bias, 1e-5f);
    expect_rounded_equal(out, out32, 1);
    EXPECT_TENSOR_NEAR(mean, mean32, tight);
    EXPECT_TENSOR_NEAR(rstd, rstd32, tight);
    Tensor dinp = zeros_like(inp), dinp32 = zeros_like(inp32);
    Tensor dw = random_tensor({C}, DType::f32, 29), db = random_tensor({C}, DType::f32, 30);
    Tensor dw32 = dw.clone(), db32 = db.clone();
    ops::layernorm_backward(dinp, dw, db, dout, inp, weight, mean32, rstd32);
    ops::layernorm_backward(dinp32, dw32, db32, dout32, inp32, weight, mean32, rstd32);
    expect_rounded_equal(dinp, dinp32, 1);
    EXPECT_TENSOR_NEAR(dw, dw32, tight);
    EXPECT_TENSOR_NEAR(db, db32, tight);
    // RMSNorm.
    ops::rmsnorm_forward(out, rstd, inp, weight, 1e-6f);
    ops::rmsnorm_forward(out32, rstd32, inp32, weight, 1e-6f);
    expect_rounded_equal(out, out32, 1);
    EXPECT_TENSOR_NEAR(rstd, rstd32, tight);
    ops::rmsnorm_backward(dinp, dw, dout, inp, weight, rstd32);
    ops::rmsnorm_backward(dinp32, dw32, dout32, inp32, weight, rstd32);
    expect_rounded_equal(dinp, dinp32, 1);
    EXPECT_TENSOR_NEAR(dw, dw32, tight);
  }
}

TEST(OpsNorm, Act16NeedsF32ParametersAndStatistics) {
  Tensor inp = Tensor::zeros({2, 4}, DType::bf16), out = zeros_like(inp), w = Tensor::zeros({4}, DType::f32);
  Tensor rstd = Tensor::zeros({2}, DType::f32);
  ops::rmsnorm_forward(out, rstd, inp, w, 1e-6f);  // the contract: 16-bit activations, f32 weight and rstd
  Tensor w16 = Tensor::zeros({4}, DType::bf16), rstd16 = Tensor::zeros({2}, DType::bf16);
  std::string text = error_text([&] { ops::rmsnorm_forward(out, rstd, inp, w16, 1e-6f); });
  EXPECT_HAS(text, "ops::rmsnorm_forward");
  EXPECT_HAS(text, "must be f32");
  EXPECT_HAS(text, "bf16 activations");
  EXPECT_HAS(error_text([&] { ops::rmsnorm_forward(out, rstd16, inp, w, 1e-6f); }), "must be f32");
  Tensor out_f16 = Tensor::zeros({2, 4}, DType::f16);
  EXPECT_HAS(error_text([&] { ops::rmsnorm_forward(out_f16, rstd, inp, w, 1e-6f); }), "mixed tensors");
}
