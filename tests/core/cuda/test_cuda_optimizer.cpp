// GPU SGD (src/core/cuda/kernels.cu) against the CPU kernel: three steps with
// and without a momentum buffer, weight decay and a gradient scale. Both run
// math::sgd_momentum_step / math::sgd_step, but the host compiler and nvcc may
// contract different products into FMAs, so the comparison is at the f32
// tolerance (cuda_test_support.h). AdamW's GPU test is in test_cuda_backend.
#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

constexpr float kLr = 0.1f, kWd = 0.01f, kGradScale = 0.5f;

TEST_F(CudaOps, SgdMomentumMatchesCpu) {
  const Shape shape{1001};
  Tensor param = random_tensor(shape, DType::f32, 1), buf = Tensor::zeros(shape, DType::f32);
  Tensor param_g = gpu(param), buf_g = gpu(buf);
  for (uint64_t step = 0; step < 3; ++step) {
    Tensor grad = random_tensor(shape, DType::f32, 10 + step);
    ops::sgd_update(param, grad, buf, kLr, 0.9f, kWd, kGradScale);
    ops::sgd_update(param_g, gpu(grad), buf_g, kLr, 0.9f, kWd, kGradScale);
  }
  EXPECT_TENSOR_NEAR(host(param_g), param, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(buf_g), buf, tolerance(DType::f32));
}

TEST_F(CudaOps, SgdWithoutMomentumMatchesCpu) {
  const Shape shape{257};
  Tensor param = random_tensor(shape, DType::f32, 2), none;
  Tensor param_g = gpu(param);
  for (uint64_t step = 0; step < 3; ++step) {
    Tensor grad = random_tensor(shape, DType::f32, 20 + step);
    ops::sgd_update(param, grad, none, kLr, 0.0f, kWd, kGradScale);
    ops::sgd_update(param_g, gpu(grad), none, kLr, 0.0f, kWd, kGradScale);
  }
  EXPECT_TENSOR_NEAR(host(param_g), param, tolerance(DType::f32));
}

}  // namespace
}  // namespace lattice::test
