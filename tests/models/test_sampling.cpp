// Text generation (models/sampling.h): the draw of one token against the
// distribution it must follow, and generate() (the model as two chunks, the
// head over the last positions only; the window over the last max_seq_len
// tokens; the row and RNG coordinates of each sample) against loops written
// out here with fresh forwards of the whole model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "comm/self_communicator.h"
#include "config/config.h"
#include "core/ops.h"
#include "models/chunk_model.h"
#include "models/registry.h"
#include "models/sampling.h"
#include "support/error_text.h"
#include "support/test_support.h"

namespace lattice {
namespace {

using test::error_text;

SamplingOptions opts(double temperature, int top_k = 0, uint64_t seed = 1) {
  return {.temperature = temperature, .top_k = top_k, .seed = seed};
}

// How often each id is drawn over `n` positions.
std::vector<double> frequencies(const std::vector<float>& logits, const SamplingOptions& o, int n) {
  std::vector<double> f(logits.size(), 0.0);
  for (int pos = 0; pos < n; ++pos) f[size_t(sample_token(logits, o, 0, uint64_t(pos)))] += 1.0 / n;
  return f;
}

TEST(Sampling, GreedyTakesTheFirstLargestLogit) {
  EXPECT_EQ(sample_token(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}, opts(0.0), 0, 0), 1);
  EXPECT_EQ(sample_token(std::vector<float>{-INFINITY, -3.0f}, opts(0.0), 0, 0), 1);
  // top_k = 1 at any temperature is greedy.
  const std::vector<float> l{0.1f, 0.3f, 0.2f, 0.25f};
  for (int pos = 0; pos < 50; ++pos) EXPECT_EQ(sample_token(l, opts(2.0, 1), 3, uint64_t(pos)), 1);
}

// Draws follow softmax(logits / temperature): 40000 positions, each frequency
// within 0.01 of its probability (about 4 standard deviations).
TEST(Sampling, DrawsFollowTheSoftmaxAtTheTemperature) {
  const std::vector<float> l{0.0f, float(std::log(2.0)), float(std::log(3.0)), -INFINITY};
  std::vector<double> f = frequencies(l, opts(1.0), 40000);
  const double p1[] = {1.0 / 6, 2.0 / 6, 3.0 / 6, 0.0};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f[i], p1[i], 0.01) << "id " << i;
  EXPECT_EQ(f[3], 0.0);
  // Temperature 0.5 squares the odds: 1 : 4 : 9.
  f = frequencies(l, opts(0.5), 40000);
  const double p05[] = {1.0 / 14, 4.0 / 14, 9.0 / 14, 0.0};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f[i], p05[i], 0.01) << "id " << i;
  // top_k 2 renormalises over the two largest: 2 : 3.
  f = frequencies(l, opts(1.0, 2), 40000);
  const double pk[] = {0.0, 2.0 / 5, 3.0 / 5, 0.0};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(f[i], pk[i], 0.01) << "id " << i;
  EXPECT_EQ(f[0], 0.0);
  // Ties with the k-th largest are kept: top_k 1 over {1, 3, 3, 0} draws both 3s.
  f = frequencies({1.0f, 3.0f, 3.0f, 0.0f}, opts(1.0, 1), 4000);
  EXPECT_NEAR(f[1], 0.5, 0.05);
  EXPECT_NEAR(f[1] + f[2], 1.0, 1e-12);
}

