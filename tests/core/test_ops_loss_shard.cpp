// Tests of core/kernels/cpu/loss_shard.cpp (cross-entropy over column shards)
// through core/ops: the pieces of several shards, combined the way
// tp/cross_entropy.cpp combines them over ranks, equal the fused full loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {
constexpr int kIgnore = -100;
constexpr int64_t kN = 5, kV = 7;
constexpr float kDloss = 0.41f;
const std::vector<int32_t> kTargets = {6, kIgnore, 0, 3, 4};  // 3 and 4 straddle the shard boundary

// One column shard: global columns [start, start + K); local j >= n_valid is padding.
struct Shard {
  int64_t start, K, n_valid;
};
// Two shards of 4 columns over V = 7: the second ends in one padding column.
const std::vector<Shard> kShards = {{0, 4, 4}, {4, 4, 3}};

// The shard's columns of full (N, V), padding filled with `pad` (large: it must never win).
Tensor shard_of(const Tensor& full, const Shard& s, double pad) {
  Tensor f = to_f64(full), out = Tensor::empty({kN, s.K}, DType::f64);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t j = 0; j < s.K; ++j)
      out.data<double>()[n * s.K + j] =
          j < s.n_valid ? f.data<double>()[n * kV + s.start + j] : pad * (1.0 + 0.125 * double(j));
  return out.to(full.dtype());
}

// Loss of the shards, combined as tp does: max over shards, then summed partials.
void sharded_forward(Tensor& losses, Tensor& lse, const std::vector<Tensor>& logits, const Tensor& targets) {
  const DType dt = logits[0].dtype();
  Tensor mx = Tensor::empty({kN}, dt), sums = Tensor::zeros({2, kN}, dt), part = Tensor::empty({2, kN}, dt);
  Tensor max64 = Tensor::from<double>(std::vector<double>(kN, -INFINITY), {kN});
  for (size_t s = 0; s < logits.size(); ++s) {
    ops::shard_row_max(mx, logits[s], kShards[s].n_valid);
    Tensor m = to_f64(mx);
    for (int64_t n = 0; n < kN; ++n) max64.data<double>()[n] = std::max(max64.data<double>()[n], m.data<double>()[n]);
  }
  Tensor all_max = dt == DType::f64 ? max64 : max64.to(dt);
  for (size_t s = 0; s < logits.size(); ++s) {
    ops::shard_softmax_partials(part, logits[s], all_max, targets, kShards[s].start, kShards[s].n_valid);
    ops::add_inplace(sums, part);
  }
  ops::cross_entropy_from_partials(losses, lse, all_max, sums, targets, kIgnore);
}

double weighted_sum(const Tensor& losses) {
  Tensor l = to_f64(losses);
  double s = 0;
  for (int64_t n = 0; n < l.numel(); ++n) s += l.data<double>()[n];
  return double(kDloss) * s;
}

Tensor full_logits(DType dt) { return random_tensor({kN, kV}, dt, 71, 3.0); }
}  // namespace

TEST(OpsLossShard, ShardedPiecesEqualFullCrossEntropy) {
  Tensor full = full_logits(DType::f64), targets = Tensor::from<int32_t>(kTargets, {kN});
  Tensor losses = Tensor::zeros({kN}, DType::f64), lse = zeros_like(losses);
  Tensor ref_losses = zeros_like(losses), ref_lse = zeros_like(losses);
  ops::cross_entropy_forward(ref_losses, ref_lse, full, targets, kIgnore);
  std::vector<Tensor> shards = {shard_of(full, kShards[0], 1e3), shard_of(full, kShards[1], 1e3)};
  sharded_forward(losses, lse, shards, targets);
  EXPECT_TENSOR_NEAR(losses, ref_losses, tolerance(DType::f64));
  EXPECT_TENSOR_NEAR(lse, ref_lse, tolerance(DType::f64));
  EXPECT_EQ(losses.data<double>()[1], 0.0);  // ignored row

  Tensor ref_d = zeros_like(full);
  ops::cross_entropy_backward(ref_d, full, ref_lse, targets, kDloss, kIgnore);
  for (size_t s = 0; s < shards.size(); ++s) {
    Tensor d = random_tensor(shards[s].shape(), DType::f64, 72);  // dirty: overwritten
    ops::shard_cross_entropy_backward(d, shards[s], lse, targets, kDloss, kShards[s].start, kShards[s].n_valid,
                                      kIgnore);
    EXPECT_TENSOR_NEAR(d, shard_of(ref_d, kShards[s], 0.0).view(0, d.shape()), tolerance(DType::f64));
    for (int64_t n = 0; n < kN; ++n)  // padding columns: exactly 0
      for (int64_t j = kShards[s].n_valid; j < kShards[s].K; ++j)
        EXPECT_EQ(d.data<double>()[n * kShards[s].K + j], 0.0);
  }
}

