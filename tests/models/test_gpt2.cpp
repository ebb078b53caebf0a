// GPT-2: whole-model finite-difference gradient check in f64, f32 against f64,
// and a tiny model overfitting one batch.
#include "models/gpt2/gpt2.h"

#include <gtest/gtest.h>

#include <cmath>

#include "comm/self_communicator.h"
#include "core/ops.h"
#include "optim/optimizer.h"
#include "support/test_support.h"

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

Tensor tokens(int64_t B, int64_t T, int vocab, uint64_t seed) {
  Tensor t = Tensor::empty({B, T}, DType::i32);
  RngKey k;
  k.seed = seed;
  k.purpose = RngPurpose::data;
  for (int64_t i = 0; i < B * T; ++i) t.data<int32_t>()[i] = int32_t(rng_uniform(k, 0, uint64_t(i)) * vocab);
  return t;
}

struct Fixture {
  Gpt2Config cfg;
  comm::Group tp = comm::self_group("tp");
  FlatParams params;
  std::unique_ptr<Gpt2> model;
  Fixture(const Gpt2Config& c, DType dt, int64_t vocab_multiple = 1)
      : cfg(c), params(param_specs(c), dt, Device::cpu(), TpShard{.vocab_multiple = vocab_multiple}) {
    params.init(7);
    model = std::make_unique<Gpt2>(cfg, params, tp);
  }
};

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
  c.tie_embeddings = false;
  EXPECT_EQ(param_specs(c).back().name, "lm_head.weight");
}

TEST(Gpt2, WholeModelGradientMatchesFiniteDifferences) {
  for (bool tie : {true, false}) {
    Gpt2Config cfg = tiny_config();
    cfg.tie_embeddings = tie;
    Fixture s(cfg, DType::f64);
    const int64_t B = 2, T = 8;
    Tensor x = tokens(B, T, cfg.vocab_size, 1), y = tokens(B, T, cfg.vocab_size, 2);
    y.data<int32_t>()[3] = kIgnoreIndex;  // one ignored target
    const double count = double(B * T - 1);
    StepCoords coords{123, 4, 10, true};
    auto ctx = s.model->make_context(B, T);
    auto loss = [&] { return s.model->forward(*ctx, x, y, coords) / count; };
    s.params.zero_grad();
    loss();
    s.model->backward(*ctx, float(1.0 / count));
    Tensor g = s.params.grads().clone();
    for (const ParamEntry& e : s.params.entries()) {
      Tensor v = s.params.value(e);
      double err = test::gradcheck(loss, v, g.view(e.offset, e.local_shape), 1e-5, 24);
      EXPECT_LT(err, 1e-5) << e.spec.name << " tie=" << tie;
    }
  }
}

