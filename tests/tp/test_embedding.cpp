// Tests of src/tp/embedding.cpp: VocabParallelEmbedding (vocabulary rows
// split, padded) and ParallelEmbedding (embedding dim split) against the full
// single-rank embedding every rank builds itself (CONVENTIONS.md §12).
#include <gtest/gtest.h>

#include "core/ops.h"
#include "tp/embedding.h"
#include "tp_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

constexpr uint64_t kSeed = 99;
constexpr int64_t kV = 13;  // no tp divides it: the vocab-split table is padded
// Ids of every part of the vocabulary, repeated ids included (their gradients add up).
const std::vector<int32_t> kIds = {0, 12, 5, 7, 12, 1, 6, 11, 3, 0};

struct Params {
  FlatParams full, sharded;
};

// forward + backward of the full embedding into full's grads; returns out.
Tensor reference(FlatParams& full, const std::string& name, const Tensor& ids, const Tensor& dout) {
  Tensor w = full.value(name), gw = full.grad(name);
  Tensor out = Tensor::zeros(dout.shape(), dout.dtype());
  ops::embedding_forward(out, ids, w);
  ops::embedding_backward(gw, dout, ids);
  return out;
}

template <typename Layer>
void check_embedding(comm::Group& tp, DType dt, const ParamSpec& spec, int64_t vocab_multiple) {
  SCOPED_TRACE(fmt::format("{} tp {} rank {} {}", spec.name, tp.size(), tp.rank(), dtype_name(dt)));
  const TpShard shard = shard_of(tp, vocab_multiple);
  Params ps{FlatParams({spec}, dt, Device::cpu(), TpShard{}), FlatParams({spec}, dt, Device::cpu(), shard)};
  ps.full.init(kSeed);
  ps.sharded.init(kSeed);
  expect_values_are_shards(ps.full, ps.sharded, kExact, "initial values");

  const int64_t C = spec.shape[1];
  Tensor ids = Tensor::from<int32_t>(kIds, {2, 5});
  Tensor dout = random_tensor({2, 5, C}, dt, 41);
  Tensor out_ref = reference(ps.full, spec.name, ids, dout);

  Layer layer(tp);
  Tensor w = ps.sharded.value(spec.name), gw = ps.sharded.grad(spec.name);
  Tensor out = random_tensor({2, 5, C}, dt, 42);  // overwritten
  layer.forward(out, ids, w);
  EXPECT_TENSOR_NEAR(out, out_ref, tolerance(dt)) << "output";
  layer.backward(gw, dout, ids);
  expect_grads_are_shards(ps.full, ps.sharded, tolerance(dt), "gradient slice");  // padding rows: 0
  expect_adamw_step_matches(ps.full, ps.sharded, tolerance(dt), "after one AdamW step");
}

}  // namespace

TEST(TpEmbedding, VocabParallelMatchesFullEmbedding) {
  const ParamSpec wte = decayed(param_spec("wte", {kV, 4}, Placement::vocab, InitKind::normal, 0.7f));
  for (comm::Group& tp : tp_test_groups())
    for (DType dt : {DType::f32, DType::f64})
      for (int64_t multiple : {1, 8})  // 8: at tp 4 ranks 2 and 3 hold only padding rows
        check_embedding<tp::VocabParallelEmbedding>(tp, dt, wte, multiple);
}

TEST(TpEmbedding, VocabParallelRowsAreThisRanksBlock) {
  for (comm::Group& tp : tp_test_groups()) {
    tp::VocabParallelEmbedding layer(tp);
    EXPECT_EQ(layer.vocab_start(7), 7 * tp.rank());
  }
}

TEST(TpEmbedding, ParallelEmbeddingMatchesFullEmbedding) {
  for (comm::Group& tp : tp_test_groups()) {
    const ParamSpec wpe = decayed(param_spec("wpe", {kV, 3 * tp.size()}, Placement::row, InitKind::xavier_normal));
    for (DType dt : {DType::f32, DType::f64}) check_embedding<tp::ParallelEmbedding>(tp, dt, wpe, 1);
  }
}
