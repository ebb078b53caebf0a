// Tests of src/tp/cross_entropy.cpp: the vocabulary-parallel loss against the
// full single-rank loss (ops::cross_entropy_forward/backward) on the GPT-2
// vocabulary (50257, which no tp > 1 divides, so the last rank holds padding
// columns), with ignored targets and padding columns holding huge logits.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "tp/cross_entropy.h"
#include "tp_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

constexpr int64_t kV = 50257, kN = 6;
constexpr int kIgnore = -100;
constexpr int64_t kVocabMultiple = 64;
// Targets at both ends of the vocabulary, in the middle, and ignored.
const std::vector<int32_t> kTargets = {0, int32_t(kV - 1), kIgnore, 25151, 12609, kIgnore};

struct Local {
  Tensor logits;  // (N, V_l)
  int64_t start;  // first (padded) vocabulary column of this rank
};

// This rank's columns of the full logits; padding columns get large values
// (one of them a huge 1e4) that must never win the softmax.
Local local_logits(const Tensor& full, const comm::Group& tp) {
  const TpShard s = shard_of(tp, kVocabMultiple);
  const int64_t vl = padded_vocab(kV, s) / s.size, start = s.rank * vl;
  Tensor f = to_f64(full), out = Tensor::empty({kN, vl}, DType::f64);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t j = 0; j < vl; ++j) {
      const int64_t g = start + j;
      out.data<double>()[n * vl + j] = g < kV ? f.data<double>()[n * kV + g] : (g == kV ? 1e4 : 50.0 + double(n));
    }
  return {full.dtype() == DType::f64 ? out : out.to(full.dtype()), start};
}

int64_t count_valid() {
  int64_t c = 0;
  for (int32_t t : kTargets) c += t != kIgnore;
  return c;
}

void check_loss(comm::Group& tp, DType dt) {
  SCOPED_TRACE(fmt::format("tp {} rank {} {}", tp.size(), tp.rank(), dtype_name(dt)));
  const Tolerance tol = tolerance(dt);
  Tensor full = random_tensor({kN, kV}, dt, 81, 4.0), targets = Tensor::from<int32_t>(kTargets, {kN});
  Tensor ref_losses = Tensor::zeros({kN}, dt), ref_lse = Tensor::zeros({kN}, dt);
  ops::cross_entropy_forward(ref_losses, ref_lse, full, targets, kIgnore);
  const float dloss = 1.0f / float(count_valid());  // mean over valid tokens
  Tensor ref_d = Tensor::zeros({kN, kV}, dt);
  ops::cross_entropy_backward(ref_d, full, ref_lse, targets, dloss, kIgnore);

  Local local = local_logits(full, tp);
  const bool has_padding = local.start + local.logits.dim(1) > kV;
  EXPECT_EQ(has_padding, tp.rank() == tp.size() - 1) << "with tp > 1 only the last rank holds padding";
  Tensor losses = random_tensor({kN}, dt, 82), lse = random_tensor({kN}, dt, 83);  // overwritten
  tp::vocab_parallel_cross_entropy_forward(losses, lse, local.logits, targets, local.start, kV, kIgnore, tp);
  EXPECT_TENSOR_NEAR(losses, ref_losses, tol) << "losses";
  EXPECT_TENSOR_NEAR(lse, ref_lse, tol) << "lse";
  for (int64_t n = 0; n < kN; ++n) {
    EXPECT_LT(to_f64(lse).data<double>()[n], 100.0) << "a padding column entered the softmax";
    if (kTargets[size_t(n)] == kIgnore) {
      EXPECT_EQ(to_f64(losses).data<double>()[n], 0.0);
    }
  }

  Tensor expect_d = Tensor::zeros(local.logits.shape(), dt);  // the rank's columns of ref_d, padding 0
  {
    Tensor r = to_f64(ref_d), e = Tensor::zeros(local.logits.shape(), DType::f64);
    const int64_t vl = local.logits.dim(1);
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t j = 0; j < vl && local.start + j < kV; ++j)
        e.data<double>()[n * vl + j] = r.data<double>()[n * kV + local.start + j];
    expect_d = dt == DType::f64 ? e : e.to(dt);
  }
  Tensor dlogits = random_tensor(local.logits.shape(), dt, 84);  // overwritten
  tp::vocab_parallel_cross_entropy_backward(dlogits, local.logits, lse, targets, dloss, local.start, kV, kIgnore);
  EXPECT_TENSOR_NEAR(dlogits, expect_d, tol) << "gradient slice";
  Tensor d64 = to_f64(dlogits);
  const int64_t vl = local.logits.dim(1);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t j = std::max<int64_t>(0, kV - local.start); j < vl; ++j)
      ASSERT_EQ(d64.data<double>()[n * vl + j], 0.0) << "padding column " << local.start + j << " got gradient";

  // In place over the logits (what the LM head does with its largest buffer).
  tp::vocab_parallel_cross_entropy_backward(local.logits, local.logits, lse, targets, dloss, local.start, kV, kIgnore);
  EXPECT_EQ(closeness(local.logits, dlogits, kExact), 0.0) << "in-place backward differs";
}

}  // namespace

TEST(TpCrossEntropy, MatchesFullLossOnPaddedGpt2Vocabulary) {
  for (comm::Group& tp : tp_test_groups())
    for (DType dt : {DType::f64, DType::f32}) check_loss(tp, dt);
}

TEST(TpCrossEntropy, PaddingNeverWinsEvenWhenItIsTheOnlyLargeLogit) {
  // All real logits very negative, padding 1e4: the loss is still the real one.
  for (comm::Group& tp : tp_test_groups()) {
    const int64_t V = 10;  // tp * 64 padding: at tp >= 2 every rank but the first holds only padding
    const TpShard s = shard_of(tp, kVocabMultiple);
    const int64_t vl = padded_vocab(V, s) / s.size, start = s.rank * vl;
    Tensor logits = Tensor::empty({1, vl}, DType::f64), targets = Tensor::from<int32_t>({3}, {1});
    for (int64_t j = 0; j < vl; ++j) logits.data<double>()[j] = start + j < V ? -500.0 - double(start + j) : 1e4;
    Tensor losses = Tensor::zeros({1}, DType::f64), lse = Tensor::zeros({1}, DType::f64);
    tp::vocab_parallel_cross_entropy_forward(losses, lse, logits, targets, start, V, kIgnore, tp);
    double sum = 0;
    for (int64_t g = 0; g < V; ++g) sum += std::exp(-500.0 - double(g) + 500.0);
    const double expect_lse = -500.0 + std::log(sum);
    EXPECT_NEAR(lse.data<double>()[0], expect_lse, 1e-9);
    EXPECT_NEAR(losses.data<double>()[0], expect_lse - (-503.0), 1e-9);
  }
}

TEST(TpCrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  for (comm::Group& tp : tp_test_groups()) {
    Tensor logits = Tensor::zeros({1, 8}, DType::f32), targets = Tensor::from<int32_t>({int32_t(8 * tp.size())}, {1});
    Tensor losses = Tensor::zeros({1}, DType::f32), lse = Tensor::zeros({1}, DType::f32);
    EXPECT_THROW(tp::vocab_parallel_cross_entropy_forward(losses, lse, logits, targets, 8 * tp.rank(), 8 * tp.size(),
                                                          kIgnore, tp),
                 Error);  // checked before any collective, on every rank alike
  }
}