TEST(Gpt2, Fp32MatchesFp64) {
  Gpt2Config cfg = tiny_config();
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

TEST(Gpt2, DropoutChangesTrainingButNotEvaluation) {
  Gpt2Config cfg = tiny_config();
  cfg.dropout = 0.3f;
  Fixture s(cfg, DType::f32);
  Tensor x = tokens(2, 8, cfg.vocab_size, 5), y = tokens(2, 8, cfg.vocab_size, 6);
  auto ctx = s.model->make_context(2, 8);
  double train_a = s.model->forward(*ctx, x, y, {1, 1, 0, true});
  double train_b = s.model->forward(*ctx, x, y, {1, 2, 0, true});
  double train_a2 = s.model->forward(*ctx, x, y, {1, 1, 0, true});
  double eval_a = s.model->forward(*ctx, x, y, {1, 1, 0, false});
  double eval_b = s.model->forward(*ctx, x, y, {1, 2, 0, false});
  EXPECT_NE(train_a, train_b);  // different step, different masks
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
  Fixture s(cfg, DType::f32);
  const int64_t B = 4, T = 16;
  Tensor x = tokens(B, T, cfg.vocab_size, 8), y = tokens(B, T, cfg.vocab_size, 9);
  auto opt = optim::make_optimizer({.name = "adamw", .weight_decay = 0.0}, s.params);
  auto ctx = s.model->make_context(B, T);
  double first = 0, loss = 0;
  for (int step = 1; step <= 300; ++step) {
    s.params.zero_grad();
    loss = s.model->forward(*ctx, x, y, {1, step, 0, true}) / double(B * T);
    if (step == 1) first = loss;
    s.model->backward(*ctx, 1.0f / float(B * T));
    opt->step(s.params, 3e-3, step, 1.0f);
    if (loss < 0.05) break;
  }
  EXPECT_GT(first, 3.5);  // about ln(64) at the start
  EXPECT_LT(loss, 0.05);
}

// The model cut into pipeline chunks, each with its own parameters as on its
// own rank, chained by hand: the same loss and gradients as the whole model;
// the tied embedding's two replicas' gradients sum to the whole model's.
TEST(Gpt2, ChunksChainedByHandMatchTheWholeModel) {
  Gpt2Config cfg = tiny_config();
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
  std::vector<std::unique_ptr<Gpt2>> chunks;
  comm::Group tp = comm::self_group("tp");
  for (const StageSpan& s : spans) {
    params.push_back(std::make_unique<FlatParams>(select_stage_params(param_specs(cfg), {s}, cfg.n_layer), DType::f64));
    params.back()->init(7);
    chunks.push_back(std::make_unique<Gpt2>(cfg, *params.back(), tp, s));
  }
  EXPECT_TRUE(params[2]->entry("wte.weight").spec.tie_replica);
  EXPECT_FALSE(params[0]->entry("wte.weight").spec.tie_replica);
  EXPECT_FALSE(params[1]->has("wte.weight"));

  std::vector<std::unique_ptr<ModelContext>> ctx;
  for (auto& c : chunks) ctx.push_back(c->make_context(B, T));
  Tensor a0 = Tensor::empty({B, T, C}, DType::f64), a1 = Tensor::empty({B, T, C}, DType::f64);
  chunks[0]->forward(*ctx[0], x, y, coords, &a0);
  chunks[1]->forward(*ctx[1], a0, y, coords, &a1);
  double got = chunks[2]->forward(*ctx[2], a1, y, coords);
  EXPECT_NEAR(got, want, 1e-12 * std::fabs(want));
  Tensor d1 = Tensor::empty({B, T, C}, DType::f64), d0 = Tensor::empty({B, T, C}, DType::f64);
  chunks[2]->backward(*ctx[2], 0.1f, nullptr, &d1);
  chunks[1]->backward(*ctx[1], 0.1f, &d1, &d0);
  chunks[0]->backward(*ctx[0], 0.1f, &d0, nullptr);

  for (const ParamEntry& e : whole.params.entries()) {
    Tensor sum = Tensor::zeros(e.local_shape, DType::f64);
    for (auto& p : params)
      if (p->has(e.spec.name)) ops::add_inplace(sum, p->grad(e.spec.name));
    EXPECT_TENSOR_NEAR(sum, whole.params.grad(e), test::tolerance(DType::f64)) << e.spec.name;
  }
}

// Activation recomputation: the same loss and gradients, a smaller context.
TEST(Gpt2, RecomputedBlocksGiveTheSameGradientsWithLessMemory) {
  Gpt2Config cfg = tiny_config();
  cfg.n_layer = 3;
  const int64_t B = 2, T = 8;
  Tensor x = tokens(B, T, cfg.vocab_size, 21), y = tokens(B, T, cfg.vocab_size, 22);
  StepCoords coords{3, 5, 0, true};
  comm::Group tp = comm::self_group("tp");
  std::vector<Tensor> grads;
  std::vector<int64_t> bytes;
  std::vector<double> losses;
  for (int recompute : {0, 2, 3}) {
    FlatParams p(param_specs(cfg), DType::f64);
    p.init(7);
    Gpt2 model(cfg, p, tp, StageSpan{.recompute = recompute});
    auto ctx = model.make_context(B, T);
    bytes.push_back(ctx->bytes());
    losses.push_back(model.forward(*ctx, x, y, coords));
    model.backward(*ctx, 0.05f);
    grads.push_back(p.grads().clone());
  }
  for (size_t i = 1; i < grads.size(); ++i) {
    EXPECT_EQ(losses[i], losses[0]);
    EXPECT_TENSOR_NEAR(grads[i], grads[0], test::tolerance(DType::f64));
    EXPECT_LT(bytes[i], bytes[i - 1]);
  }
}
