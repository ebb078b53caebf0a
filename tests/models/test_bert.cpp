// BERT: parameter table and policy, whole-model finite-difference gradient
// check in f64, f32 against f64, the key padding mask, pipeline chunks and
// recomputation, masked-LM masking statistics and layout independence, and a
// short masked-LM run on tiny shakespeare whose loss falls.
#include "models/bert/bert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "comm/self_communicator.h"
#include "core/ops.h"
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
  c.max_seq_len = 12;
  c.dropout = 0.1f;
  c.norm_eps = 1e-5f;
  c.init_std = 0.2f;  // larger than BERT's 0.02 so every path carries signal
  return c;
}

// Ordinary tokens (below the four special ids).
Tensor tokens(int64_t B, int64_t T, int vocab, uint64_t seed) {
  Tensor t = Tensor::empty({B, T}, DType::i32);
  RngKey k;
  k.seed = seed;
  k.purpose = RngPurpose::data;
  for (int64_t i = 0; i < B * T; ++i) t.data<int32_t>()[i] = int32_t(rng_uniform(k, 0, uint64_t(i)) * (vocab - 4));
  return t;
}

struct Fixture {
  BertConfig cfg;
  comm::Group tp = comm::self_group("tp");
  FlatParams params;
  std::unique_ptr<Bert> model;
  Fixture(const BertConfig& c, DType dt, StageSpan span = {})
      : cfg(c), params(param_specs(c), dt, Device::cpu(), TpShard{}) {
    params.init(7);
    model = std::make_unique<Bert>(cfg, params, tp, span);
  }
};

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
    Fixture s(cfg, DType::f64);
    const int64_t B = 2, T = 8;
    Tensor x = tokens(B, T, cfg.vocab_size, 1), y = tokens(B, T, cfg.vocab_size, 2);
    const SpecialIds ids = special_ids(cfg.vocab_size);
    x.data<int32_t>()[T - 1] = ids.pad;  // a padded key in row 0
    x.data<int32_t>()[T] = ids.cls;
    x.data<int32_t>()[T + 3] = ids.mask;
    y.data<int32_t>()[3] = kIgnoreIndex;
    y.data<int32_t>()[T - 1] = kIgnoreIndex;
    const double count = double(B * T - 2);
    StepCoords coords{123, 4, 10, true};
    auto ctx = s.model->make_context(B, T);
    auto loss = [&] { return s.model->forward(*ctx, x, y, coords) / count; };
    s.params.zero_grad();
    loss();
    s.model->backward(*ctx, float(1.0 / count));
    Tensor g = s.params.grads().clone();
    // The key bias cannot change any softmax row: its gradient is exactly zero.
    Tensor dkey_bias = s.params.grad("bert.encoder.layer.1.attention.self.key.bias");
    EXPECT_EQ(ops::sum_squares(dkey_bias), 0.0);
    EXPECT_GT(ops::sum_squares(s.params.grad("bert.encoder.layer.1.attention.self.query.bias")), 0.0);
    for (const ParamEntry& e : s.params.entries()) {
      Tensor v = s.params.value(e);
      double err = test::gradcheck(loss, v, g.view(e.offset, e.local_shape), 1e-5, 24);
      EXPECT_LT(err, 1e-5) << e.spec.name << " tie=" << tie;
    }
  }
}

TEST(Bert, Fp32MatchesFp64) {
  BertConfig cfg = tiny_config();
  Fixture s64(cfg, DType::f64), s32(cfg, DType::f32);
  const int64_t B = 2, T = 8;
  Tensor x = tokens(B, T, cfg.vocab_size, 3), y = tokens(B, T, cfg.vocab_size, 4);
  StepCoords coords{5, 1, 0, true};
  auto c64 = s64.model->make_context(B, T);
  auto c32 = s32.model->make_context(B, T);
  double l64 = s64.model->forward(*c64, x, y, coords);
  double l32 = s32.model->forward(*c32, x, y, coords);
  EXPECT_NEAR(l32, l64, 1e-4 * std::fabs(l64));
  s64.model->backward(*c64, 1.0f / float(B * T));
  s32.model->backward(*c32, 1.0f / float(B * T));
  EXPECT_TENSOR_NEAR(s32.params.grads(), s64.params.grads(), (test::Tolerance{1e-3, 1e-5}));
}

