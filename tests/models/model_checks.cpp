#include "models/model_checks.h"

#include <cmath>
#include <functional>
#include <optional>

#include "core/allocator.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "core/ops.h"
#include "core/rng.h"
#include "models/chunk_model.h"
#include "optim/optimizer.h"
#include "support/test_support.h"

namespace lattice::test {

Tensor random_tokens(int64_t B, int64_t T, int n_ids, uint64_t seed) {
  Tensor t = Tensor::empty({B, T}, DType::i32);
  RngKey k;
  k.seed = seed;
  k.purpose = RngPurpose::data;
  for (int64_t i = 0; i < B * T; ++i) t.data<int32_t>()[i] = int32_t(rng_uniform(k, 0, uint64_t(i)) * n_ids);
  return t;
}

namespace {

std::vector<ParamSpec> specs_of(const ModelUnderTest& m, const StageSpan& span) {
  const bool whole =
      span.embedding && span.head && span.first_layer == 0 && (span.end_layer < 0 || span.end_layer == m.n_layer);
  return whole ? m.specs : select_stage_params(m.specs, {span}, m.n_layer);
}

// Two microbatches in flight on one f64 model of `span` (forward A, forward
// B, backward A, backward B, as 1F1B's first stage and GPipe run them): their
// losses, the gradients, and what activation_bytes() predicted. Checks that a
// context holds the predicted bytes and that, after both forwards, the
// allocator holds two contexts and the workspace (plus `unpredicted` bytes the
// prediction leaves out). `after_forward` runs then, on the model, the first
// context and the parameters. `loss_weight`: the model's set_loss_weight.
constexpr float kInFlightDloss = 0.05f;  // the dloss backward gets
struct InFlightRun {
  double loss[2] = {};
  Tensor grads;
  ActivationBytes predicted;
};
InFlightRun run_two_in_flight(
    const ModelUnderTest& m, const StageSpan& span, const Tensor (&x)[2], const Tensor (&y)[2], int64_t unpredicted = 0,
    const std::function<void(LanguageModel&, ModelContext&, const FlatParams&)>& after_forward = {},
    std::optional<float> loss_weight = std::nullopt) {
  const int64_t B = x[0].dim(0), T = x[0].dim(1);
  const StepCoords coords[2] = {{3, 5, 0, true}, {3, 5, B, true}};
  WholeModel s(m, DType::f64, span);
  s.model->set_loss_weight(loss_weight);
  const int64_t before = memory_stats(Device::cpu()).live_bytes;
  std::unique_ptr<ModelContext> ctx[2] = {s.model->make_context(B, T), s.model->make_context(B, T)};
  InFlightRun r;
  r.predicted = s.model->activation_bytes(B, T);
  EXPECT_EQ(r.predicted.context, ctx[0]->bytes());
  for (int k = 0; k < 2; ++k) r.loss[k] = s.model->forward(*ctx[k], x[k], y[k], coords[k]);
  EXPECT_EQ(memory_stats(Device::cpu()).live_bytes - before,
            2 * r.predicted.context + r.predicted.workspace + unpredicted);
  if (after_forward) after_forward(*s.model, *ctx[0], s.params);
  for (int k = 0; k < 2; ++k) s.model->backward(*ctx[k], kInFlightDloss);
  r.grads = s.params.grads().clone();
  return r;
}

}  // namespace

const ParamSpec& spec_named(const std::vector<ParamSpec>& specs, const std::string& name) {
  for (const ParamSpec& s : specs)
    if (s.name == name) return s;
  ADD_FAILURE() << "no parameter " << name;
  throw std::runtime_error("no parameter " + name);
}

WholeModel::WholeModel(const ModelUnderTest& m, DType dtype, StageSpan span) : params(specs_of(m, span), dtype) {
  params.init(7);
  model = m.build(params, tp, span);
}

void check_gradients(const ModelUnderTest& m, const Tensor& x, const Tensor& y, double count,
                     const std::string& label) {
  WholeModel s(m, DType::f64);
  const StepCoords coords{123, 4, 10, true};  // dropout on
  auto ctx = s.model->make_context(x.dim(0), x.dim(1));
  auto loss = [&] { return s.model->forward(*ctx, x, y, coords) / count; };
  s.params.zero_grad();
  loss();
  s.model->backward(*ctx, float(1.0 / count));
  Tensor g = s.params.grads().clone();
  for (const ParamEntry& e : s.params.entries()) {
    Tensor v = s.params.value(e);
    const double err = gradcheck(loss, v, g.view(e.offset, e.local_shape), 1e-5, 24);
    EXPECT_LT(err, 1e-5) << e.spec.name << " " << label;
  }
}

void check_fp32_matches_fp64(const ModelUnderTest& m, int64_t B, int64_t T) {
  WholeModel s64(m, DType::f64), s32(m, DType::f32);
  Tensor x = random_tokens(B, T, m.n_ids, 3), y = random_tokens(B, T, m.n_ids, 4);
  const StepCoords coords{5, 1, 0, true};
  auto c64 = s64.model->make_context(B, T);
  auto c32 = s32.model->make_context(B, T);
  const double l64 = s64.model->forward(*c64, x, y, coords);
  const double l32 = s32.model->forward(*c32, x, y, coords);
  EXPECT_NEAR(l32, l64, 1e-4 * std::fabs(l64));
  s64.model->backward(*c64, 1.0f / float(B * T));
  s32.model->backward(*c32, 1.0f / float(B * T));
  EXPECT_TENSOR_NEAR(s32.params.grads(), s64.params.grads(), (Tolerance{1e-3, 1e-5}));
}

void check_chunks_match_whole(const ModelUnderTest& m, const std::vector<StageSpan>& spans, int64_t B, int64_t T) {
  WholeModel whole(m, DType::f64);
  Tensor x = random_tokens(B, T, m.n_ids, 11), y = random_tokens(B, T, m.n_ids, 12);
  const StepCoords coords{9, 2, 4, true};
  auto wctx = whole.model->make_context(B, T);
  const double want = whole.model->forward(*wctx, x, y, coords);
  whole.model->backward(*wctx, 0.1f);

  std::vector<std::unique_ptr<WholeModel>> chunks;
  std::vector<std::unique_ptr<ModelContext>> ctx;
  for (const StageSpan& s : spans) {
    chunks.push_back(std::make_unique<WholeModel>(m, DType::f64, s));
    ctx.push_back(chunks.back()->model->make_context(B, T));
  }
  // Forward: x -> a_0 -> ... -> loss; backward: the gradients back along the chain.
  const int64_t n = int64_t(spans.size());
  // act[i]: chunk i's output, dact[i] its gradient (sized up front: chunks keep their input until backward).
  std::vector<Tensor> act(size_t(n - 1)), dact(size_t(n - 1));
  double got = 0;
  for (int64_t i = 0; i < n; ++i) {
    Tensor* out = nullptr;
    if (i + 1 < n) {
      act[size_t(i)] = Tensor::empty({B, T, m.hidden}, DType::f64);
      out = &act[size_t(i)];
    }
    got = chunks[size_t(i)]->model->forward(*ctx[size_t(i)], i == 0 ? x : act[size_t(i - 1)], y, coords, out);
  }
  EXPECT_NEAR(got, want, 1e-12 * std::fabs(want));
  std::vector<int> ready;
  for (auto& c : chunks) c->model->on_grads_ready = [&](int layer) { ready.push_back(layer); };
  for (int64_t i = n - 1; i >= 0; --i) {
    Tensor* dinput = nullptr;
    if (i > 0) {
      dact[size_t(i - 1)] = Tensor::empty({B, T, m.hidden}, DType::f64);
      dinput = &dact[size_t(i - 1)];
    }
    chunks[size_t(i)]->model->backward(*ctx[size_t(i)], 0.1f, i + 1 < n ? &dact[size_t(i)] : nullptr, dinput);
    if (i > 0) {  // backward let go of the input: dropping ours frees it, though the context lives on (pooled)
      const int64_t live = memory_stats(Device::cpu()).live_bytes;
      act[size_t(i - 1)] = Tensor();
      EXPECT_EQ(live - memory_stats(Device::cpu()).live_bytes, B * T * m.hidden * int64_t(sizeof(double)))
          << "chunk " << i << " still holds its input after backward";
    }
  }
  for (const ParamEntry& e : whole.params.entries()) {
    Tensor sum = Tensor::zeros(e.local_shape, DType::f64);
    int holders = 0;
    for (auto& c : chunks)
      if (c->params.has(e.spec.name)) ops::add_inplace(sum, c->params.grad(e.spec.name)), ++holders;
    EXPECT_GE(holders, 1) << e.spec.name;
    EXPECT_TENSOR_NEAR(sum, whole.params.grad(e), tolerance(DType::f64)) << e.spec.name;
  }
  // Each layer reported once, as soon as its gradients are final: head, blocks from the last, embedding.
  std::vector<int> want_ready;
  for (int l = m.n_layer; l >= 0; --l) want_ready.push_back(l);
  want_ready.push_back(kEmbeddingLayer);
  EXPECT_EQ(ready, want_ready);
}

void check_recompute(const ModelUnderTest& m, const std::vector<int>& recompute, int64_t B, int64_t T) {
  Tensor x = random_tokens(B, T, m.n_ids, 21), y = random_tokens(B, T, m.n_ids, 22);
  const StepCoords coords{3, 5, 0, true};
  std::vector<Tensor> grads;
  std::vector<int64_t> bytes;
  std::vector<double> losses;
  for (int r : recompute) {
    WholeModel s(m, DType::f64, StageSpan{.recompute = r});
    auto ctx = s.model->make_context(B, T);
    bytes.push_back(ctx->bytes());
    EXPECT_EQ(s.model->activation_bytes(B, T).context, ctx->bytes()) << "recompute " << r;
    losses.push_back(s.model->forward(*ctx, x, y, coords));
    s.model->backward(*ctx, 0.05f);
    grads.push_back(s.params.grads().clone());
  }
  for (size_t i = 1; i < grads.size(); ++i) {
    EXPECT_EQ(losses[i], losses[0]);
    EXPECT_TENSOR_NEAR(grads[i], grads[0], tolerance(DType::f64));
    EXPECT_LT(bytes[i], bytes[i - 1]);
  }
}

void check_recompute_attention(const ModelUnderTest& m, int64_t B, int64_t T, int pad_id) {
  Tensor x[2] = {random_tokens(B, T, m.n_ids, 41), random_tokens(B, T, m.n_ids, 42)};
  const Tensor y[2] = {random_tokens(B, T, m.n_ids, 43), random_tokens(B, T, m.n_ids, 44)};
  if (pad_id >= 0) x[0].data<int32_t>()[T - 1] = pad_id, x[1].data<int32_t>()[B * T - 2] = pad_id;
  using Run = InFlightRun;
  // The allocator against the prediction: two contexts, and the workspace
  // (with the shared buffer, which no context counts as its own). Padded
  // inputs add BERT's key mask, (B, T) i32 per context, which the
  // prediction leaves out.
  const int64_t mask = pad_id >= 0 ? 2 * B * T * int64_t(sizeof(int32_t)) : 0;
  auto run = [&](StageSpan span) { return run_two_in_flight(m, span, x, y, mask); };
  // The shared buffer is for full (B, NH, T, T) states: on the CPU, runtime.cpu_attention: full.
  ops::set_cpu_attention_compact(false);
  int64_t one = 0;  // one layer's probabilities
  Run full;         // the full state, nothing recomputed
  for (int recompute : {0, 1}) {
    SCOPED_TRACE(testing::Message() << "recompute " << recompute);
    const Run keep = run(StageSpan{.recompute = recompute});
    const Run shared = run(StageSpan{.recompute = recompute, .recompute_attention = true});
    for (int k = 0; k < 2; ++k) EXPECT_EQ(shared.loss[k], keep.loss[k]) << "microbatch " << k;
    EXPECT_TRUE(same_bits(shared.grads, keep.grads));
    // The workspace gains the shared buffer, unless a recomputed block's
    // probabilities were there already: that block takes the shared one.
    if (recompute == 0) one = shared.predicted.workspace - keep.predicted.workspace;
    if (recompute > 0) {
      EXPECT_EQ(shared.predicted.workspace, keep.predicted.workspace);
    }
    EXPECT_GE(one, B * T * T * int64_t(sizeof(double)));
    EXPECT_EQ(keep.predicted.context - shared.predicted.context, (m.n_layer - recompute) * one);
    if (recompute == 0) full = keep;
  }
  // The CPU's compact state (the default): each block keeps its rows'
  // statistics, nothing is shared, so recompute_attention changes nothing;
  // the bits are the full state's, and each kept block holds less than its
  // probabilities by at least one layer's worth minus the statistics.
  ops::set_cpu_attention_compact(true);
  for (int recompute : {0, 1}) {
    SCOPED_TRACE(testing::Message() << "compact state, recompute " << recompute);
    const Run keep = run(StageSpan{.recompute = recompute});
    const Run shared = run(StageSpan{.recompute = recompute, .recompute_attention = true});
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(keep.loss[k], full.loss[k]) << "microbatch " << k;
      EXPECT_EQ(shared.loss[k], keep.loss[k]) << "microbatch " << k;
    }
    EXPECT_TRUE(same_bits(keep.grads, full.grads));
    EXPECT_TRUE(same_bits(shared.grads, keep.grads));
    EXPECT_EQ(shared.predicted.context, keep.predicted.context);
    EXPECT_EQ(shared.predicted.workspace, keep.predicted.workspace);
    // One layer's statistics are 2 / T of its probabilities (two f64 per row against T).
    if (recompute == 0) {
      EXPECT_EQ(full.predicted.context - keep.predicted.context, m.n_layer * (one - 2 * one / T));
    }
  }
}