TEST(OpsLossShard, GradcheckOfEachShardIncludingPadding) {
  Tensor targets = Tensor::from<int32_t>(kTargets, {kN});
  std::vector<Tensor> shards = {shard_of(full_logits(DType::f64), kShards[0], 5.0),
                                shard_of(full_logits(DType::f64), kShards[1], 5.0)};
  Tensor losses = Tensor::zeros({kN}, DType::f64), lse = zeros_like(losses);
  sharded_forward(losses, lse, shards, targets);
  auto loss = [&] {
    sharded_forward(losses, lse, shards, targets);
    return weighted_sum(losses);
  };
  for (size_t s = 0; s < shards.size(); ++s) {
    Tensor d = zeros_like(shards[s]);
    ops::shard_cross_entropy_backward(d, shards[s], lse, targets, kDloss, kShards[s].start, kShards[s].n_valid,
                                      kIgnore);
    expect_gradients(loss, {{&shards[s], d}});
  }
}

TEST(OpsLossShard, InPlaceBackwardEqualsOutOfPlace) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor targets = Tensor::from<int32_t>(kTargets, {kN});
    Tensor logits = shard_of(full_logits(dt), kShards[1], 9.0);
    Tensor lse = random_tensor({kN}, dt, 73, 1.0);
    Tensor separate = zeros_like(logits);
    ops::shard_cross_entropy_backward(separate, logits, lse, targets, kDloss, 4, 3, kIgnore);
    ops::shard_cross_entropy_backward(logits, logits, lse, targets, kDloss, 4, 3, kIgnore);
    EXPECT_TRUE(bitwise_equal(logits, separate)) << dtype_name(dt);
  }
}

TEST(OpsLossShard, F32MatchesF64) {
  auto run = [](DType dt) {
    Tensor targets = Tensor::from<int32_t>(kTargets, {kN});
    std::vector<Tensor> shards = {shard_of(full_logits(dt), kShards[0], 50.0),
                                  shard_of(full_logits(dt), kShards[1], 50.0)};
    Tensor losses = Tensor::zeros({kN}, dt), lse = zeros_like(losses), d = zeros_like(shards[1]);
    sharded_forward(losses, lse, shards, targets);
    ops::shard_cross_entropy_backward(d, shards[1], lse, targets, kDloss, 4, 3, kIgnore);
    return std::vector<Tensor>{losses, lse, d};
  };
  expect_f32_matches_f64(run(DType::f32), run(DType::f64));
}

TEST(OpsLossShard, ShardOfOnlyPaddingContributesNothing) {
  Tensor logits = random_tensor({kN, 3}, DType::f64, 74, 100.0), targets = Tensor::from<int32_t>(kTargets, {kN});
  Tensor mx = Tensor::empty({kN}, DType::f64), sums = Tensor::empty({2, kN}, DType::f64);
  ops::shard_row_max(mx, logits, 0);
  Tensor shift = Tensor::from<double>(std::vector<double>(kN, 0.5), {kN});
  ops::shard_softmax_partials(sums, logits, shift, targets, 7, 0);
  ops::shard_softmax_partials(sums, logits, mx, targets, 7, 0);  // a -inf max gives 0, not NaN
  for (int64_t n = 0; n < kN; ++n) {
    EXPECT_EQ(mx.data<double>()[n], -INFINITY);
    EXPECT_EQ(sums.data<double>()[n], 0.0);
    EXPECT_EQ(sums.data<double>()[kN + n], 0.0);
  }
  Tensor d = random_tensor({kN, 3}, DType::f64, 75), lse = Tensor::zeros({kN}, DType::f64);
  ops::shard_cross_entropy_backward(d, logits, lse, targets, kDloss, 7, 0, kIgnore);
  for (int64_t i = 0; i < d.numel(); ++i) EXPECT_EQ(d.data<double>()[i], 0.0);
}

