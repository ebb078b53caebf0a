// GPU softmax cross-entropy (src/core/cuda/loss.cu) against the CPU kernels:
// the fused full-vocabulary loss with ignored rows, its backward (also in
// place), and each vocab-parallel piece on a shard with padding columns, a
// target outside the shard, an ignored row and a row whose valid columns are
// all -inf. Tolerance: f32 (row reductions in a different order, expf);
// row maxima are exact. See cuda_test_support.h. On bf16/f16 logits with
// fp32 statistics: the same tolerance for the statistics, 1 ulp of the
// 16-bit type for dlogits.
#include <cmath>

#include "support/act16.h"
#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

constexpr int kIgnore = -1;  // models' kIgnoreIndex
constexpr float kDloss = 0.37f;

TEST_F(CudaOps, CrossEntropyForwardBackwardMatchCpu) {
  const int64_t N = 6, V = 1000;
  Tensor logits = random_tensor({N, V}, DType::f32, 1, 5.0);
  Tensor targets = Tensor::from<int32_t>({3, kIgnore, 999, 0, 517, kIgnore}, {N});
  Tensor losses = Tensor::empty({N}, DType::f32), lse = Tensor::empty({N}, DType::f32);
  Tensor losses_g = empty_gpu({N}), lse_g = empty_gpu({N}), logits_g = gpu(logits), targets_g = gpu(targets);
  ops::cross_entropy_forward(losses, lse, logits, targets, kIgnore);
  ops::cross_entropy_forward(losses_g, lse_g, logits_g, targets_g, kIgnore);
  EXPECT_TENSOR_NEAR(host(losses_g), losses, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(lse_g), lse, tolerance(DType::f32));
  EXPECT_EQ(host(losses_g).data<float>()[1], 0.0f);

  Tensor dlogits = Tensor::empty({N, V}, DType::f32), dlogits_g = empty_gpu({N, V});
  ops::cross_entropy_backward(dlogits, logits, lse, targets, kDloss, kIgnore);
  ops::cross_entropy_backward(dlogits_g, logits_g, lse_g, targets_g, kDloss, kIgnore);
  EXPECT_TENSOR_NEAR(host(dlogits_g), dlogits, tolerance(DType::f32));
  ops::cross_entropy_backward(logits_g, logits_g, lse_g, targets_g, kDloss, kIgnore);  // in place
  EXPECT_TENSOR_NEAR(host(logits_g), dlogits, tolerance(DType::f32));
}

// A target outside [0, V) on the device reads no logit and gives its row a
// NaN loss (the trainer skips such a step); the other rows are unaffected.
TEST_F(CudaOps, CrossEntropyBadTargetOnDeviceGivesNaN) {
  Tensor logits = random_tensor({2, 10}, DType::f32, 2);
  Tensor losses = Tensor::empty({2}, DType::f32), lse = Tensor::empty({2}, DType::f32);
  ops::cross_entropy_forward(losses, lse, logits, Tensor::from<int32_t>({1, 2}, {2}), kIgnore);
  Tensor losses_g = empty_gpu({2}), lse_g = empty_gpu({2});
  ops::cross_entropy_forward(losses_g, lse_g, gpu(logits), gpu(Tensor::from<int32_t>({1, 10}, {2})), kIgnore);
  const Tensor got = host(losses_g);
  EXPECT_NEAR(got.data<float>()[0], losses.data<float>()[0], 1e-5);
  EXPECT_TRUE(std::isnan(got.data<float>()[1]));
}

// Shard [col_start, col_start + K) of a vocabulary, the last 3 columns padding.
constexpr int64_t kN = 5, kK = 300, kValid = 297, kStart = 600;

Tensor shard_logits() {
  Tensor x = random_tensor({kN, kK}, DType::f32, 3, 4.0);
  float* p = x.data<float>();
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t j = kValid; j < kK; ++j) p[n * kK + j] = 1e4f;    // padding must never win
  for (int64_t j = 0; j < kValid; ++j) p[4 * kK + j] = -INFINITY;  // row 4: nothing valid is finite
  return x;
}
// Row 0: target in the shard; 1: ignored; 2: in another shard; 3: last valid column; 4: all -inf.
Tensor shard_targets() {
  return Tensor::from<int32_t>({int32_t(kStart + 17), kIgnore, 5, int32_t(kStart + kValid - 1), 2}, {kN});
}

