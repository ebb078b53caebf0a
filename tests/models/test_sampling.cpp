// Text generation (models/sampling.h): the draw of one token against the
// distribution it must follow, and generate() (the model as two chunks, the
// head over the last positions only; the window over the last max_seq_len
// tokens; the row and RNG coordinates of each sample) against loops written
// out here with fresh forwards of the whole model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "comm/self_communicator.h"
#include "config/config.h"
#include "models/chunk_model.h"
#include "models/registry.h"
#include "models/sampling.h"
#include "support/error_text.h"

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

void check_generate(const std::string& model_yaml) {
  Built b(model_yaml);
  const int64_t window = b.cfg.model.max_seq_len, vocab = 257;
  const std::vector<int32_t> prompt{72, 101, 108};
  GenerateOptions o{.tokens = 20, .samples = 3, .vocab = vocab, .sampling = opts(0.0)};
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
  EXPECT_HAS(error_text([&] { generate(b.cfg.model, b.params, std::vector<int32_t>{}, o); }), "no tokens");
  o.vocab = 100000;
  EXPECT_HAS(error_text([&] { generate(b.cfg.model, b.params, prompt, o); }), "exceeds the model's");
}

TEST(Sampling, Gpt2GenerateMatchesGreedyByHandAcrossTheWindow) {
  check_generate("model: { arch: gpt2, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 260, max_seq_len: 8 }\n");
}

TEST(Sampling, NeoxGenerateMatchesGreedyByHandAcrossTheWindow) {
  check_generate("model: { arch: neox, n_layer: 2, n_head: 2, d_model: 16, vocab_size: 260, max_seq_len: 8 }\n");
}

TEST(Sampling, GenerateRefusesAMaskedTokenModel) {
  Built b("model: { arch: bert, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 261, max_seq_len: 8 }\n");
  const GenerateOptions o{.tokens = 1, .vocab = 257};
  EXPECT_HAS(error_text([&] {
               generate(b.cfg.model, b.params, std::vector<int32_t>{1, 2}, o);
             }),
             "not a left-to-right");
}

TEST(Sampling, LlamaGenerateMatchesGreedyByHandAcrossTheWindow) {
  check_generate(
      "model: { arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 16, d_ff: 32, vocab_size: 260, "
      "max_seq_len: 8 }\n");
}

}  // namespace
}  // namespace lattice
