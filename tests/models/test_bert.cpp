// BERT: parameter table and policy, whole-model finite-difference gradient
// check in f64, f32 against f64, the key padding mask, pipeline chunks and
// recomputation, masked-LM masking statistics and layout independence, and a
// short masked-LM run on tiny shakespeare whose loss falls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/ops.h"
#include "models/bert/bert.h"
#include "models/model_checks.h"
#include "models/registry.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::bert;

namespace {

BertConfig tiny_config() {
  BertConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.d_ff = 24;
  c.vocab_size = 37;
  c.tokenizer_vocab = 33;  // [PAD] [MASK] [CLS] [SEP] = 33..36
  c.max_seq_len = 12;
  c.dropout = 0.1f;
  c.norm_eps = 1e-5f;
  c.init_std = 0.2f;  // larger than BERT's 0.02 so every path carries signal
  return c;
}

// Ordinary tokens (below the four special ids).
Tensor tokens(int64_t B, int64_t T, int vocab, uint64_t seed) { return test::random_tokens(B, T, vocab - 4, seed); }

test::ModelUnderTest under_test(const BertConfig& cfg) {
  return test::model_under_test<Bert>(cfg, param_specs(cfg), cfg.tokenizer_vocab);
}

}  // namespace

TEST(Bert, ParamTableUsesHfNamesPolicyAndCounts) {
  BertConfig c = tiny_config();
  auto specs = param_specs(c);
  EXPECT_EQ(specs.front().name, "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(specs.front().placement, Placement::vocab);
  EXPECT_EQ(specs.front().tie_group, "word_embeddings");
  EXPECT_EQ(specs.front().tie_layer, c.n_layer);
  const int64_t C = 16, V = 37, L = 2, P = 12, F = 24;
  int64_t n = 0;
  for (auto& s : specs) n += shape_numel(s.shape);
  EXPECT_EQ(n, V * C + P * C + 2 * C + 2 * C + L * (4 * C * C + 2 * C * F + 9 * C + F) + C * C + 3 * C + V);
  ShardingPolicy policy = sharding_policy(c);
  const std::string h = "bert.encoder.layer.1.";
  EXPECT_EQ(role_of(h + "attention.self.key.weight", policy), Role::attn_qkv);
  EXPECT_EQ(role_of(h + "attention.self.value.bias", policy), Role::attn_qkv);
  EXPECT_EQ(role_of(h + "attention.output.dense.weight", policy), Role::attn_out);
  EXPECT_EQ(role_of(h + "intermediate.dense.weight", policy), Role::mlp_in);
  EXPECT_EQ(role_of(h + "output.dense.weight", policy), Role::mlp_out);
  EXPECT_EQ(role_of(h + "output.LayerNorm.weight", policy), Role::replicated);
  EXPECT_EQ(role_of("cls.predictions.transform.dense.weight", policy), Role::replicated);
  EXPECT_EQ(role_of("cls.predictions.bias", policy), Role::replicated);
  for (const ParamSpec& s : specs)
    if (s.name.starts_with("cls.")) {
      EXPECT_EQ(s.layer, c.n_layer) << s.name;
    }
  c.tie_embeddings = false;
  auto untied = param_specs(c);
  EXPECT_TRUE(untied.front().tie_group.empty());
  EXPECT_EQ(untied[untied.size() - 2].name, "cls.predictions.decoder.weight");
  EXPECT_EQ(untied[untied.size() - 2].placement, Placement::vocab);
}

TEST(Bert, WholeModelGradientMatchesFiniteDifferences) {
  for (bool tie : {true, false}) {
    BertConfig cfg = tiny_config();
    cfg.tie_embeddings = tie;
    const int64_t B = 2, T = 8;
    Tensor x = tokens(B, T, cfg.vocab_size, 1), y = tokens(B, T, cfg.vocab_size, 2);
    const SpecialIds ids = special_ids(cfg);
    x.data<int32_t>()[T - 1] = ids.pad;  // a padded key in row 0
    x.data<int32_t>()[T] = ids.cls;
    x.data<int32_t>()[T + 3] = ids.mask;
    y.data<int32_t>()[3] = kIgnoreIndex;
    y.data<int32_t>()[T - 1] = kIgnoreIndex;
    test::check_gradients(under_test(cfg), x, y, double(B * T - 2), tie ? "tied" : "untied");
    // The key bias cannot change any softmax row: its gradient is exactly zero.
    test::WholeModel s(under_test(cfg), DType::f64);
    auto ctx = s.model->make_context(B, T);
    s.model->forward(*ctx, x, y, {123, 4, 10, true});
    s.model->backward(*ctx, 0.1f);
    EXPECT_EQ(ops::sum_squares(s.params.grad("bert.encoder.layer.1.attention.self.key.bias")), 0.0);
    EXPECT_GT(ops::sum_squares(s.params.grad("bert.encoder.layer.1.attention.self.query.bias")), 0.0);
  }
}

TEST(Bert, Fp32MatchesFp64) { test::check_fp32_matches_fp64(under_test(tiny_config()), 2, 8); }
TEST(Bert, SixteenBitActivations) { test::check_16bit_activations(under_test(tiny_config()), 2, 8); }

// Padding at the end changes nothing at the real positions: the same per-token
// losses as the unpadded sequence (the key mask hides [PAD] from every query).
TEST(Bert, PaddedKeysAreInvisible) {
  BertConfig cfg = tiny_config();
  cfg.dropout = 0.0f;
  test::WholeModel s(under_test(cfg), DType::f64);
  const int64_t T = 10, real = 7;
  const SpecialIds ids = special_ids(cfg);
  Tensor x = tokens(1, T, cfg.vocab_size, 5), y = tokens(1, T, cfg.vocab_size, 6);
  Tensor xs = Tensor::empty({1, real}, DType::i32), ys = Tensor::empty({1, real}, DType::i32);
  for (int64_t t = 0; t < real; ++t) xs.data<int32_t>()[t] = x.data<int32_t>()[t];
  for (int64_t t = 0; t < real; ++t) ys.data<int32_t>()[t] = y.data<int32_t>()[t];
  for (int64_t t = real; t < T; ++t) x.data<int32_t>()[t] = ids.pad, y.data<int32_t>()[t] = kIgnoreIndex;
  auto ctx = s.model->make_context(1, T);
  auto cshort = s.model->make_context(1, real);
  double padded = s.model->forward(*ctx, x, y, {1, 1, 0, false});
  double unpadded = s.model->forward(*cshort, xs, ys, {1, 1, 0, false});
  EXPECT_NEAR(padded, unpadded, 1e-10 * std::fabs(unpadded));
  // Without the mask the padding would leak in: [PAD] as an ordinary token changes the loss.
  for (int64_t t = real; t < T; ++t) x.data<int32_t>()[t] = ids.cls;
  EXPECT_GT(std::fabs(s.model->forward(*ctx, x, y, {1, 1, 0, false}) - unpadded), 1e-6);
}

TEST(Bert, ChunksChainedByHandMatchTheWholeModel) {
  BertConfig cfg = tiny_config();
  cfg.n_layer = 3;
  const std::vector<StageSpan> spans = {{0, 1, true, false}, {1, 2, false, false}, {2, 3, false, true}};
  const std::string word = "bert.embeddings.word_embeddings.weight";
  EXPECT_TRUE(
      FlatParams(select_stage_params(param_specs(cfg), {spans[2]}, 3), DType::f64).entry(word).spec.tie_replica);
  test::check_chunks_match_whole(under_test(cfg), spans, 2, 8);
  // A split model refuses padded inputs (later chunks cannot see the mask).
  test::WholeModel first(under_test(cfg), DType::f64, spans[0]);
  Tensor x = tokens(2, 8, cfg.vocab_size, 11), y = tokens(2, 8, cfg.vocab_size, 12);
  x.data<int32_t>()[2] = special_ids(cfg).pad;
  Tensor a0 = Tensor::empty({2, 8, cfg.d_model}, DType::f64);
  auto ctx = first.model->make_context(2, 8);
  EXPECT_THROW(first.model->forward(*ctx, x, y, {9, 2, 4, true}, &a0), Error);
}

TEST(Bert, RecomputedBlocksGiveTheSameGradientsWithLessMemory) {
  BertConfig cfg = tiny_config();
  cfg.n_layer = 3;
  test::check_recompute(under_test(cfg), {0, 2, 3}, 2, 8);
}

// Selective recomputation (parallel.recompute_attention), dropout on, with
// [PAD] in the inputs: backward computes the probabilities again under the
// same key mask.
TEST(Bert, RecomputedAttentionGivesTheSameBitsWithLessMemory) {
  BertConfig cfg = tiny_config();
  cfg.n_layer = 3;
  test::check_recompute_attention(under_test(cfg), 2, 8);
  test::check_recompute_attention(under_test(cfg), 2, 8, special_ids(cfg).pad);
}

// The decoder and loss in chunks of rows (parallel.head_chunk_tokens): the
// decoder bias's gradient summed over the chunks, its value added to each
// chunk's logits again in backward.
TEST(Bert, HeadInChunksGivesTheSameGradientsWithLessMemory) {
  test::check_head_chunks(under_test(tiny_config()), 2, 8);
}

TEST(Bert, RegistryBuildsItAndRejectsWhatItCannotTake) {
  ModelConfig m;
  m.arch = ModelArch::bert;
  m.n_layer = 2, m.n_head = 2, m.d_model = 16, m.d_ff = 64, m.vocab_size = 261, m.max_seq_len = 16;
  m.tokenizer_vocab = 257;
  EXPECT_EQ(model_param_specs(m).front().name, "bert.embeddings.word_embeddings.weight");
  EXPECT_TRUE(model_entry(ModelArch::bert).prepare_batch != nullptr);
  const auto archs = registered_archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), "bert"), archs.end());
  m.n_head = 3;
  EXPECT_THROW(model_activation_bytes(m, {}, TpShard{}, DType::f32, 2, 8, ops::AttentionState::full_cpu), Error);
}
