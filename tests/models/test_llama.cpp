// LLaMA: the HF parameter table and its sharding (replicated k/v heads
// included), the RoPE and repeat-k/v kernels against direct formulas, a
// whole-model finite-difference gradient check in f64 for n_kv_head = 1, 2 and
// n_head, and the other checks every model passes (models/model_checks.h).
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops.h"
#include "models/llama/llama.h"
#include "models/model_checks.h"
#include "optim/grad_clip.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::llama;

namespace {

LlamaConfig tiny_config(int n_kv_head = 2) {
  LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = n_kv_head;
  c.d_model = 16;
  c.d_ff = 24;
  c.vocab_size = 37;
  c.max_seq_len = 12;
  c.dropout = 0.1f;
  c.rope_theta = 100.0;  // small, so that positions 0..T-1 turn the rotations far
  c.init_std = 0.2f;     // larger than LLaMA's 0.02 so every path carries signal
  return c;
}

test::ModelUnderTest under_test(const LlamaConfig& cfg) {
  return test::model_under_test<Llama>(cfg, param_specs(cfg), cfg.vocab_size);
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

}  // namespace

TEST(Llama, ParamTableUsesHfNamesCountsAndPlacements) {
  LlamaConfig c = tiny_config();
  auto specs = param_specs(c);
  const int64_t C = 16, V = 37, L = 2, F = 24, KVC = 2 * 4;
  EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(specs[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(specs.back().name, "lm_head.weight");  // untied by default
  EXPECT_EQ(specs[specs.size() - 2].name, "model.norm.weight");
  const char* names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                         "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  const Placement placements[] = {Placement::column, Placement::column, Placement::column, Placement::row,
                                  Placement::column, Placement::column, Placement::row};
  const Shape shapes[] = {{C, C}, {KVC, C}, {KVC, C}, {C, C}, {F, C}, {F, C}, {C, F}};
  for (int i = 0; i < 7; ++i) {
    const ParamSpec& s = test::spec_named(specs, std::string("model.layers.1.") + names[i] + ".weight");
    EXPECT_EQ(s.placement, placements[i]) << s.name;
    EXPECT_EQ(s.shape, shapes[i]) << s.name;
    EXPECT_EQ(s.layer, 1);
    EXPECT_EQ(s.max_shards, i == 1 || i == 2 ? 2 : 0) << s.name;
    EXPECT_TRUE(s.matmul_weight) << s.name;
  }
  EXPECT_FALSE(test::spec_named(specs, "model.layers.0.input_layernorm.weight").matmul_weight);
  EXPECT_FALSE(test::spec_named(specs, "model.embed_tokens.weight").matmul_weight);  // a lookup table
  EXPECT_TRUE(test::spec_named(specs, "lm_head.weight").matmul_weight);
  EXPECT_EQ(test::spec_named(specs, "model.layers.0.post_attention_layernorm.weight").placement, Placement::replicated);
  EXPECT_EQ(test::spec_named(specs, "model.embed_tokens.weight").placement, Placement::vocab);
  EXPECT_EQ(test::spec_named(specs, "lm_head.weight").placement, Placement::vocab);
  int64_t n = 0;
  for (auto& s : specs) {
    n += shape_numel(s.shape);
    EXPECT_EQ(s.name.find("bias"), std::string::npos) << s.name;
  }
  EXPECT_EQ(n, 2 * V * C + L * (2 * C * C + 2 * KVC * C + 3 * C * F + 2 * C) + C);
  c.tie_embeddings = true;
  auto tied = param_specs(c);
  EXPECT_EQ(tied.back().name, "model.norm.weight");
  EXPECT_EQ(tied.front().tie_group, "embed_tokens");
  EXPECT_EQ(tied.front().tie_layer, 2);
}

// k/v with 2 heads over tp = 4: each head block on 2 ranks, the same logical
// rows; counted once in the grad norm; tp = 3 is one line.
TEST(Llama, ReplicatedKvHeadsShardAndCountOnce) {
  const ParamSpec k =
      test::spec_named(param_specs(tiny_config(2)), "model.layers.0.self_attn.k_proj.weight");  // (8, 16)
  for (int r = 0; r < 4; ++r) {
    const TpShard shard{r, 4, 1};
    EXPECT_EQ(tp_replicas(k, shard), 2);
    EXPECT_EQ(local_shape(k, shard), (Shape{4, 16}));
    for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(local_to_logical(k, shard, i), (r / 2) * 64 + i);
  }
  EXPECT_EQ(tp_replicas(k, TpShard{1, 2, 1}), 1);
  EXPECT_EQ(local_to_logical(k, TpShard{1, 2, 1}, 0), 64);
  try {
    local_shape(k, TpShard{0, 3, 1});
    ADD_FAILURE() << "tp = 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither a divisor nor a multiple of its 2 blocks"), std::string::npos)
        << e.what();
  }
  // Grad norm: the k block counts 1/2 on each of its 2 ranks, q fully, a norm 1/4.
  const LlamaConfig c = tiny_config(2);
  std::vector<ParamSpec> specs;
  for (const char* n : {"model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
                        "model.layers.0.self_attn.k_proj.weight"})
    specs.push_back(test::spec_named(param_specs(c), n));
  FlatParams p(specs, DType::f64, Device::cpu(), TpShard{3, 4, 1});
  for (int64_t i = 0; i < p.numel(); ++i) p.grads().data<double>()[i] = 1.0;
  EXPECT_DOUBLE_EQ(optim::weighted_grad_squares(p, 4, 0, p.numel()), 16.0 / 4 + 4 * 16 + 4 * 16 / 2.0);
}

