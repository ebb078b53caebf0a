// GPU embedding (src/core/cuda/embedding.cu) against the CPU kernel, on a
// vocab shard [vocab_start, vocab_start + V) with ids inside and outside it
// and many repeats. Forward is a copy and backward adds each row's
// contributions in token order, exactly as the CPU does, so both compare
// bitwise (and backward, which uses no atomics, is reproducible). The same
// holds on bf16/f16 out / dout beside the fp32 table: one rounding per looked-up
// value, fp32 sums in token order.
#include "support/act16.h"
#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

constexpr int64_t kN = 2 * 157, kV = 40, kC = 300, kStart = 20;

TEST_F(CudaOps, EmbeddingForwardMatchesCpu) {
  Tensor ids = random_ids(kN, 0, int32_t(kStart + kV + 10), 1);  // some below, some above the shard
  Tensor weight = random_tensor({kV, kC}, DType::f32, 2);
  Tensor out = Tensor::empty({kN, kC}, DType::f32), out_g = empty_gpu({kN, kC});
  ops::embedding_forward(out, ids, weight, kStart);
  ops::embedding_forward(out_g, gpu(ids), gpu(weight), kStart);
  EXPECT_TRUE(same_bits(host(out_g), out));
}

TEST_F(CudaOps, EmbeddingBackwardMatchesCpuBitwise) {
  Tensor ids = random_ids(kN, 0, int32_t(kStart + kV + 10), 3);
  Tensor dout = random_tensor({kN, kC}, DType::f32, 4);
  Tensor dweight = random_tensor({kV, kC}, DType::f32, 5);  // accumulates onto this
  Tensor dweight_g = gpu(dweight), ids_g = gpu(ids), dout_g = gpu(dout);
  ops::embedding_backward(dweight, dout, ids, kStart);
  ops::embedding_backward(dweight_g, dout_g, ids_g, kStart);
  EXPECT_TRUE(same_bits(host(dweight_g), dweight));
  ops::embedding_backward(dweight, dout, ids, kStart);  // a second step: still the CPU's bits
  ops::embedding_backward(dweight_g, dout_g, ids_g, kStart);
  EXPECT_TRUE(same_bits(host(dweight_g), dweight));
}

TEST_F(CudaOps, EmbeddingBackwardOneRepeatedId) {
  Tensor ids = Tensor::from<int32_t>(std::vector<int32_t>(kN, int32_t(kStart + 3)), {kN});
  Tensor dout = random_tensor({kN, kC}, DType::f32, 6);
  Tensor dweight = Tensor::zeros({kV, kC}, DType::f32), dweight_g = gpu(dweight);
  ops::embedding_backward(dweight, dout, ids, kStart);
  ops::embedding_backward(dweight_g, gpu(dout), gpu(ids), kStart);
  EXPECT_TRUE(same_bits(host(dweight_g), dweight));
}

TEST_F(CudaOps, Act16EmbeddingMatchesCpuBitwise) {
  Tensor ids = random_ids(kN, 0, int32_t(kStart + kV + 10), 6), ids_g = gpu(ids);
  Tensor weight = random_tensor({kV, kC}, DType::f32, 7), dweight = random_tensor({kV, kC}, DType::f32, 8);
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor out = Tensor::zeros({kN, kC}, dt), out_g = gpu(out);
    ops::embedding_forward(out, ids, weight, kStart);
    ops::embedding_forward(out_g, ids_g, gpu(weight), kStart);
    expect_rounded_equal(host(out_g), out);
    Tensor dout = act16({kN, kC}, dt, 9), dw = dweight.clone(), dw_g = gpu(dweight);
    ops::embedding_backward(dw, dout, ids, kStart);
    ops::embedding_backward(dw_g, gpu(dout), ids_g, kStart);
    EXPECT_TRUE(same_bits(host(dw_g), dw));
  }
}

}  // namespace
}  // namespace lattice::test
