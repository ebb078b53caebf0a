#include "models/sampling.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "comm/self_communicator.h"
#include "config/config.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/rng.h"
#include "models/chunk_model.h"
#include "models/registry.h"

namespace lattice {

namespace {
// A uniform in [0, 1) with 53 bits for (sample, position): two lanes of the
// Philox block of elements 2 position and 2 position + 1.
double uniform53(uint64_t seed, uint64_t sample, uint64_t position) {
  const Philox4 r = rng_bits({.seed = seed, .purpose = RngPurpose::sample}, sample, 2 * position);
  const unsigned lane = unsigned(2 * position) & 3;  // 0 or 2: both lanes in the block
  const uint64_t bits = ((uint64_t(r.v[lane]) << 32) | r.v[lane + 1]) >> 11;
  return double(bits) * 0x1p-53;
}
}  // namespace

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, uint64_t sample, uint64_t position) {
  const int64_t n = int64_t(logits.size());
  LATTICE_CHECK(n > 0, "sample_token: no ids to draw from");
  LATTICE_CHECK(o.temperature >= 0.0 && std::isfinite(o.temperature) && o.top_k >= 0,
                "sample_token: temperature {} must be finite and >= 0, top_k {} >= 0", o.temperature, o.top_k);
  for (int64_t i = 0; i < n; ++i) {
    const float x = logits[size_t(i)];
    LATTICE_CHECK(!std::isnan(x) && x != INFINITY, "sample: logit {} of position {} is {}: the checkpoint has diverged",
                  i, position, std::isnan(x) ? "NaN" : "+inf");
  }
  // The kept ids: logits at least the k-th largest (all when top_k is 0 or covers them); -inf is never drawn.
  float threshold = -INFINITY;
  if (o.top_k > 0 && o.top_k < n) {
    std::vector<float> sorted(logits.begin(), logits.end());
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<float>());
    threshold = sorted[size_t(o.top_k - 1)];
  }
  int64_t best = -1;  // the first largest
  for (int64_t i = 0; i < n; ++i)
    if (logits[size_t(i)] > -INFINITY && (best < 0 || logits[size_t(i)] > logits[size_t(best)])) best = i;
  LATTICE_CHECK(best >= 0, "sample: every logit of position {} is -inf: no id can be drawn", position);
  if (o.temperature == 0.0) return int32_t(best);
  // softmax((x - max) / temperature) over the kept ids, in double; inverse CDF in id order.
  const double mx = logits[size_t(best)];
  std::vector<double> w(size_t(n), 0.0);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    if (logits[size_t(i)] >= threshold)
      sum += (w[size_t(i)] = std::exp((double(logits[size_t(i)]) - mx) / o.temperature));
  const double u = uniform53(o.seed, sample, position) * sum;
  double cum = 0.0;
  int64_t last = best;
  for (int64_t i = 0; i < n; ++i) {
    if (w[size_t(i)] == 0.0) continue;
    cum += w[size_t(i)];
    last = i;
    if (u < cum) return int32_t(i);
  }
  return int32_t(last);  // u within rounding of the sum
}

