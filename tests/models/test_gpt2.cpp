// GPT-2: the parameter table, dropout keyed by step, and the checks every
// model passes (models/model_checks.h): finite-difference gradients in f64,
// f32 against f64, chunks chained by hand, recomputation, overfitting.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/gpt2/gpt2.h"
#include "models/model_checks.h"

using namespace lattice;
using namespace lattice::gpt2;

namespace {

Gpt2Config tiny_config() {
  Gpt2Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.vocab_size = 37;
  c.max_seq_len = 12;
  c.dropout = 0.1f;
  c.init_std = 0.2f;  // larger than GPT-2's 0.02 so every path carries signal
  return c;
}

test::ModelUnderTest under_test(const Gpt2Config& cfg) {
  return test::model_under_test<Gpt2>(cfg, param_specs(cfg), cfg.vocab_size);
}

using test::random_tokens;

}  // namespace

TEST(Gpt2, ParamTableUsesHfNamesAndCounts) {
  Gpt2Config c = tiny_config();
  auto specs = param_specs(c);
  EXPECT_EQ(specs.front().name, "wte.weight");
  EXPECT_EQ(specs[4].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(specs[4].shape, (Shape{3 * 16, 16}));
  int64_t n = 0;
  for (auto& s : specs) n += shape_numel(s.shape);
  const int64_t C = 16, V = 37, L = 2, P = 12;
  EXPECT_EQ(n, V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C);
  // Matmul weights (read through the 16-bit shadow only, core/param.h): the
  // linear layers' 2-D weights and an untied head; not their biases, the
  // norms, the position table or the tied token embedding.
  for (auto& s : specs) {
    const bool linear =
        s.name.ends_with("c_attn.weight") || s.name.ends_with("c_proj.weight") || s.name.ends_with("c_fc.weight");
    EXPECT_EQ(s.matmul_weight, linear) << s.name;
  }
  c.tie_embeddings = false;
  EXPECT_EQ(param_specs(c).back().name, "lm_head.weight");
  EXPECT_TRUE(param_specs(c).back().matmul_weight);
}

TEST(Gpt2, WholeModelGradientMatchesFiniteDifferences) {
  for (bool tie : {true, false}) {
    Gpt2Config cfg = tiny_config();
    cfg.tie_embeddings = tie;
    const int64_t B = 2, T = 8;
    Tensor x = random_tokens(B, T, cfg.vocab_size, 1), y = random_tokens(B, T, cfg.vocab_size, 2);
    y.data<int32_t>()[3] = kIgnoreIndex;  // one ignored target
    test::check_gradients(under_test(cfg), x, y, double(B * T - 1), tie ? "tied" : "untied");
  }
}

TEST(Gpt2, Fp32MatchesFp64) { test::check_fp32_matches_fp64(under_test(tiny_config()), 2, 8); }
TEST(Gpt2, SixteenBitActivations) { test::check_16bit_activations(under_test(tiny_config()), 2, 8); }

TEST(Gpt2, DropoutChangesTrainingButNotEvaluation) {
  Gpt2Config cfg = tiny_config();
  cfg.dropout = 0.3f;
  test::WholeModel s(under_test(cfg), DType::f32);
  Tensor x = random_tokens(2, 8, cfg.vocab_size, 5), y = random_tokens(2, 8, cfg.vocab_size, 6);
  auto ctx = s.model->make_context(2, 8);
  double train_a = s.model->forward(*ctx, x, y, {1, 1, 0, true});
  double train_b = s.model->forward(*ctx, x, y, {1, 2, 0, true});
  double train_a2 = s.model->forward(*ctx, x, y, {1, 1, 0, true});
  double eval_a = s.model->forward(*ctx, x, y, {1, 1, 0, false});
  double eval_b = s.model->forward(*ctx, x, y, {1, 2, 0, false});
  EXPECT_NE(train_a, train_b);   // different step, different masks
  EXPECT_EQ(train_a, train_a2);  // same coordinates, same masks
  EXPECT_EQ(eval_a, eval_b);
}

TEST(Gpt2, TinyModelOverfitsOneBatch) {
  Gpt2Config cfg;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.d_model = 64;
  cfg.vocab_size = 64;
  cfg.max_seq_len = 16;
  test::check_overfits_one_batch(under_test(cfg), 4, 16);
}

// The model cut into pipeline chunks, each with its own parameters as on its
// own rank, chained by hand: the same loss and gradients as the whole model;
// the tied embedding's two replicas' gradients sum to the whole model's.
TEST(Gpt2, ChunksChainedByHandMatchTheWholeModel) {
  Gpt2Config cfg = tiny_config();
  cfg.n_layer = 3;
  const std::vector<StageSpan> spans = {{0, 1, true, false}, {1, 2, false, false}, {2, 3, false, true}};
  const auto last = select_stage_params(param_specs(cfg), {spans[2]}, cfg.n_layer);
  const auto first = select_stage_params(param_specs(cfg), {spans[0]}, cfg.n_layer);
  auto find = [](const std::vector<ParamSpec>& v, const std::string& n) {
    return std::find_if(v.begin(), v.end(), [&](const ParamSpec& s) { return s.name == n; });
  };
  ASSERT_NE(find(last, "wte.weight"), last.end());
  EXPECT_TRUE(find(last, "wte.weight")->tie_replica);
  EXPECT_FALSE(find(first, "wte.weight")->tie_replica);
  test::check_chunks_match_whole(under_test(cfg), spans, 2, 8);
}

// Activation recomputation: the same loss and gradients, a smaller context.
TEST(Gpt2, RecomputedBlocksGiveTheSameGradientsWithLessMemory) {
  Gpt2Config cfg = tiny_config();
  cfg.n_layer = 3;
  test::check_recompute(under_test(cfg), {0, 2, 3}, 2, 8);
}

// Selective recomputation (parallel.recompute_attention), dropout on.
TEST(Gpt2, RecomputedAttentionGivesTheSameBitsWithLessMemory) {
  Gpt2Config cfg = tiny_config();
  cfg.n_layer = 3, cfg.dropout = 0.1f;
  test::check_recompute_attention(under_test(cfg), 2, 8);
}

// The LM head and loss in chunks of rows (parallel.head_chunk_tokens), the head tied to the embedding.
TEST(Gpt2, HeadInChunksGivesTheSameGradientsWithLessMemory) {
  test::check_head_chunks(under_test(tiny_config()), 2, 8);
}