void check_head_chunks(const ModelUnderTest& m, int64_t B, int64_t T) {
  const int64_t N = B * T;
  ASSERT_GT(N, 5);
  const Tensor x[2] = {random_tokens(B, T, m.n_ids, 51), random_tokens(B, T, m.n_ids, 52)};
  Tensor y[2] = {random_tokens(B, T, m.n_ids, 53), random_tokens(B, T, m.n_ids, 54)};
  for (int64_t i : {int64_t(1), int64_t(4), int64_t(5)})
    y[0].data<int32_t>()[i] = kIgnoreIndex;  // in and across chunks
  y[1].data<int32_t>()[N - 1] = kIgnoreIndex;
  using Run = InFlightRun;
  // `in_forward`: the loss weight is set, so forward computes the head's gradients.
  auto run = [&](int64_t chunk, bool in_forward) {
    auto after_forward = [&](LanguageModel& model, ModelContext& ctx, const FlatParams& params) {
      auto* chunked = dynamic_cast<ChunkModel*>(&model);
      ASSERT_TRUE(chunked != nullptr);
      if (chunk > 0) {
        EXPECT_THROW(chunked->logits(ctx), Error);
      }
      // Before any backward, gradients exist only where forward computed the head's.
      double sum = 0;
      const Tensor g = params.grads();
      for (int64_t i = 0; i < g.numel(); ++i) sum += std::abs(g.data<double>()[i]);
      EXPECT_EQ(sum > 0, chunk > 0 && in_forward) << sum;
      EXPECT_EQ(chunked->head_rows_recomputed(), 0);
    };
    return run_two_in_flight(m, StageSpan{.head_chunk = chunk}, x, y, 0, after_forward,
                             in_forward ? std::optional<float>(kInFlightDloss) : std::nullopt);
  };
  const Run whole = run(0, false);
  const Run whole_weighted = run(0, true);  // the whole head ignores the weight
  EXPECT_TRUE(same_bits(whole_weighted.grads, whole.grads));
  for (int64_t chunk : {int64_t(5), N, 4 * N})
    for (bool in_forward : {false, true}) {
      SCOPED_TRACE(testing::Message() << "head_chunk " << chunk << (in_forward ? ", gradients in forward" : ""));
      const Run r = run(chunk, in_forward);
      for (int k = 0; k < 2; ++k) EXPECT_NEAR(r.loss[k], whole.loss[k], 1e-12 * std::abs(whole.loss[k])) << k;
      EXPECT_TENSOR_NEAR(r.grads, whole.grads, tolerance(DType::f64));
      // The context trades N rows of logits (V_l columns) for the head input's
      // gradient (C columns); the workspace gains one chunk's logits.
      const int64_t row = (whole.predicted.context - r.predicted.context) / N + m.hidden * int64_t(sizeof(double));
      EXPECT_GT(row, m.hidden * int64_t(sizeof(double)));
      EXPECT_EQ(whole.predicted.context - r.predicted.context, N * (row - m.hidden * int64_t(sizeof(double))));
      EXPECT_EQ(r.predicted.workspace - whole.predicted.workspace, std::min(chunk, N) * row);
    }
  // Backward computes the logits again only when forward did not do its work.
  for (bool in_forward : {false, true}) {
    WholeModel s(m, DType::f64, StageSpan{.head_chunk = 5});
    if (in_forward) s.model->set_loss_weight(kInFlightDloss);
    auto ctx = s.model->make_context(B, T);
    s.model->forward(*ctx, x[0], y[0], {3, 5, 0, true});
    s.model->backward(*ctx, kInFlightDloss);
    EXPECT_EQ(dynamic_cast<ChunkModel&>(*s.model).head_rows_recomputed(), in_forward ? 0 : N);
  }
  // Backward must take the dloss forward computed the gradients with.
  WholeModel s(m, DType::f64, StageSpan{.head_chunk = 5});
  s.model->set_loss_weight(kInFlightDloss);
  auto ctx = s.model->make_context(B, T);
  s.model->forward(*ctx, x[0], y[0], {3, 5, 0, true});
  EXPECT_THROW(s.model->backward(*ctx, 2 * kInFlightDloss), Error);
}