TEST_F(CudaOps, ShardLossPiecesMatchCpu) {
  Tensor logits = shard_logits(), targets = shard_targets();
  Tensor logits_g = gpu(logits), targets_g = gpu(targets);
  Tensor mx = Tensor::empty({kN}, DType::f32), mx_g = empty_gpu({kN});
  ops::shard_row_max(mx, logits, kValid);
  ops::shard_row_max(mx_g, logits_g, kValid);
  EXPECT_TRUE(same_bits(host(mx_g), mx));

  Tensor sums = Tensor::empty({2, kN}, DType::f32), sums_g = empty_gpu({2, kN});
  ops::shard_softmax_partials(sums, logits, mx, targets, kStart, kValid);
  ops::shard_softmax_partials(sums_g, logits_g, mx_g, targets_g, kStart, kValid);
  EXPECT_TENSOR_NEAR(host(sums_g), sums, tolerance(DType::f32));
  EXPECT_EQ(host(sums_g).data<float>()[4], 0.0f);  // the all -inf row adds 0, not NaN

  // Row 4's statistics as another shard would have them, so the loss is finite.
  mx.data<float>()[4] = 1.0f;
  sums.data<float>()[4] = 2.0f;
  Tensor losses = Tensor::empty({kN}, DType::f32), lse = Tensor::empty({kN}, DType::f32);
  Tensor losses_g = empty_gpu({kN}), lse_g = empty_gpu({kN});
  ops::cross_entropy_from_partials(losses, lse, mx, sums, targets, kIgnore);
  ops::cross_entropy_from_partials(losses_g, lse_g, gpu(mx), gpu(sums), targets_g, kIgnore);
  EXPECT_TENSOR_NEAR(host(losses_g), losses, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(lse_g), lse, tolerance(DType::f32));

  Tensor dlogits = Tensor::empty({kN, kK}, DType::f32), dlogits_g = empty_gpu({kN, kK});
  ops::shard_cross_entropy_backward(dlogits, logits, lse, targets, kDloss, kStart, kValid, kIgnore);
  ops::shard_cross_entropy_backward(dlogits_g, logits_g, gpu(lse), targets_g, kDloss, kStart, kValid, kIgnore);
  EXPECT_TENSOR_NEAR(host(dlogits_g), dlogits, tolerance(DType::f32));
}

TEST_F(CudaOps, ShardRowMaxWithoutValidColumns) {
  Tensor logits = shard_logits(), mx_g = empty_gpu({kN});
  ops::shard_row_max(mx_g, gpu(logits), 0);
  Tensor mx = host(mx_g);
  for (int64_t n = 0; n < kN; ++n) EXPECT_EQ(mx.data<float>()[n], -INFINITY);
}

TEST_F(CudaOps, Act16CrossEntropyMatchesCpu) {
  const int64_t N = 6, K = 1000, col_start = 500, n_valid = 900;
  Tensor targets = Tensor::from<int32_t>({503, kIgnore, 1399, 0, 1017, 600}, {N}), targets_g = gpu(targets);
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor logits = act16({N, K}, dt, 7, 5.0), logits_g = gpu(logits);
    Tensor losses = Tensor::zeros({N}, DType::f32), lse = losses.clone(), losses_g = gpu(losses), lse_g = gpu(lse);
    Tensor full_targets = Tensor::from<int32_t>({3, kIgnore, 999, 0, 517, kIgnore}, {N});
    ops::cross_entropy_forward(losses, lse, logits, full_targets, kIgnore);
    ops::cross_entropy_forward(losses_g, lse_g, logits_g, gpu(full_targets), kIgnore);
    EXPECT_TENSOR_NEAR(host(losses_g), losses, tolerance(DType::f32));
    EXPECT_TENSOR_NEAR(host(lse_g), lse, tolerance(DType::f32));
    Tensor d = Tensor::zeros({N, K}, dt), d_g = gpu(logits);
    ops::cross_entropy_backward(d, logits, lse, full_targets, kDloss, kIgnore);
    ops::cross_entropy_backward(d_g, d_g, gpu(lse), gpu(full_targets), kDloss, kIgnore);  // in place
    expect_rounded_equal(host(d_g), d, 1, kCancelAtol);
    Tensor mx = Tensor::zeros({N}, DType::f32), mx_g = gpu(mx), sums = Tensor::zeros({2, N}, DType::f32);
    Tensor sums_g = gpu(sums);
    ops::shard_softmax_stats(mx, sums, logits, targets, col_start, n_valid);
    ops::shard_softmax_stats(mx_g, sums_g, logits_g, targets_g, col_start, n_valid);
    EXPECT_TRUE(same_bits(host(mx_g), mx));
    EXPECT_TENSOR_NEAR(host(sums_g), sums, tolerance(DType::f32));
    ops::shard_cross_entropy_backward(d, logits, lse, targets, kDloss, col_start, n_valid, kIgnore);
    ops::shard_cross_entropy_backward(d_g, logits_g, gpu(lse), targets_g, kDloss, col_start, n_valid, kIgnore);
    expect_rounded_equal(host(d_g), d, 1, kCancelAtol);
  }
}

}  // namespace
}  // namespace lattice::test