TEST(Sampling, TheSeedSampleAndPositionKeyTheDraw) {
  const std::vector<float> l(50, 0.0f);  // uniform over 50 ids
  std::vector<int32_t> a, b, c, d;
  for (int pos = 0; pos < 64; ++pos) {
    a.push_back(sample_token(l, opts(1.0, 0, 11), 0, uint64_t(pos)));
    b.push_back(sample_token(l, opts(1.0, 0, 11), 0, uint64_t(pos)));
    c.push_back(sample_token(l, opts(1.0, 0, 12), 0, uint64_t(pos)));
    d.push_back(sample_token(l, opts(1.0, 0, 11), 1, uint64_t(pos)));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
}

TEST(Sampling, NonFiniteLogitsAndBadOptionsAreOneLine) {
  EXPECT_HAS(error_text([] { sample_token(std::vector<float>{0.0f, NAN}, opts(1.0), 0, 7); }), "NaN");
  EXPECT_HAS(error_text([] { sample_token(std::vector<float>{0.0f, INFINITY}, opts(0.0), 0, 7); }), "diverged");
  // A NaN outside the kept top_k is an error too: the model is broken either way.
  EXPECT_HAS(error_text([] { sample_token(std::vector<float>{5.0f, 0.0f, NAN}, opts(1.0, 1), 0, 7); }), "NaN");
  EXPECT_HAS(error_text([] { sample_token(std::vector<float>{0.0f}, opts(-1.0), 0, 0); }), "temperature");
  EXPECT_HAS(error_text([] { sample_token(std::vector<float>{}, opts(1.0), 0, 0); }), "no ids");
}

struct Built {
  Config cfg;
  comm::Group tp = comm::self_group("tp");
  FlatParams params;
  std::unique_ptr<LanguageModel> model;
  explicit Built(const std::string& model_yaml) {
    cfg = parse_config(model_yaml +
                           "train: { steps: 1, global_batch: 2, micro_batch: 2, seq_len: 8 }\n"
                           "optimizer: { lr: 1.0e-3 }\n"
                           "data: { train: 'x_*.bin', tokenizer: bytes }\n",
                       "sampling.yaml");
    params = FlatParams(model_param_specs(cfg.model), DType::f32, Device::cpu(),
                        TpShard{.vocab_multiple = cfg.model.vocab_multiple});
    params.init(3);
    model = build_model(cfg.model, params, tp);
  }
};

// The whole model's logits at the last position of `seq`'s last `window`
// ids: a fresh context and forward of one sample.
std::vector<float> last_logits(LanguageModel& model, const std::vector<int32_t>& seq, int64_t window) {
  const int64_t T = std::min<int64_t>(window, int64_t(seq.size()));
  Tensor ids = Tensor::zeros({1, T}, DType::i32), targets = Tensor::zeros({1, T}, DType::i32);
  std::copy(seq.end() - T, seq.end(), ids.data<int32_t>());
  auto ctx = model.make_context(1, T);
  model.forward(*ctx, ids, targets, {.seed = 5, .step = 1, .train = false});
  const Tensor logits = dynamic_cast<ChunkModel&>(model).logits(*ctx);
  const float* row = logits.data<float>() + (T - 1) * logits.dim(2);
  return {row, row + logits.dim(2)};
}

// The greedy continuation written out: the argmax of the first `vocab`
// logits, token by token.
std::vector<int32_t> greedy_by_hand(LanguageModel& model, std::vector<int32_t> seq, int64_t tokens, int64_t window,
                                    int64_t vocab) {
  for (int64_t k = 0; k < tokens; ++k) {
    const std::vector<float> row = last_logits(model, seq, window);
    seq.push_back(int32_t(std::max_element(row.begin(), row.begin() + vocab) - row.begin()));
  }
  return seq;
}

// Sample `b` of a sampled batch written out: the draw of sample_token for
// (b, position) from that sample's own sequence.
std::vector<int32_t> sampled_by_hand(LanguageModel& model, std::vector<int32_t> seq, int64_t tokens, int64_t window,
                                     int64_t vocab, const SamplingOptions& o, uint64_t b) {
  for (int64_t k = 0; k < tokens; ++k) {
    const std::vector<float> row = last_logits(model, seq, window);
    seq.push_back(sample_token({row.data(), size_t(vocab)}, o, b, seq.size()));
  }
  return seq;
}

// With the key/value cache (`kv_cache`) or without: against loops of fresh
// whole-model forwards (bitwise without the cache; with it, the logits agree
// up to rounding, which these draws do not straddle).
void check_generate(const std::string& model_yaml, bool kv_cache) {
  SCOPED_TRACE(kv_cache ? "with the key/value cache" : "without the key/value cache");
  Built b(model_yaml);
  const int64_t window = b.cfg.model.max_seq_len, vocab = 257;
  const std::vector<int32_t> prompt{72, 101, 108};
  GenerateOptions o{.tokens = 20, .samples = 3, .vocab = vocab, .sampling = opts(0.0), .kv_cache = kv_cache};
  int64_t calls = 0;
  const auto greedy = generate(b.cfg.model, b.params, prompt, o, [&](int64_t step, const auto& seqs) {
    EXPECT_EQ(step, ++calls);
    for (const auto& s : seqs) EXPECT_EQ(s.size(), prompt.size() + size_t(step));
  });
  EXPECT_EQ(calls, 20);
  const std::vector<int32_t> want = greedy_by_hand(*b.model, prompt, 20, window, vocab);
  ASSERT_EQ(greedy.size(), 3u);
  for (const auto& s : greedy) EXPECT_EQ(s, want);  // every sample of the batch, past the window (8 + 3 < 23)

  // Sampling: the same options give the same tokens; each sample its own.
  o.sampling = opts(1.0, 0, 9);
  const auto s1 = generate(b.cfg.model, b.params, prompt, o), s2 = generate(b.cfg.model, b.params, prompt, o);
  EXPECT_EQ(s1, s2);
  EXPECT_NE(s1[0], s1[1]);
  for (const auto& s : s1) {
    ASSERT_EQ(s.size(), 23u);
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), s.begin()));
    for (int32_t id : s) EXPECT_TRUE(id >= 0 && id < vocab) << id;
  }
  // Each sample's row and RNG coordinates: samples 1 and 2 written out.
  for (uint64_t i : {1, 2})
    EXPECT_EQ(s1[i], sampled_by_hand(*b.model, prompt, 20, window, vocab, o.sampling, i)) << "sample " << i;
  // A batch of one draws what sample 0 of the batch drew.
  o.samples = 1;
  EXPECT_EQ(generate(b.cfg.model, b.params, prompt, o)[0], s1[0]);
  // A prompt longer than the window; a cache smaller than it (prompt + tokens < max_seq_len).
  GenerateOptions g{.tokens = 3, .samples = 2, .vocab = vocab, .sampling = opts(0.0), .kv_cache = kv_cache};
  const std::vector<int32_t> long_prompt{5, 80, 33, 61, 200, 7, 150, 99, 31, 64};
  for (const auto& s : generate(b.cfg.model, b.params, long_prompt, g))
    EXPECT_EQ(s, greedy_by_hand(*b.model, long_prompt, 3, window, vocab));
  g.tokens = 2;
  for (const auto& s : generate(b.cfg.model, b.params, prompt, g))
    EXPECT_EQ(s, greedy_by_hand(*b.model, prompt, 2, window, vocab));
  EXPECT_HAS(error_text([&] { generate(b.cfg.model, b.params, std::vector<int32_t>{}, o); }), "no tokens");
  o.vocab = 100000;
  EXPECT_HAS(error_text([&] { generate(b.cfg.model, b.params, prompt, o); }), "exceeds the model's");
}