// The one-pass statistics (shard_softmax_stats) equal shard_row_max followed
// by shard_softmax_partials: on the small shards with padding, on a shard of
// only padding, and on wide f32 rows (several of its 2048-column blocks) with
// the max in different blocks, against the f64 two-pass result.
TEST(OpsLossShard, OnePassStatsEqualTwoPasses) {
  Tensor targets = Tensor::from<int32_t>(kTargets, {kN});
  auto both = [&](const Tensor& logits, int64_t start, int64_t n_valid) {
    const DType dt = logits.dtype();
    Tensor mx = Tensor::empty({kN}, dt), sums = Tensor::empty({2, kN}, dt);
    Tensor mx1 = Tensor::empty({kN}, dt), sums1 = Tensor::empty({2, kN}, dt);
    ops::shard_row_max(mx, logits, n_valid);
    ops::shard_softmax_partials(sums, logits, mx, targets, start, n_valid);
    ops::shard_softmax_stats(mx1, sums1, logits, targets, start, n_valid);
    return std::vector<Tensor>{mx, sums, mx1, sums1};
  };
  for (size_t s = 0; s < kShards.size(); ++s) {
    std::vector<Tensor> r =
        both(shard_of(full_logits(DType::f64), kShards[s], 1e3), kShards[s].start, kShards[s].n_valid);
    EXPECT_TRUE(bitwise_equal(r[0], r[2])) << "shard " << s;
    EXPECT_TENSOR_NEAR(r[3], r[1], tolerance(DType::f64)) << "shard " << s;
  }
  std::vector<Tensor> pad = both(random_tensor({kN, 3}, DType::f64, 76, 100.0), 7, 0);
  for (int64_t n = 0; n < kN; ++n) {
    EXPECT_EQ(pad[2].data<double>()[n], -INFINITY);
    EXPECT_EQ(pad[3].data<double>()[n], 0.0);
  }
  const int64_t K = 7000;
  Tensor wide64 = random_tensor({kN, K}, DType::f64, 77, 40.0);
  for (int64_t n = 0; n < kN; ++n) wide64.data<double>()[n * K + (n * 1500) % K] = 30.0;  // max in block n % 4
  std::vector<Tensor> r64 = both(wide64, 0, K - 5), r32 = both(wide64.to(DType::f32), 0, K - 5);
  EXPECT_TRUE(bitwise_equal(r32[0], r32[2]));
  EXPECT_TENSOR_NEAR(r32[3], r64[1], tolerance(DType::f32));
}

TEST(OpsLossShard, RejectsMismatchedShapes) {
  Tensor logits = Tensor::zeros({kN, 4}, DType::f64), targets = Tensor::from<int32_t>(kTargets, {kN});
  Tensor short_max = Tensor::zeros({kN - 1}, DType::f64), sums = Tensor::zeros({2, kN}, DType::f64);
  EXPECT_THROW(ops::shard_row_max(short_max, logits, 4), Error);
  Tensor mx = Tensor::zeros({kN}, DType::f64), short_sums = Tensor::zeros({kN}, DType::f64);
  EXPECT_THROW(ops::shard_softmax_partials(short_sums, logits, mx, targets, 0, 4), Error);
  Tensor f32_targets = Tensor::zeros({kN}, DType::f32);
  EXPECT_THROW(ops::shard_softmax_partials(sums, logits, mx, f32_targets, 0, 4), Error);
  EXPECT_THROW(ops::shard_softmax_stats(mx, short_sums, logits, targets, 0, 4), Error);
  EXPECT_THROW(ops::shard_softmax_stats(short_max, sums, logits, targets, 0, 4), Error);
}

// The vocab-parallel pieces on a bf16/f16 shard with fp32 statistics: row
// max and target logit exact (the max of widened values), sums to fp32
// rounding (lane order), dlogits within 1 ulp of the rounded f32 result.
TEST(OpsLossShard, Act16MatchesRoundedF32) {
  const int64_t N = 6, K = 700, col_start = 1400, n_valid = 650;
  const Tolerance tight{1e-6, 1e-6};
  Tensor targets = Tensor::from<int32_t>(std::vector<int32_t>{1400, 1500, 2049, 2100, 3, -100}, {N});
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor logits = act16({N, K}, dt, 92, 6.0), logits32 = as_f32(logits);
    Tensor mx = Tensor::zeros({N}, DType::f32), sums = Tensor::zeros({2, N}, DType::f32);
    Tensor mx32 = zeros_like(mx), sums32 = zeros_like(sums);
    ops::shard_row_max(mx, logits, n_valid);
    ops::shard_row_max(mx32, logits32, n_valid);
    EXPECT_TRUE(bitwise_equal(mx, mx32));
    ops::shard_softmax_partials(sums, logits, mx32, targets, col_start, n_valid);
    ops::shard_softmax_partials(sums32, logits32, mx32, targets, col_start, n_valid);
    EXPECT_TENSOR_NEAR(sums, sums32, tight);
    Tensor mx2 = zeros_like(mx), sums2 = zeros_like(sums);
    ops::shard_softmax_stats(mx2, sums2, logits, targets, col_start, n_valid);
    EXPECT_TRUE(bitwise_equal(mx2, mx32));
    EXPECT_TENSOR_NEAR(sums2, sums32, tight);
    Tensor losses = Tensor::zeros({N}, DType::f32), lse = zeros_like(losses);
    ops::cross_entropy_from_partials(losses, lse, mx32, sums32, targets, -100);
    Tensor d = zeros_like(logits), d32 = zeros_like(logits32);
    ops::shard_cross_entropy_backward(d, logits, lse, targets, 0.5f, col_start, n_valid, -100);
    ops::shard_cross_entropy_backward(d32, logits32, lse, targets, 0.5f, col_start, n_valid, -100);
    expect_rounded_equal(d, d32, 1);
    Tensor mx16 = mx.to(dt);  // statistics stay fp32
    EXPECT_THROW(ops::shard_row_max(mx16, logits, n_valid), Error);
  }
}
