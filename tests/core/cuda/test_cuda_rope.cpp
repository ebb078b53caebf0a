// GPU rotary embeddings and repeat_kv (src/core/cuda/rope.cu) against the CPU
// kernels. RoPE: forward and backward, out of place and in place, with
// unrotated columns after the rotated heads (copied); tolerance f32 (device
// double cos/sin against the host's), see cuda_test_support.h. repeat_kv:
// copies, and group sums added in the CPU's order, so bit for bit. On
// bf16/f16 activations the CUDA 16-bit kernels against the CPU 16-bit ones:
// RoPE within 1 ulp of the 16-bit type (the float before rounding may differ
// in its last bit, as in f32), repeat_kv bitwise.
#include <utility>

#include "support/act16.h"
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

// Rows at a position offset (ops::rope_forward's pos0, a key/value cache's
// new positions) rotate by the angles of their positions, as on the CPU.
TEST_F(CudaOps, RopeAtAPositionOffsetMatchesCpu) {
  Tensor inp = random_tensor({kB, kT, kW}, DType::f32, 4);
  for (int64_t pos0 : {int64_t(5), int64_t(1000)}) {
    Tensor out = Tensor::empty(inp.shape(), DType::f32), out_g = empty_gpu(inp.shape());
    ops::rope_forward(out, inp, kRot, kHS, kTheta, pos0);
    ops::rope_forward(out_g, gpu(inp), kRot, kHS, kTheta, pos0);
    EXPECT_TENSOR_NEAR(host(out_g), out, tolerance(DType::f32)) << "pos0 " << pos0;
  }
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

TEST_F(CudaOps, Act16RopeAndRepeatKvMatchCpu) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = act16({kB, kT, kW}, dt, 21, 3.0), dy = act16({kB, kT, kW}, dt, 22);
    Tensor y = Tensor::zeros(x.shape(), dt), y_g = gpu(y), dx = y.clone(), dx_g = gpu(y);
    ops::rope_forward(y, x, kRot, kHS, kTheta);
    ops::rope_forward(y_g, gpu(x), kRot, kHS, kTheta);
    expect_rounded_equal(host(y_g), y, 1, kCancelAtol);
    ops::rope_backward(dx, dy, kRot, kHS, kTheta);
    Tensor dy_g = gpu(dy);
    ops::rope_backward(dy_g, dy_g, kRot, kHS, kTheta);  // in place
    expect_rounded_equal(host(dy_g), dx, 1, kCancelAtol);
    const int NH = 6, KV = 2, HS = 12;
    const Shape packed{2, 7, (NH + 2 * KV) * HS}, expanded{2, 7, 3 * NH * HS};
    Tensor p = act16(packed, dt, 23), e = act16(expanded, dt, 24);
    Tensor out = Tensor::zeros(expanded, dt), out_g = gpu(out), dp = Tensor::zeros(packed, dt), dp_g = gpu(dp);
    ops::repeat_kv_forward(out, p, NH, KV);
    ops::repeat_kv_forward(out_g, gpu(p), NH, KV);
    expect_rounded_equal(host(out_g), out);
    ops::repeat_kv_backward(dp, e, NH, KV);
    ops::repeat_kv_backward(dp_g, gpu(e), NH, KV);
    expect_rounded_equal(host(dp_g), dp);
  }
}

}  // namespace
}  // namespace lattice::test