const std::string kGpt2 =
    "model: { arch: gpt2, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 260, max_seq_len: 8 }\n";
const std::string kNeox =
    "model: { arch: neox, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 260, max_seq_len: 8 }\n";
const std::string kLlama =
    "model: { arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 16, d_ff: 32, vocab_size: 260, "
    "max_seq_len: 8 }\n";
const std::string kBert =
    "model: { arch: bert, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 261, max_seq_len: 8 }\n";

TEST(Sampling, Gpt2GenerateMatchesGreedyByHandAcrossTheWindow) {
  for (bool kv_cache : {false, true}) check_generate(kGpt2, kv_cache);
}

TEST(Sampling, NeoxGenerateMatchesGreedyByHandAcrossTheWindow) {
  for (bool kv_cache : {false, true}) check_generate(kNeox, kv_cache);
}

// How the blocks ran: with the cache the prompt runs once, for one sample,
// and each later token one position per sample, until the sequence passes
// the window, which then runs whole each token; without it every token runs
// the whole sequence so far (up to the window) for every sample.
TEST(Sampling, TheCacheRunsThePromptOnceAndEachTokenOnce) {
  for (const std::string& yaml : {kGpt2, kLlama}) {
    Built b(yaml);
    const std::vector<int32_t> prompt{72, 101, 108};  // window 8, 3 samples below
    GenerateOptions o{.tokens = 4, .samples = 3, .vocab = 257, .sampling = opts(0.0)};
    GenerateStats st;
    const auto cached = generate(b.cfg.model, b.params, prompt, o, {}, &st);
    EXPECT_TRUE(st.kv_cache);
    EXPECT_EQ(st.rows, 3 + 3 * 3);  // the prompt once; tokens 2-4 one row per sample
    EXPECT_EQ(st.cached_rows, st.rows);
    o.kv_cache = false;
    EXPECT_EQ(generate(b.cfg.model, b.params, prompt, o, {}, &st), cached);
    EXPECT_FALSE(st.kv_cache);
    EXPECT_EQ(st.rows, 3 * (3 + 4 + 5 + 6));
    EXPECT_EQ(st.cached_rows, 0);
    // Past the window (8): positions 3..7 cached, then two whole windows.
    o = {.tokens = 8, .samples = 3, .vocab = 257, .sampling = opts(0.0)};
    generate(b.cfg.model, b.params, prompt, o, {}, &st);
    EXPECT_EQ(st.cached_rows, 3 + 3 * 5);
    EXPECT_EQ(st.rows, st.cached_rows + 3 * 8 * 2);
  }
}

