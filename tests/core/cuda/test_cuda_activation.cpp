// GPU erf GELU and SwiGLU (src/core/cuda/kernels.cu) and the row softmax
// (softmax.cu) against the CPU kernels. Tolerance: f32 (erff/expf may differ
// from the host's in the last ulp, and the softmax's row sums run in a fixed
// tree instead of in sequence); see cuda_test_support.h.
#include <cmath>

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

}  // namespace
}  // namespace lattice::test
