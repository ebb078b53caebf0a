// GPU erf GELU and SwiGLU (src/core/cuda/kernels.cu) and the row softmax
// (softmax.cu) against the CPU kernels. Tolerance: f32 (erff/expf may differ
// from the host's in the last ulp, and the softmax's row sums run in a fixed
// tree instead of in sequence); see cuda_test_support.h. On bf16/f16
// activations (GELU tanh and erf, SwiGLU) the CUDA 16-bit kernels against the
// CPU 16-bit kernels: within 1 ulp of the 16-bit type, since the fp32 values
// before rounding may differ in their last ulp.
#include <cmath>

#include "support/act16.h"
#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

TEST_F(CudaOps, GeluErfForwardBackwardMatchCpu) {
  expect_activation_matches_cpu(ops::gelu_erf_forward, ops::gelu_erf_backward, {5, 301}, {5, 301}, 1, 4.0);
}

TEST_F(CudaOps, SwigluForwardBackwardMatchCpu) {
  const int64_t N = 7, F = 93;
  expect_activation_matches_cpu(ops::swiglu_forward, ops::swiglu_backward, {N, 2 * F}, {N, F}, 3, 3.0);
}

// K = 3 leaves most of a row's block idle; K = 1000 gives each thread
// several columns. One -inf logit (a masked entry) gets probability 0.
TEST_F(CudaOps, SoftmaxForwardBackwardMatchCpu) {
  for (int64_t K : {int64_t(3), int64_t(1000)}) {
    SCOPED_TRACE(K);
    const Shape shape{2, 5, K};
    Tensor inp = random_tensor(shape, DType::f32, 5 + uint64_t(K), 8.0), dout = random_tensor(shape, DType::f32, 6);
    inp.data<float>()[1] = -INFINITY;
    Tensor out = Tensor::empty(shape, DType::f32), dinp = Tensor::empty(shape, DType::f32);
    Tensor out_g = empty_gpu(shape), dinp_g = empty_gpu(shape);
    ops::softmax_forward(out, inp);
    ops::softmax_forward(out_g, gpu(inp));
    EXPECT_TENSOR_NEAR(host(out_g), out, tolerance(DType::f32));
    EXPECT_EQ(host(out_g).data<float>()[1], 0.0f);
    // Both backwards take the CPU's forward output, so only backward differs.
    ops::softmax_backward(dinp, dout, out);
    ops::softmax_backward(dinp_g, gpu(dout), gpu(out));
    EXPECT_TENSOR_NEAR(host(dinp_g), dinp, tolerance(DType::f32));
  }
}

TEST_F(CudaOps, SoftmaxInPlaceAndDeterministic) {
  const Shape shape{7, 301};
  Tensor x = random_tensor(shape, DType::f32, 7, 4.0), dy = random_tensor(shape, DType::f32, 8);
  Tensor y = Tensor::empty(shape, DType::f32), dx = Tensor::empty(shape, DType::f32);
  ops::softmax_forward(y, x);
  ops::softmax_backward(dx, dy, y);
  Tensor x_g = gpu(x), dy_g = gpu(dy), y_g = gpu(y);
  ops::softmax_forward(x_g, x_g);  // out is inp
  EXPECT_TENSOR_NEAR(host(x_g), y, tolerance(DType::f32));
  Tensor again = empty_gpu(shape);
  ops::softmax_forward(again, gpu(x));
  EXPECT_TRUE(same_bits(host(again), host(x_g)));  // fixed reduction tree: the same bits every run
  ops::softmax_backward(dy_g, dy_g, y_g);          // dinp is dout
  EXPECT_TENSOR_NEAR(host(dy_g), dx, tolerance(DType::f32));
}

TEST_F(CudaOps, Act16ActivationsMatchCpu) {
  const int64_t N = 7, C = 186;
  for (DType dt : kAct16)
    for (const Act16Activation& c : kAct16Activations) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << c.name);
      const Shape out_shape{N, c.glu ? C / 2 : C};
      Tensor x = act16({N, C}, dt, 41, 4.0), dy = act16(out_shape, dt, 42);
      Tensor y = Tensor::zeros(out_shape, dt), y_g = gpu(y), dx = Tensor::zeros({N, C}, dt), dx_g = gpu(dx);
      c.forward(y, x);
      c.forward(y_g, gpu(x));
      expect_rounded_equal(host(y_g), y, 1, kCancelAtol);
      c.backward(dx, dy, x);
      c.backward(dx_g, gpu(dy), gpu(x));
      expect_rounded_equal(host(dx_g), dx, 1, kCancelAtol);
    }
}

TEST_F(CudaOps, Act16SoftmaxMatchesCpu) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = act16({5, 700}, dt, 43, 6.0), dy = act16({5, 700}, dt, 44);
    Tensor y = Tensor::zeros({5, 700}, dt), y_g = gpu(x), dx = y.clone();
    ops::softmax_forward(y, x);
    ops::softmax_forward(y_g, y_g);  // in place
    expect_rounded_equal(host(y_g), y, 1, kCancelAtol);
    Tensor dx_g = gpu(dy);
    ops::softmax_backward(dx, dy, y);
    ops::softmax_backward(dx_g, dx_g, gpu(y));  // in place
    expect_rounded_equal(host(dx_g), dx, 1, kCancelAtol);
  }
}

}  // namespace
}  // namespace lattice::test