TEST(Sampling, GenerateRefusesAMaskedTokenModel) {
  Built b(kBert);
  const GenerateOptions o{.tokens = 1, .vocab = 257};
  EXPECT_HAS(error_text([&] {
               generate(b.cfg.model, b.params, std::vector<int32_t>{1, 2}, o);
             }),
             "not a left-to-right");
}

TEST(Sampling, LlamaGenerateMatchesGreedyByHandAcrossTheWindow) {
  for (bool kv_cache : {false, true}) check_generate(kLlama, kv_cache);
}

// ---- ChunkModel::forward_cached ----------------------------------------------

// The blocks' output at every position, of one forward of the whole
// sequence, against forward_cached over pieces of it, for the whole body and
// for the body split into two pipeline chunks (each with its own cache).
void check_forward_cached(const std::string& model_yaml) {
  Built b(model_yaml);
  const ModelConfig& m = b.cfg.model;
  const int64_t B = 2, T = m.max_seq_len, C = m.d_model;
  Tensor ids = Tensor::zeros({B, T}, DType::i32), targets = Tensor::zeros({B, T}, DType::i32);
  for (int64_t k = 0; k < B * T; ++k) ids.data<int32_t>()[k] = int32_t((k * 37 + 11) % 257);
  auto body = build_model(m, b.params, b.tp, StageSpan{.head = false});
  Tensor whole = Tensor::zeros({B, T, C}, DType::f32);
  auto ctx = body->make_context(B, T);
  body->forward(*ctx, ids, targets, {.seed = 5, .step = 1, .train = false}, &whole);

  auto& one = dynamic_cast<ChunkModel&>(*body);
  auto first = build_model(m, b.params, b.tp, StageSpan{.end_layer = 1, .head = false});
  auto second = build_model(m, b.params, b.tp, StageSpan{.first_layer = 1, .embedding = false, .head = false});
  auto& c1 = dynamic_cast<ChunkModel&>(*first);
  auto& c2 = dynamic_cast<ChunkModel&>(*second);
  ChunkModel::KvCache cache = one.make_kv_cache(B, T), k1 = c1.make_kv_cache(B, T), k2 = c2.make_kv_cache(B, T);
  // One key and one value head per k/v head (LLaMA's grouped heads cached once per group).
  EXPECT_EQ(cache.layers.at(0).dim(2), 2 * m.n_kv_head * (C / m.n_head));
  int64_t t0 = 0;
  for (int64_t n : {3, 1, 1, int(T) - 5}) {
    Tensor piece = test::positions_of(ids, t0, n), out = Tensor::zeros({B, n, C}, DType::f32), mid = out.clone(),
           out2 = out.clone();
    auto cx = one.make_context(B, n), cx1 = c1.make_context(B, n), cx2 = c2.make_context(B, n);
    one.forward_cached(*cx, cache, piece, test::positions_of(targets, t0, n), &out);
    c1.forward_cached(*cx1, k1, piece, test::positions_of(targets, t0, n), &mid);
    c2.forward_cached(*cx2, k2, mid, test::positions_of(targets, t0, n), &out2);
    EXPECT_TENSOR_NEAR(out, test::positions_of(whole, t0, n), (test::Tolerance{1e-5, 1e-5}))
        << "positions " << t0 << " + " << n;
    EXPECT_TENSOR_NEAR(out2, out, (test::Tolerance{1e-5, 1e-5})) << "two chunks, positions " << t0 << " + " << n;
    t0 += n;
    EXPECT_EQ(cache.length, t0);
    EXPECT_EQ(k2.length, t0);
  }
  // A cache is full at its capacity; its size is bounded by max_seq_len.
  auto cx = one.make_context(B, 1);
  Tensor out = Tensor::zeros({B, 1, C}, DType::f32);
  EXPECT_HAS(error_text([&] {
               one.forward_cached(*cx, cache, test::positions_of(ids, 0, 1), test::positions_of(targets, 0, 1), &out);
             }),
             "do not fit the key/value cache");
  EXPECT_HAS(error_text([&] { one.make_kv_cache(B, T + 1); }), "1 to max_seq_len");
  ChunkModel::KvCache other = one.make_kv_cache(B + 1, T);
  EXPECT_HAS(error_text([&] {
               one.forward_cached(*cx, other, test::positions_of(ids, 0, 1), test::positions_of(targets, 0, 1), &out);
             }),
             "is not this chunk's");
  // A cached context takes no backward; after a forward_cached that threw
  // inside a block (a cache of the wrong dtype), the same context runs an
  // ordinary forward again: the first position's rows of a fresh context.
  ChunkModel::KvCache fresh = one.make_kv_cache(B, T);
  one.forward_cached(*cx, fresh, test::positions_of(ids, 0, 1), test::positions_of(targets, 0, 1), &out);
  EXPECT_HAS(error_text([&] { one.backward(*cx, 1.0f, &out); }), "saved nothing for backward");
  ChunkModel::KvCache bad = one.make_kv_cache(B, T);
  for (Tensor& l : bad.layers) l = l.to(DType::f64);
  EXPECT_THROW(one.forward_cached(*cx, bad, test::positions_of(ids, 0, 1), test::positions_of(targets, 0, 1), &out),
               Error);
  Tensor plain = Tensor::zeros({B, 1, C}, DType::f32), want = plain.clone();
  body->forward(*cx, test::positions_of(ids, 0, 1), test::positions_of(targets, 0, 1),
                {.seed = 5, .step = 1, .train = false}, &plain);
  auto again = body->make_context(B, 1);
  body->forward(*again, test::positions_of(ids, 0, 1), test::positions_of(targets, 0, 1),
                {.seed = 5, .step = 1, .train = false}, &want);
  EXPECT_EQ(std::memcmp(plain.raw(), want.raw(), want.nbytes()), 0);
  EXPECT_NO_THROW(one.backward(*cx, 1.0f, &out));
}

