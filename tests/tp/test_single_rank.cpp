// src/tp with a tp group of one rank (comm/self_communicator.h), in one
// process: every layer is exactly the plain single-rank op (no communication,
// the split/gather pairs reduce to copies), and the loss ignores the
// vocabulary padding that vocab_multiple adds even at tp = 1.
#include <gtest/gtest.h>

#include "comm/self_communicator.h"
#include "core/ops.h"
#include "tp/cross_entropy.h"
#include "tp/embedding.h"
#include "tp/linear.h"
#include "tp/mappings.h"
#include "tp_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

TEST(TpSingleRank, RegionOpsAreIdentitiesOrCopies) {
  comm::Group tp = comm::self_group("tp");
  Tensor x = random_tensor({3, 6}, DType::f32, 1), before = x.clone(), y = Tensor::zeros({3, 6}, DType::f32);
  tp::copy_to_tp_region_backward(x, tp);
  tp::reduce_from_tp_region_forward(x, tp);
  EXPECT_TRUE(same_bits(x, before));
  tp::scatter_to_tp_region_forward(y, x, tp, 3);
  EXPECT_TRUE(same_bits(y, before));
  y.zero_();
  tp::gather_from_tp_region_forward(y, x, tp, 3);
  EXPECT_TRUE(same_bits(y, before));
  tp::gather_from_tp_region_backward(x, x, tp);  // in place: nothing to do
  EXPECT_TRUE(same_bits(x, before));
}

TEST(TpSingleRank, LinearLayersAreThePlainLinear) {
  comm::Group tp = comm::self_group("tp");
  Tensor inp = random_tensor({4, 5}, DType::f64, 2), w = random_tensor({6, 5}, DType::f64, 3);
  Tensor b = random_tensor({6}, DType::f64, 4), dout = random_tensor({4, 6}, DType::f64, 5);
  Tensor out_ref = Tensor::zeros({4, 6}, DType::f64), dinp_ref = Tensor::zeros({4, 5}, DType::f64);
  Tensor gw_ref = Tensor::zeros({6, 5}, DType::f64), gb_ref = Tensor::zeros({6}, DType::f64);
  ops::linear_forward(out_ref, inp, w, &b);
  ops::linear_backward(&dinp_ref, &gw_ref, &gb_ref, dout, inp, w);

  for (bool gather : {false, true}) {
    tp::ColumnParallelLinear col({.bias = true, .gather_output = gather, .n_fused = 3}, tp);
    Tensor out = Tensor::zeros({4, 6}, DType::f64), dinp = out_ref.clone().view(0, {4, 5});
    Tensor gw = Tensor::zeros({6, 5}, DType::f64), gb = Tensor::zeros({6}, DType::f64);
    col.forward(out, inp, w, &b);
    col.backward(&dinp, &gw, &gb, dout, inp, w);
    EXPECT_TRUE(same_bits(out, out_ref) && same_bits(dinp, dinp_ref) && same_bits(gw, gw_ref) && same_bits(gb, gb_ref))
        << "column, gather_output " << gather;
  }
  for (bool parallel : {false, true}) {
    tp::RowParallelLinear row({.bias = true, .input_is_parallel = parallel}, tp);
    Tensor out = Tensor::zeros({4, 6}, DType::f64), dinp = Tensor::zeros({4, 5}, DType::f64);
    Tensor gw = Tensor::zeros({6, 5}, DType::f64), gb = Tensor::zeros({6}, DType::f64);
    row.forward(out, inp, w, &b);
    row.backward(&dinp, &gw, &gb, dout, inp, w);
    EXPECT_TENSOR_NEAR(out, out_ref, tolerance(DType::f64)) << "row (bias added after the matmul)";
    EXPECT_TRUE(same_bits(dinp, dinp_ref) && same_bits(gw, gw_ref) && same_bits(gb, gb_ref))
        << "row, input_is_parallel " << parallel;
  }
}

TEST(TpSingleRank, EmbeddingsAndLossWithPaddedVocabulary) {
  comm::Group tp = comm::self_group("tp");
  const int64_t V = 11, Vp = padded_vocab(V, TpShard{0, 1, 8});  // 16 rows, 5 of them padding
  Tensor w = Tensor::zeros({Vp, 3}, DType::f64);
  w.view(0, {V, 3}).copy_from(random_tensor({V, 3}, DType::f64, 6));
  Tensor ids = Tensor::from<int32_t>({10, 0, 4, -100}, {4}), out = Tensor::zeros({4, 3}, DType::f64);
  Tensor ref = out.clone();
  ops::embedding_forward(ref, ids, w);
  tp::VocabParallelEmbedding(tp).forward(out, ids, w);
  EXPECT_TRUE(same_bits(out, ref));
  tp::ParallelEmbedding(tp).forward(out, ids, w);
  EXPECT_TRUE(same_bits(out, ref));

  Tensor logits = random_tensor({4, Vp}, DType::f64, 7, 3.0), full = random_tensor({4, V}, DType::f64, 7, 3.0);
  for (int64_t n = 0; n < 4; ++n) {
    full.view(n * V, {V}).copy_from(logits.view(n * Vp, {V}));
    logits.data<double>()[n * Vp + V] = 1e4;  // padding: must not win
  }
  Tensor losses = Tensor::zeros({4}, DType::f64), lse = losses.clone(), rl = losses.clone(), rlse = losses.clone();
  ops::cross_entropy_forward(rl, rlse, full, ids, -100);
  tp::vocab_parallel_cross_entropy_forward(losses, lse, logits, ids, 0, V, -100, tp);
  EXPECT_TENSOR_NEAR(losses, rl, tolerance(DType::f64));
  EXPECT_TENSOR_NEAR(lse, rlse, tolerance(DType::f64));
}
