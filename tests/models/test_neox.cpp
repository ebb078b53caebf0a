// GPT-NeoX (the walkthrough model of docs/adding-a-model.md): its parameter
// table and policy, the parallel residual itself, and the checks every model
// passes (tests/models/model_checks.h): finite-difference gradients in f64
// (tied and untied), f32 against f64, chunks chained by hand, recomputation,
// overfitting one batch; and the registry and config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/ops.h"
#include "models/model_checks.h"
#include "models/neox/neox.h"
#include "models/registry.h"
#include "support/error_text.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::neox;

namespace {

NeoxConfig tiny_config() {
  NeoxConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.d_ff = 24;
  c.vocab_size = 37;
  c.max_seq_len = 12;
  c.dropout = 0.1f;
  c.rope_theta = 100.0;  // small, so that positions 0..T-1 turn the rotations far
  c.init_std = 0.2f;     // larger than NeoX's 0.02 so every path carries signal
  return c;
}

test::ModelUnderTest under_test(const NeoxConfig& cfg) {
  return test::model_under_test<Neox>(cfg, param_specs(cfg), cfg.vocab_size);
}

}  // namespace

TEST(Neox, ParamTableUsesHfNamesPolicyAndCounts) {
  NeoxConfig c = tiny_config();
  const auto specs = param_specs(c);
  const int64_t C = 16, V = 37, L = 2, F = 24;
  EXPECT_EQ(specs.front().name, "gpt_neox.embed_in.weight");
  EXPECT_EQ(specs.back().name, "embed_out.weight");  // untied by default (HF NeoX)
  const std::string h = "gpt_neox.layers.1.";
  struct Row {
    const char* name;
    Placement placement;
    int n_fused;
    Shape shape;
  };
  const Row rows[] = {{"attention.query_key_value.weight", Placement::column, 3, {3 * C, C}},
                      {"attention.query_key_value.bias", Placement::column, 3, {3 * C}},
                      {"attention.dense.weight", Placement::row, 1, {C, C}},
                      {"attention.dense.bias", Placement::replicated, 1, {C}},
                      {"mlp.dense_h_to_4h.weight", Placement::column, 1, {F, C}},
                      {"mlp.dense_h_to_4h.bias", Placement::column, 1, {F}},
                      {"mlp.dense_4h_to_h.weight", Placement::row, 1, {C, F}},
                      {"mlp.dense_4h_to_h.bias", Placement::replicated, 1, {C}},
                      {"input_layernorm.weight", Placement::replicated, 1, {C}},
                      {"post_attention_layernorm.bias", Placement::replicated, 1, {C}}};
  for (const Row& r : rows) {
    const ParamSpec& s = test::spec_named(specs, h + r.name);
    EXPECT_EQ(s.placement, r.placement) << s.name;
    EXPECT_EQ(s.n_fused, r.n_fused) << s.name;
    EXPECT_EQ(s.shape, r.shape) << s.name;
    EXPECT_EQ(s.layer, 1) << s.name;
  }
  EXPECT_EQ(test::spec_named(specs, "gpt_neox.embed_in.weight").placement, Placement::vocab);
  EXPECT_EQ(test::spec_named(specs, "embed_out.weight").placement, Placement::vocab);
  EXPECT_EQ(test::spec_named(specs, "gpt_neox.final_layer_norm.weight").layer, L);
  int64_t n = 0;
  for (const ParamSpec& s : specs) n += shape_numel(s.shape);
  EXPECT_EQ(n, 2 * V * C + L * (4 * C * C + 2 * C * F + 3 * C + C + F + C + 4 * C) + 2 * C);
  c.tie_embeddings = true;
  const auto tied = param_specs(c);
  EXPECT_EQ(tied.back().name, "gpt_neox.final_layer_norm.bias");
  EXPECT_EQ(tied.front().tie_group, "embed_in");
  EXPECT_EQ(tied.front().tie_layer, 2);
}

// configs/neox-160m.yaml is Pythia-160M's shape: the published 162,322,944 parameters.
TEST(Neox, Pythia160mShapeHasItsParameterCount) {
  NeoxConfig c;
  c.n_layer = 12, c.n_head = 12, c.d_model = 768, c.d_ff = 3072, c.vocab_size = 50304, c.max_seq_len = 2048;
  int64_t n = 0;
  for (const ParamSpec& s : param_specs(c)) n += shape_numel(s.shape);
  EXPECT_EQ(n, 162322944);
}