TEST(KvCache, Gpt2ForwardCachedMatchesTheWholeSequence) { check_forward_cached(kGpt2); }
TEST(KvCache, NeoxForwardCachedMatchesTheWholeSequence) { check_forward_cached(kNeox); }
TEST(KvCache, LlamaForwardCachedMatchesTheWholeSequence) { check_forward_cached(kLlama); }

// A model that says it decodes with a cache (kv_cache_ready) but whose block
// runs attention without attend(): forward_cached names the block instead of
// returning outputs that never saw the cached positions.
class BlockWithoutAttend final : public ChunkModel {
  struct Acts final : ChunkActivations {
    Acts() {
      arch = "no-attend", C = 4, n_layer = 2, max_seq_len = 8;
      attention = {.NH = 1, .HS = 4};
    }
    std::unique_ptr<SavedTensors> block(const MakeTensor&, int64_t, int64_t) const override {
      return std::make_unique<SavedTensors>();
    }
    std::unique_ptr<LmHeadTensors> head(const MakeTensor&, int64_t, int64_t) const override { return nullptr; }
    std::unique_ptr<SavedTensors> scratch(const MakeTensor&, const StageSpan&, int64_t, int64_t) const override {
      return std::make_unique<SavedTensors>();
    }
  };

 public:
  BlockWithoutAttend(FlatParams& params, comm::Group& tp, int attending_blocks)
      : ChunkModel(std::make_unique<Acts>(), params, tp, StageSpan{0, 2, false, false}), attending_(attending_blocks) {}
  bool kv_cache_ready() const override { return true; }
  double flops_per_token(int64_t) const override { return 0; }

