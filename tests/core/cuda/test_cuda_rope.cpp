// GPU rotary embeddings and repeat_kv (src/core/cuda/rope.cu) against the CPU
// kernels. RoPE: forward and backward, out of place and in place, with
// unrotated columns after the rotated heads (copied); tolerance f32 (device
// double cos/sin against the host's), see cuda_test_support.h. repeat_kv:
// copies, and group sums added in the CPU's order, so bit for bit.
#include <utility>

#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

constexpr int64_t kB = 2, kT = 11, kHS = 16, kRot = 3, kW = 5 * kHS;  // 3 rotated heads, 2 copied
constexpr double kTheta = 10000.0;

TEST_F(CudaOps, RopeForwardBackwardMatchCpu) {
  Tensor inp = random_tensor({kB, kT, kW}, DType::f32, 1), dout = random_tensor({kB, kT, kW}, DType::f32, 2);
  Tensor out = Tensor::empty(inp.shape(), DType::f32), dinp = Tensor::empty(inp.shape(), DType::f32);
  Tensor out_g = empty_gpu(inp.shape()), dinp_g = empty_gpu(inp.shape());
  ops::rope_forward(out, inp, kRot, kHS, kTheta);
  ops::rope_forward(out_g, gpu(inp), kRot, kHS, kTheta);
  EXPECT_TENSOR_NEAR(host(out_g), out, tolerance(DType::f32));
  ops::rope_backward(dinp, dout, kRot, kHS, kTheta);
  ops::rope_backward(dinp_g, gpu(dout), kRot, kHS, kTheta);
  EXPECT_TENSOR_NEAR(host(dinp_g), dinp, tolerance(DType::f32));
}

TEST_F(CudaOps, RopeInPlaceMatchesCpu) {
  Tensor x = random_tensor({kB, kT, kW}, DType::f32, 3);
  Tensor x_g = gpu(x);
  ops::rope_forward(x, x, kRot, kHS, kTheta);
  ops::rope_forward(x_g, x_g, kRot, kHS, kTheta);
  EXPECT_TENSOR_NEAR(host(x_g), x, tolerance(DType::f32));
  ops::rope_backward(x_g, x_g, kRot, kHS, kTheta);  // the inverse rotation: back to the input
  EXPECT_TENSOR_NEAR(host(x_g), random_tensor({kB, kT, kW}, DType::f32, 3), tolerance(DType::f32));
}

// Grouped (NH / KV = 4, 3), multi-query (KV = 1) and plain (KV = NH) heads.
TEST_F(CudaOps, RepeatKvForwardBackwardMatchCpuBitwise) {
  const int64_t B = 2, T = 7, HS = 12;
  for (auto [NH, KV] : {std::pair<int, int>{8, 2}, {6, 2}, {6, 1}, {4, 4}}) {
    SCOPED_TRACE(testing::Message() << "NH " << NH << " KV " << KV);
    const Shape packed{B, T, (NH + 2 * KV) * HS}, expanded{B, T, 3 * NH * HS};
    Tensor inp = random_tensor(packed, DType::f32, 11), dout = random_tensor(expanded, DType::f32, 12);
    Tensor out = Tensor::empty(expanded, DType::f32), dinp = Tensor::empty(packed, DType::f32);
    Tensor out_g = empty_gpu(expanded), dinp_g = gpu(random_tensor(packed, DType::f32, 13));  // overwritten
    ops::repeat_kv_forward(out, inp, NH, KV);
    ops::repeat_kv_forward(out_g, gpu(inp), NH, KV);
    EXPECT_TRUE(same_bits(host(out_g), out));
    ops::repeat_kv_backward(dinp, dout, NH, KV);
    ops::repeat_kv_backward(dinp_g, gpu(dout), NH, KV);
    EXPECT_TRUE(same_bits(host(dinp_g), dinp));
  }
}

}  // namespace
}  // namespace lattice::test