// The parallel residual: both branches read the block input, so shifting the
// attention output's bias by d shifts the block's output by exactly d (in a
// sequential block the MLP would see the shift too).
TEST(Neox, BothBranchesReadTheBlockInput) {
  NeoxConfig cfg = tiny_config();
  cfg.dropout = 0.0f;
  const test::ModelUnderTest m = under_test(cfg);
  test::WholeModel s(m, DType::f64, StageSpan{0, 1, true, false});
  const int64_t B = 2, T = 6, C = cfg.d_model;
  Tensor x = test::random_tokens(B, T, cfg.vocab_size, 1), y = test::random_tokens(B, T, cfg.vocab_size, 2);
  auto ctx = s.model->make_context(B, T);
  Tensor before = Tensor::empty({B, T, C}, DType::f64), after = Tensor::empty({B, T, C}, DType::f64);
  s.model->forward(*ctx, x, y, {1, 1, 0, false}, &before);
  Tensor bias = s.params.value("gpt_neox.layers.0.attention.dense.bias");
  Tensor shift = test::random_tensor({C}, DType::f64, 3);
  ops::add_inplace(bias, shift);
  s.model->forward(*ctx, x, y, {1, 1, 0, false}, &after);
  double worst = 0;
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = 0; j < C; ++j)
      worst = std::max(worst, std::fabs(after.data<double>()[r * C + j] - before.data<double>()[r * C + j] -
                                        shift.data<double>()[j]));
  EXPECT_LT(worst, 1e-12);
}

TEST(Neox, WholeModelGradientMatchesFiniteDifferences) {
  for (bool tie : {false, true}) {
    NeoxConfig cfg = tiny_config();
    cfg.tie_embeddings = tie;
    const int64_t B = 2, T = 8;
    Tensor x = test::random_tokens(B, T, cfg.vocab_size, 1), y = test::random_tokens(B, T, cfg.vocab_size, 2);
    y.data<int32_t>()[3] = kIgnoreIndex;
    test::check_gradients(under_test(cfg), x, y, double(B * T - 1), tie ? "tied" : "untied");
  }
}

TEST(Neox, Fp32MatchesFp64) { test::check_fp32_matches_fp64(under_test(tiny_config()), 2, 8); }
TEST(Neox, SixteenBitActivations) { test::check_16bit_activations(under_test(tiny_config()), 2, 8); }

TEST(Neox, ChunksChainedByHandMatchTheWholeModel) {
  NeoxConfig cfg = tiny_config();
  cfg.n_layer = 3;
  cfg.tie_embeddings = true;  // the tie spans the first and last chunk
  test::check_chunks_match_whole(under_test(cfg), {{0, 1, true, false}, {1, 2, false, false}, {2, 3, false, true}}, 2,
                                 8);
}

TEST(Neox, RecomputedBlocksGiveTheSameGradientsWithLessMemory) {
  NeoxConfig cfg = tiny_config();
  cfg.n_layer = 3;
  test::check_recompute(under_test(cfg), {0, 2, 3}, 2, 8);
}

// Selective recomputation (parallel.recompute_attention), dropout on.
TEST(Neox, RecomputedAttentionGivesTheSameBitsWithLessMemory) {
  NeoxConfig cfg = tiny_config();
  cfg.n_layer = 3, cfg.dropout = 0.1f;
  test::check_recompute_attention(under_test(cfg), 2, 8);
}

// The LM head and loss in chunks of rows (parallel.head_chunk_tokens).
TEST(Neox, HeadInChunksGivesTheSameGradientsWithLessMemory) {
  test::check_head_chunks(under_test(tiny_config()), 2, 8);
}

TEST(Neox, TinyModelOverfitsOneBatch) {
  NeoxConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.d_model = 64;
  cfg.d_ff = 128;
  cfg.vocab_size = 64;
  cfg.max_seq_len = 16;
  test::check_overfits_one_batch(under_test(cfg), 4, 16);
}

// Through the registry and the config checks, as `lattice train` builds it.
TEST(Neox, RegistryBuildsItFromYamlAndConfigErrorsAreOneLine) {
  const std::string base =
      "model: { arch: neox, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 320, max_seq_len: 16 }\n"
      "train: { steps: 1, global_batch: 2, micro_batch: 2, seq_len: 8 }\n"
      "optimizer: { lr: 1.0e-3 }\n"
      "data: { train: 'x_*.bin', tokenizer: bytes }\n";
  const Config cfg = parse_config(base, "neox.yaml");
  EXPECT_EQ(cfg.model.arch, ModelArch::neox);
  EXPECT_EQ(cfg.model.rope_theta, 10000.0);  // a rotary arch's default
  EXPECT_EQ(cfg.model.d_ff, 64);
  EXPECT_EQ(model_param_specs(cfg.model).front().name, "gpt_neox.embed_in.weight");
  const auto archs = registered_archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), "neox"), archs.end());
  EXPECT_GT(model_activation_bytes(cfg.model, {}, TpShard{.rank = 0, .size = 2}, DType::f32, 2, 8,
                                   ops::AttentionState::full_cpu)
                .context,
            0);
  // No grouped-query attention.
  EXPECT_HAS(test::error_text([&] { parse_config(base, "neox.yaml", {"model.n_kv_head=1"}); }),
             "neox has no grouped-query attention");
  // Rotary needs an even head size: d_model 18 over 2 heads is 9.
  EXPECT_HAS(test::error_text([&] {
               ModelConfig m = cfg.model;
               m.d_model = 18;
               model_param_specs(m);
             }),
             "model.d_model: neox's rotary embeddings need");
}
