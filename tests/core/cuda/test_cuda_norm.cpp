// GPU LayerNorm and RMSNorm (src/core/cuda/norm.cu) against the CPU kernels,
// forward and backward, with parameter gradients that start non-zero (they
// accumulate). Rows longer than one block (C = 700 > 256 threads) and a
// partial warp (C = 37) exercise the strided loops and the block reduction.
// Over 257 and 1017 rows the parameter gradients' column sums run in two and
// four chunks, the last one shorter (launch.cuh), compared in relative L2 (a column whose
// sum cancels would fail an element-wise tolerance on rounding alone).
// Tolerance: f32 (reductions in a different order); see cuda_test_support.h.
// On bf16/f16 activations (fp32 weights, statistics and parameter gradients)
// the same tolerance for the fp32 results, and 1 ulp of the 16-bit type for
// the activations and input gradients (a last-bit difference of the fp32
// value before rounding can move the rounded one by 1 ulp).
#include <cmath>

#include "support/act16.h"
#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

class CudaNorm : public CudaOps, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaNorm, LayernormMatchesCpu) {
  const int64_t N = 9, C = GetParam();
  Tensor inp = random_tensor({3, 3, C}, DType::f32, 1, 2.0), weight = random_tensor({C}, DType::f32, 2);
  Tensor bias = random_tensor({C}, DType::f32, 3);
  Tensor out = Tensor::empty(inp.shape(), DType::f32), mean = Tensor::empty({N}, DType::f32);
  Tensor rstd = Tensor::empty({N}, DType::f32);
  Tensor out_g = empty_gpu(inp.shape()), mean_g = empty_gpu({N}), rstd_g = empty_gpu({N});
  Tensor inp_g = gpu(inp), weight_g = gpu(weight);
  ops::layernorm_forward(out, mean, rstd, inp, weight, bias, 1e-5f);
  ops::layernorm_forward(out_g, mean_g, rstd_g, inp_g, weight_g, gpu(bias), 1e-5f);
  EXPECT_TENSOR_NEAR(host(out_g), out, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(mean_g), mean, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(rstd_g), rstd, tolerance(DType::f32));

  Tensor dout = random_tensor(inp.shape(), DType::f32, 4), dinp = Tensor::empty(inp.shape(), DType::f32);
  Tensor dweight = random_tensor({C}, DType::f32, 5), dbias = random_tensor({C}, DType::f32, 6);
  Tensor dinp_g = empty_gpu(inp.shape()), dweight_g = gpu(dweight), dbias_g = gpu(dbias);
  ops::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  ops::layernorm_backward(dinp_g, dweight_g, dbias_g, gpu(dout), inp_g, weight_g, mean_g, rstd_g);
  EXPECT_TENSOR_NEAR(host(dinp_g), dinp, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(dweight_g), dweight, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(dbias_g), dbias, tolerance(DType::f32));
}

TEST_P(CudaNorm, RmsnormMatchesCpu) {
  const int64_t N = 9, C = GetParam();
  Tensor inp = random_tensor({N, C}, DType::f32, 7, 2.0), weight = random_tensor({C}, DType::f32, 8);
  Tensor out = Tensor::empty({N, C}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
  Tensor out_g = empty_gpu({N, C}), rstd_g = empty_gpu({N}), inp_g = gpu(inp), weight_g = gpu(weight);
  ops::rmsnorm_forward(out, rstd, inp, weight, 1e-6f);
  ops::rmsnorm_forward(out_g, rstd_g, inp_g, weight_g, 1e-6f);
  EXPECT_TENSOR_NEAR(host(out_g), out, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(rstd_g), rstd, tolerance(DType::f32));

  Tensor dout = random_tensor({N, C}, DType::f32, 9), dinp = Tensor::empty({N, C}, DType::f32);
  Tensor dweight = random_tensor({C}, DType::f32, 10);
  Tensor dinp_g = empty_gpu({N, C}), dweight_g = gpu(dweight);
  ops::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd);
  ops::rmsnorm_backward(dinp_g, dweight_g, gpu(dout), inp_g, weight_g, rstd_g);
  EXPECT_TENSOR_NEAR(host(dinp_g), dinp, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(dweight_g), dweight, tolerance(DType::f32));
}