// Padding at the end changes nothing at the real positions: the same per-token
// losses as the unpadded sequence (the key mask hides [PAD] from every query).
TEST(Bert, PaddedKeysAreInvisible) {
  BertConfig cfg = tiny_config();
  cfg.dropout = 0.0f;
  Fixture s(cfg, DType::f64);
  const int64_t T = 10, real = 7;
  const SpecialIds ids = special_ids(cfg.vocab_size);
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
  Fixture whole(cfg, DType::f64);
  const int64_t B = 2, T = 8, C = cfg.d_model;
  Tensor x = tokens(B, T, cfg.vocab_size, 11), y = tokens(B, T, cfg.vocab_size, 12);
  StepCoords coords{9, 2, 4, true};
  auto wctx = whole.model->make_context(B, T);
  double want = whole.model->forward(*wctx, x, y, coords);
  whole.model->backward(*wctx, 0.1f);

  const std::vector<StageSpan> spans = {{0, 1, true, false}, {1, 2, false, false}, {2, 3, false, true}};
  std::vector<std::unique_ptr<FlatParams>> params;
  std::vector<std::unique_ptr<Bert>> chunks;
  comm::Group tp = comm::self_group("tp");
  for (const StageSpan& s : spans) {
    params.push_back(std::make_unique<FlatParams>(select_stage_params(param_specs(cfg), {s}, cfg.n_layer), DType::f64));
    params.back()->init(7);
    chunks.push_back(std::make_unique<Bert>(cfg, *params.back(), tp, s));
  }
  const std::string word = "bert.embeddings.word_embeddings.weight";
  EXPECT_TRUE(params[2]->entry(word).spec.tie_replica);
  EXPECT_FALSE(params[0]->entry(word).spec.tie_replica);
  EXPECT_FALSE(params[1]->has(word));

  std::vector<std::unique_ptr<ModelContext>> ctx;
  for (auto& c : chunks) ctx.push_back(c->make_context(B, T));
  Tensor a0 = Tensor::empty({B, T, C}, DType::f64), a1 = Tensor::empty({B, T, C}, DType::f64);
  chunks[0]->forward(*ctx[0], x, y, coords, &a0);
  chunks[1]->forward(*ctx[1], a0, y, coords, &a1);
  double got = chunks[2]->forward(*ctx[2], a1, y, coords);
  EXPECT_NEAR(got, want, 1e-12 * std::fabs(want));
  Tensor d1 = Tensor::empty({B, T, C}, DType::f64), d0 = Tensor::empty({B, T, C}, DType::f64);
  std::vector<int> ready;
  for (auto& c : chunks) c->on_grads_ready = [&](int l) { ready.push_back(l); };
  chunks[2]->backward(*ctx[2], 0.1f, nullptr, &d1);
  chunks[1]->backward(*ctx[1], 0.1f, &d1, &d0);
  chunks[0]->backward(*ctx[0], 0.1f, &d0, nullptr);
  EXPECT_EQ(ready, (std::vector<int>{3, 2, 1, 0, kEmbeddingLayer}));

  for (const ParamEntry& e : whole.params.entries()) {
    Tensor sum = Tensor::zeros(e.local_shape, DType::f64);
    for (auto& p : params)
      if (p->has(e.spec.name)) ops::add_inplace(sum, p->grad(e.spec.name));
    EXPECT_TENSOR_NEAR(sum, whole.params.grad(e), test::tolerance(DType::f64)) << e.spec.name;
  }
  // A split model refuses padded inputs (later chunks cannot see the mask).
  x.data<int32_t>()[2] = special_ids(cfg.vocab_size).pad;
  EXPECT_THROW(chunks[0]->forward(*ctx[0], x, y, coords, &a0), Error);
}

TEST(Bert, RecomputedBlocksGiveTheSameGradientsWithLessMemory) {
  BertConfig cfg = tiny_config();
  cfg.n_layer = 3;
  const int64_t B = 2, T = 8;
  Tensor x = tokens(B, T, cfg.vocab_size, 21), y = tokens(B, T, cfg.vocab_size, 22);
  StepCoords coords{3, 5, 0, true};
  std::vector<Tensor> grads;
  std::vector<int64_t> bytes;
  std::vector<double> losses;
  for (int recompute : {0, 2, 3}) {
    Fixture s(cfg, DType::f64, StageSpan{.recompute = recompute});
    auto ctx = s.model->make_context(B, T);
    bytes.push_back(ctx->bytes());
    EXPECT_EQ(ctx->bytes(), s.model->activation_bytes(B, T).context);
    losses.push_back(s.model->forward(*ctx, x, y, coords));
    s.model->backward(*ctx, 0.05f);
    grads.push_back(s.params.grads().clone());
  }
  for (size_t i = 1; i < grads.size(); ++i) {
    EXPECT_EQ(losses[i], losses[0]);
    EXPECT_TENSOR_NEAR(grads[i], grads[0], test::tolerance(DType::f64));
    EXPECT_LT(bytes[i], bytes[i - 1]);
  }
}

TEST(Bert, RegistryBuildsItAndRejectsWhatItCannotTake) {
  ModelConfig m;
  m.arch = ModelArch::bert;
  m.n_layer = 2, m.n_head = 2, m.d_model = 16, m.d_ff = 64, m.vocab_size = 261, m.max_seq_len = 16;
  EXPECT_EQ(model_param_specs(m).front().name, "bert.embeddings.word_embeddings.weight");
  EXPECT_TRUE(model_entry(ModelArch::bert).prepare_batch != nullptr);
  const auto archs = registered_archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), "bert"), archs.end());
  m.n_head = 3;
  EXPECT_THROW(model_activation_bytes(m, {}, TpShard{}, DType::f32, 2, 8), Error);
}