 protected:
  void block_forward(Context& ctx, int i, const Tensor& x, Tensor& out, SavedTensors&) override {
    // Block i < attending_ attends through the cache; the others keep no keys or values.
    Tensor qkv = Tensor::zeros({ctx.B, ctx.T, 12}, DType::f32), att;
    if (i < attending_) attend(ctx, i, out, att, qkv, ops::Dropout{});
    out.copy_from(x);
  }
  void embed_forward(Context&, const Tensor&) override { LATTICE_FAIL("not used"); }
  void embed_backward(Context&, Tensor&, Tensor&) override { LATTICE_FAIL("not used"); }
  void block_backward(Context&, int, const Tensor&, const Tensor&, Tensor&, SavedTensors&) override {
    LATTICE_FAIL("not used");
  }
  double head_forward(Context&, const Tensor&) override { LATTICE_FAIL("not used"); }
  void head_backward(Context&, const Tensor&, float, Tensor&) override { LATTICE_FAIL("not used"); }

 private:
  int attending_;
};

TEST(KvCache, ABlockThatDoesNotAttendThroughTheCacheIsNamed) {
  comm::Group tp = comm::self_group("tp");
  FlatParams params({}, DType::f32);
  const int64_t B = 1, T = 3;
  Tensor x = test::random_tensor({B, T, 4}, DType::f32, 1), out = Tensor::zeros({B, T, 4}, DType::f32);
  Tensor targets = Tensor::zeros({B, T}, DType::i32);
  for (int attending : {2, 1}) {
    SCOPED_TRACE(attending);
    BlockWithoutAttend model(params, tp, attending);
    ChunkModel::KvCache cache = model.make_kv_cache(B, 8);
    auto ctx = model.make_context(B, T);
    if (attending == 2) {
      EXPECT_NO_THROW(model.forward_cached(*ctx, cache, x, targets, &out));
      EXPECT_EQ(cache.length, T);
    } else {
      EXPECT_HAS(error_text([&] { model.forward_cached(*ctx, cache, x, targets, &out); }),
                 "no-attend: block 1 did not attend through the key/value cache");
      EXPECT_EQ(cache.length, 0);
    }
  }
}

TEST(KvCache, AModelWithoutItSaysSo) {
  Built b(kBert);
  auto& bert = dynamic_cast<ChunkModel&>(*b.model);
  EXPECT_FALSE(bert.kv_cache_ready());
  EXPECT_HAS(error_text([&] { bert.make_kv_cache(1, 4); }), "bert: this model does not decode with a key/value cache");
}

TEST(KvCache, SixteenBitActivationsAreOneLine) {
  Built b(kGpt2);
  b.model->set_activation_dtype(DType::bf16);
  EXPECT_HAS(error_text([&] { dynamic_cast<ChunkModel&>(*b.model).make_kv_cache(1, 4); }),
             "a key/value cache runs on the CPU with f32 or f64 activations, not bf16 on cpu");
}

}  // namespace
}  // namespace lattice