TEST_F(CudaOps, NormParameterGradientsOverManyRowsMatchCpu) {
  for (const int64_t N : {int64_t(257), int64_t(1017)}) {
    SCOPED_TRACE(testing::Message() << "rows " << N);
    const int64_t C = 37;
    const Tensor inp = random_tensor({N, C}, DType::f32, 21, 2.0), weight = random_tensor({C}, DType::f32, 22);
    const Tensor dout = random_tensor({N, C}, DType::f32, 23);
    Tensor out = Tensor::empty({N, C}, DType::f32), mean = Tensor::empty({N}, DType::f32);
    Tensor rstd = Tensor::empty({N}, DType::f32), dinp = Tensor::empty({N, C}, DType::f32);
    Tensor dweight = random_tensor({C}, DType::f32, 24), dbias = random_tensor({C}, DType::f32, 25);
    Tensor out_g = empty_gpu({N, C}), mean_g = empty_gpu({N}), rstd_g = empty_gpu({N}), dinp_g = empty_gpu({N, C});
    Tensor dweight_g = gpu(dweight), dbias_g = gpu(dbias);
    const Tensor inp_g = gpu(inp), weight_g = gpu(weight), dout_g = gpu(dout);
    ops::layernorm_forward(out, mean, rstd, inp, weight, weight, 1e-5f);
    ops::layernorm_forward(out_g, mean_g, rstd_g, inp_g, weight_g, weight_g, 1e-5f);
    ops::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
    ops::layernorm_backward(dinp_g, dweight_g, dbias_g, dout_g, inp_g, weight_g, mean_g, rstd_g);
    EXPECT_LT(rel_l2(host(dweight_g), dweight), 1e-5);
    EXPECT_LT(rel_l2(host(dbias_g), dbias), 1e-5);

    Tensor rms_dweight = random_tensor({C}, DType::f32, 26), rms_dweight_g = gpu(rms_dweight);
    ops::rmsnorm_forward(out, rstd, inp, weight, 1e-6f);
    ops::rmsnorm_forward(out_g, rstd_g, inp_g, weight_g, 1e-6f);
    ops::rmsnorm_backward(dinp, rms_dweight, dout, inp, weight, rstd);
    ops::rmsnorm_backward(dinp_g, rms_dweight_g, dout_g, inp_g, weight_g, rstd_g);
    EXPECT_LT(rel_l2(host(rms_dweight_g), rms_dweight), 1e-5);
  }
}

TEST_F(CudaOps, LayernormBackwardIsDeterministic) {
  const int64_t N = 300, C = 130;
  Tensor inp = gpu(random_tensor({N, C}, DType::f32, 11)), weight = gpu(random_tensor({C}, DType::f32, 12));
  Tensor mean = empty_gpu({N}), rstd = empty_gpu({N}), out = empty_gpu({N, C}), dinp = empty_gpu({N, C});
  ops::layernorm_forward(out, mean, rstd, inp, weight, weight, 1e-5f);
  Tensor dout = gpu(random_tensor({N, C}, DType::f32, 13));
  Tensor first;
  for (int run = 0; run < 2; ++run) {
    Tensor dweight = Tensor::zeros({C}, DType::f32, Device::cuda(0)), dbias = dweight.clone();
    ops::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
    Tensor all = host(dweight);
    if (run == 0)
      first = all;
    else
      EXPECT_TRUE(same_bits(all, first));
  }
}

TEST_P(CudaNorm, Act16MatchesCpu) {
  const int64_t N = 9, C = GetParam();
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor inp = act16({N, C}, dt, 14, 2.0), dout = act16({N, C}, dt, 15);
    Tensor weight = random_tensor({C}, DType::f32, 16), bias = random_tensor({C}, DType::f32, 17);
    Tensor out = Tensor::empty({N, C}, dt), mean = Tensor::empty({N}, DType::f32), rstd = mean.clone();
    Tensor out_g = gpu(out), mean_g = gpu(mean), rstd_g = gpu(rstd), inp_g = gpu(inp), weight_g = gpu(weight);
    ops::layernorm_forward(out, mean, rstd, inp, weight, bias, 1e-5f);
    ops::layernorm_forward(out_g, mean_g, rstd_g, inp_g, weight_g, gpu(bias), 1e-5f);
    expect_rounded_equal(host(out_g), out, 1, kCancelAtol);
    EXPECT_TENSOR_NEAR(host(mean_g), mean, tolerance(DType::f32));
    EXPECT_TENSOR_NEAR(host(rstd_g), rstd, tolerance(DType::f32));
    Tensor dinp = Tensor::empty({N, C}, dt), dinp_g = gpu(dinp), dout_g = gpu(dout);
    Tensor dweight = random_tensor({C}, DType::f32, 18), dbias = random_tensor({C}, DType::f32, 19);
    Tensor dweight_g = gpu(dweight), dbias_g = gpu(dbias);
    ops::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
    ops::layernorm_backward(dinp_g, dweight_g, dbias_g, dout_g, inp_g, weight_g, gpu(mean), gpu(rstd));
    expect_rounded_equal(host(dinp_g), dinp, 1, kCancelAtol);
    EXPECT_TENSOR_NEAR(host(dweight_g), dweight, tolerance(DType::f32));
    EXPECT_TENSOR_NEAR(host(dbias_g), dbias, tolerance(DType::f32));
    ops::rmsnorm_forward(out, rstd, inp, weight, 1e-6f);
    ops::rmsnorm_forward(out_g, rstd_g, inp_g, weight_g, 1e-6f);
    expect_rounded_equal(host(out_g), out, 1, kCancelAtol);
    EXPECT_TENSOR_NEAR(host(rstd_g), rstd, tolerance(DType::f32));
    ops::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd);
    ops::rmsnorm_backward(dinp_g, dweight_g, dout_g, inp_g, weight_g, gpu(rstd));
    expect_rounded_equal(host(dinp_g), dinp, 1, kCancelAtol);
    EXPECT_TENSOR_NEAR(host(dweight_g), dweight, tolerance(DType::f32));
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, CudaNorm, ::testing::Values(int64_t(37), int64_t(700)));

}  // namespace
}  // namespace lattice::test
