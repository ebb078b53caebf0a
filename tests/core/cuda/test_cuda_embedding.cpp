// GPU embedding (src/core/cuda/embedding.cu) against the CPU kernel, on a
// vocab shard [vocab_start, vocab_start + V) with ids inside and outside it
// and many repeats. Forward is a copy and backward adds each row's
// contributions in token order, exactly as the CPU does, so both compare
// bitwise (and backward, which uses no atomics, is reproducible).
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

}  // namespace
}  // namespace lattice::test