std::vector<std::vector<int32_t>> generate(const ModelConfig& cfg, FlatParams& params, std::span<const int32_t> prompt,
                                           const GenerateOptions& o, const OnToken& on_token, GenerateStats* stats) {
  LATTICE_CHECK(arch_traits(cfg.arch).causal, "generate: {} is not a left-to-right language model",
                enum_name(cfg.arch));
  LATTICE_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
  LATTICE_CHECK(o.tokens >= 0 && o.samples >= 1 && o.vocab >= 1,
                "generate: tokens {} >= 0, samples {} >= 1 and vocab {} >= 1 expected", o.tokens, o.samples, o.vocab);
  comm::Group tp = comm::self_group("tp");
  // Two chunks of the one model over the same parameters: the blocks, then the head alone.
  const std::unique_ptr<LanguageModel> body_model = build_model(cfg, params, tp, StageSpan{.head = false});
  const std::unique_ptr<LanguageModel> head =
      build_model(cfg, params, tp, StageSpan{.first_layer = cfg.n_layer, .end_layer = cfg.n_layer, .embedding = false});
  auto& body = dynamic_cast<ChunkModel&>(*body_model);
  const auto& head_chunk = dynamic_cast<const ChunkModel&>(*head);
  const int64_t B = o.samples, C = cfg.d_model, window = cfg.max_seq_len;
  const StepCoords coords{.seed = o.sampling.seed, .step = 1, .sample0 = 0, .train = false};
  std::vector<std::vector<int32_t>> seqs(size_t(B), std::vector<int32_t>(prompt.begin(), prompt.end()));
  const std::unique_ptr<ModelContext> head_ctx = head->make_context(B, 1);
  Tensor last = Tensor::zeros({B, 1, C}, body.activation_dtype()), last_targets = Tensor::zeros({B, 1}, DType::i32);

  // The key/value cache holds every position run so far while the sequence
  // fits the window; past it the positions shift by one each token, so the
  // window runs whole without it, exactly as with o.kv_cache false. A model
  // that cannot take one (kv_cache_refusal) runs without it throughout.
  const bool cached = o.kv_cache && body.kv_cache_refusal().empty();
  const int64_t capacity = std::min<int64_t>(window, int64_t(prompt.size()) + std::max<int64_t>(o.tokens, 1));
  ChunkModel::KvCache cache;
  if (cached) cache = body.make_kv_cache(B, capacity);
  if (stats) *stats = GenerateStats{.kv_cache = cached};

  // Runs the last T tokens of samples [0, rows) through the blocks (with
  // `kv` when cached, else from scratch over the window) and leaves each
  // sample's hidden state at its last position in row b of `last`.
  std::unique_ptr<ModelContext> ctx;
  Tensor ids, targets, hidden;
  auto run = [&](ChunkModel::KvCache* kv, int64_t rows, int64_t T) {
    if (!ctx || ids.dim(0) != rows || ids.dim(1) != T) {
      ctx = body.make_context(rows, T);
      ids = Tensor::zeros({rows, T}, DType::i32), targets = Tensor::zeros({rows, T}, DType::i32);
      hidden = Tensor::zeros({rows, T, C}, body.activation_dtype());
    }
    for (int64_t b = 0; b < rows; ++b)
      std::copy(seqs[size_t(b)].end() - T, seqs[size_t(b)].end(), ids.data<int32_t>() + b * T);
    if (kv)
      body.forward_cached(*ctx, *kv, ids, targets, &hidden);
    else
      body.forward(*ctx, ids, targets, coords, &hidden);
    if (stats) {
      stats->rows += rows * T;
      if (kv) stats->cached_rows += rows * T;
    }
    ops::copy_rows(last, 0, C, hidden, (T - 1) * C, T * C, rows, C);
  };

  for (int64_t step = 1; step <= o.tokens; ++step) {
    const int64_t n = int64_t(seqs[0].size());
    if (!cached || n > capacity) {
      run(nullptr, B, std::min(n, window));
    } else if (cache.length > 0) {
      run(&cache, B, n - cache.length);  // the token drawn last
    } else if (B == 1) {
      run(&cache, 1, n);
    } else {
      // The prompt, the same for every sample, runs once; its keys, values
      // and last hidden state are copied to the other samples.
      ChunkModel::KvCache one = body.make_kv_cache(1, capacity);
      run(&one, 1, n);
      for (size_t l = 0; l < cache.layers.size(); ++l) {
        const int64_t width = cache.layers[l].dim(2);
        for (int64_t b = 0; b < B; ++b)
          ops::copy_rows(cache.layers[l], b * capacity * width, width, one.layers[l], 0, width, n, width);
      }
      cache.length = n;
      for (int64_t b = 1; b < B; ++b) ops::copy_rows(last, b * C, C, last, 0, C, 1, C);
    }
    head->forward(*head_ctx, last, last_targets, coords);
    Tensor logits = head_chunk.logits(*head_ctx);  // (B, 1, V_l): the whole vocabulary on one rank
    if (!logits.device().is_cpu() || logits.dtype() != DType::f32) logits = logits.on_host().to(DType::f32);
    const int64_t V = logits.dim(2);
    LATTICE_CHECK(o.vocab <= V, "generate: vocab {} exceeds the model's {} logits", o.vocab, V);
    for (int64_t b = 0; b < B; ++b) {
      const float* row = logits.data<float>() + b * V;
      seqs[size_t(b)].push_back(sample_token({row, size_t(o.vocab)}, o.sampling, uint64_t(b), uint64_t(n)));
    }
    if (on_token) on_token(step, seqs);
  }
  return seqs;
}

}  // namespace lattice