TEST(Llama, RopeMatchesTheRotateHalfFormula) {
  const int64_t B = 2, T = 5, HS = 6, W = 4 * HS;  // heads 0..2 rotated, head 3 copied
  const double theta = 50.0;
  Tensor x = test::random_tensor({B, T, W}, DType::f64, 11);
  Tensor y = Tensor::empty({B, T, W}, DType::f64);
  ops::rope_forward(y, x, 3, HS, theta);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < W; ++j) {
        const double* xr = x.data<double>() + (b * T + t) * W;
        const int64_t h = j / HS, i = j % HS, half = HS / 2, k = i % half;
        const double a = double(t) / std::pow(theta, 2.0 * double(k) / double(HS));
        double want = xr[j];
        if (h < 3) {
          // HF: q * cos + rotate_half(q) * sin, rotate_half(x) = [-x2 | x1]
          const double rot = i < half ? -xr[h * HS + i + half] : xr[h * HS + i - half];
          want = xr[j] * std::cos(a) + rot * std::sin(a);
        }
        EXPECT_NEAR(y.data<double>()[(b * T + t) * W + j], want, 1e-12) << b << " " << t << " " << j;
      }
  // Backward is the transpose: <R x, d> = <x, R^T d>; in place works.
  Tensor d = test::random_tensor({B, T, W}, DType::f64, 12);
  Tensor dx = d.clone();
  ops::rope_backward(dx, dx, 3, HS, theta);
  EXPECT_NEAR(dot(y, d), dot(x, dx), 1e-10);
  ops::rope_backward(y, y, 3, HS, theta);  // a rotation: its transpose undoes it
  EXPECT_TENSOR_NEAR(y, x, test::tolerance(DType::f64));
}

TEST(Llama, RepeatKvCopiesGroupsAndSumsThemBack) {
  const int64_t N = 3, NH = 4, KV = 2, HS = 2;
  Tensor x = test::random_tensor({N, (NH + 2 * KV) * HS}, DType::f64, 13);
  Tensor y = Tensor::empty({N, 3 * NH * HS}, DType::f64);
  ops::repeat_kv_forward(y, x, int(NH), int(KV));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t j = 0; j < HS; ++j) {
        const double* xr = x.data<double>() + n * (NH + 2 * KV) * HS;
        const double* yr = y.data<double>() + n * 3 * NH * HS;
        EXPECT_EQ(yr[h * HS + j], xr[h * HS + j]);
        EXPECT_EQ(yr[NH * HS + h * HS + j], xr[NH * HS + (h / 2) * HS + j]);
        EXPECT_EQ(yr[2 * NH * HS + h * HS + j], xr[(NH + KV) * HS + (h / 2) * HS + j]);
      }
  Tensor d = test::random_tensor(y.shape(), DType::f64, 14);
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  ops::repeat_kv_backward(dx, d, int(NH), int(KV));
  EXPECT_NEAR(dot(y, d), dot(x, dx), 1e-12);
}

TEST(Llama, WholeModelGradientMatchesFiniteDifferences) {
  // n_kv_head = 1 (multi-query), 2 (grouped), n_head (multi-head); tied once.
  const std::pair<int, bool> cases[] = {{1, false}, {2, true}, {4, false}};
  for (auto [kv, tie] : cases) {
    LlamaConfig cfg = tiny_config(kv);
    cfg.tie_embeddings = tie;
    const int64_t B = 2, T = 8;
    Tensor x = test::random_tokens(B, T, cfg.vocab_size, 1), y = test::random_tokens(B, T, cfg.vocab_size, 2);
    y.data<int32_t>()[3] = kIgnoreIndex;
    test::check_gradients(under_test(cfg), x, y, double(B * T - 1),
                          "kv=" + std::to_string(kv) + " tie=" + std::to_string(tie));
  }
}

TEST(Llama, Fp32MatchesFp64) { test::check_fp32_matches_fp64(under_test(tiny_config()), 2, 8); }
TEST(Llama, SixteenBitActivations) { test::check_16bit_activations(under_test(tiny_config()), 2, 8); }

TEST(Llama, ChunksChainedByHandMatchTheWholeModel) {
  LlamaConfig cfg = tiny_config();
  cfg.n_layer = 3;
  cfg.tie_embeddings = true;
  test::check_chunks_match_whole(under_test(cfg), {{0, 1, true, false}, {1, 2, false, false}, {2, 3, false, true}}, 2,
                                 8);
}

TEST(Llama, RecomputedBlocksGiveTheSameGradients) { test::check_recompute(under_test(tiny_config()), {0, 2}, 2, 8); }

// Selective recomputation (parallel.recompute_attention), dropout on.
TEST(Llama, RecomputedAttentionGivesTheSameBitsWithLessMemory) {
  LlamaConfig cfg = tiny_config();
  cfg.dropout = 0.1f;
  test::check_recompute_attention(under_test(cfg), 2, 8);
}

// The LM head and loss in chunks of rows (parallel.head_chunk_tokens).
TEST(Llama, HeadInChunksGivesTheSameGradientsWithLessMemory) {
  test::check_head_chunks(under_test(tiny_config()), 2, 8);
}

TEST(Llama, TinyModelOverfitsOneBatch) {
  LlamaConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.n_kv_head = 2;
  cfg.d_model = 64;
  cfg.d_ff = 172;
  cfg.vocab_size = 64;
  cfg.max_seq_len = 16;
  test::check_overfits_one_batch(under_test(cfg), 4, 16);
}