void check_16bit_activations(const ModelUnderTest& m, int64_t B, int64_t T) {
  std::vector<DType> types = {DType::f16};
  if (cpu::bf16_matmul_available()) types.insert(types.begin(), DType::bf16);
  Tensor x = random_tokens(B, T, m.n_ids, 31), y = random_tokens(B, T, m.n_ids, 32);
  const StepCoords coords{4, 3, 2, true};  // dropout on
  const DType before = cpu::matmul_dtype();
  for (DType t : types) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    cpu::set_matmul_dtype(t);
    const double u = std::ldexp(1.0, t == DType::bf16 ? -9 : -11);  // unit roundoff
    WholeModel half(m, DType::f32), full(m, DType::f32);
    half.model->set_activation_dtype(t);
    EXPECT_EQ(half.model->activation_dtype(), t);
    auto ch = half.model->make_context(B, T), cf = full.model->make_context(B, T);
    EXPECT_EQ(half.model->activation_bytes(B, T).context, ch->bytes());
    EXPECT_LE(double(ch->bytes()), 0.6 * double(cf->bytes()));
    const double lh = half.model->forward(*ch, x, y, coords), lf = full.model->forward(*cf, x, y, coords);
    EXPECT_NEAR(lh, lf, 5 * u * std::fabs(lf));
    half.model->backward(*ch, 1.0f / float(B * T));
    full.model->backward(*cf, 1.0f / float(B * T));
    for (const ParamEntry& e : full.params.entries()) {
      const Tensor gh = half.params.grad(e), gf = full.params.grad(e);
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < gf.numel(); ++i) {
        const double a = gh.data<float>()[i], b = gf.data<float>()[i];
        diff += (a - b) * (a - b), norm += b * b;
      }
      if (norm > 0) {
        EXPECT_LT(std::sqrt(diff / norm), 40 * u) << e.spec.name;
      }
    }
  }
  cpu::set_matmul_dtype(before);
}

void check_overfits_one_batch(const ModelUnderTest& m, int64_t B, int64_t T, int max_steps) {
  WholeModel s(m, DType::f32);
  Tensor x = random_tokens(B, T, m.n_ids, 8), y = random_tokens(B, T, m.n_ids, 9);
  auto opt = optim::make_optimizer({.name = "adamw", .weight_decay = 0.0}, s.params);
  auto ctx = s.model->make_context(B, T);
  double first = 0, loss = 0;
  for (int step = 1; step <= max_steps; ++step) {
    s.params.zero_grad();
    loss = s.model->forward(*ctx, x, y, {1, step, 0, true}) / double(B * T);
    if (step == 1) first = loss;
    s.model->backward(*ctx, 1.0f / float(B * T));
    opt->step(s.params, 3e-3, step, 1.0f);
    if (loss < 0.05) break;
  }
  EXPECT_GT(first, 0.8 * std::log(double(m.n_ids)));  // about ln(n_ids) at the start
  EXPECT_LT(loss, 0.05);
}

}  // namespace lattice::test
