// Text generation from a trained causal model on one rank (lattice sample).
//
// generate() continues a prompt token by token: each new token is drawn from
// the model's logits at the last position of a forward over the sequence so
// far (the last max_seq_len tokens once it is longer), in evaluation mode
// (no dropout). The model runs as two chunks over the same parameters, as
// two pipeline stages would: the embedding and the blocks over the whole
// sequence, then the head (final norm, LM head, loss) over each sample's
// last position only, so the LM head's product covers B rows, not B x T.
// With a key/value cache (models that opt in: ChunkModel::kv_cache_ready;
// GPT-2, LLaMA, GPT-NeoX) each token after the prompt runs the blocks over
// that one position, attending over the cached keys and values of the
// earlier ones; the prompt runs once (for one sample, its cache copied to
// the others). Once the sequence outgrows max_seq_len every position moves
// each token, so from then on the window runs whole per token, as without
// the cache. Cached and uncached logits agree up to rounding (other matmul
// shapes), not bit for bit.
//
// sample_token() is the draw itself: greedy (temperature 0: the first id of
// the largest logit), or softmax(logits / temperature) over the `top_k`
// largest logits (0: all; ties with the k-th largest are kept too), by
// inverse CDF in id order with one uniform from the counter-based RNG keyed
// by (seed, RngPurpose::sample, sample index, position). The same seed,
// prompt and options therefore give the same text, on any thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "config/config.h"
#include "core/param.h"

namespace lattice {

struct SamplingOptions {
  double temperature = 1.0;  // >= 0; 0 is greedy
  int top_k = 0;             // >= 0; 0 keeps every id
  uint64_t seed = 1;
};

// One id in [0, logits.size()) from a row of logits (only the ids that may be
// drawn: callers pass the tokenizer's ids, not the padded vocabulary).
// `sample`, `position`: the RNG coordinates. A NaN or +inf logit anywhere
// in the row is one error line (a diverged checkpoint); -inf is never drawn.
// The uniform has 53 bits (two Philox lanes), so even an id of probability
// 1e-9 among 50k is drawn at its rate.
int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, uint64_t sample, uint64_t position);

struct GenerateOptions {
  int64_t tokens = 64;  // new tokens per sample
  int samples = 1;      // continuations of the prompt, generated as one batch
  int64_t vocab = 0;    // ids drawn are below this (the tokenizer's size; <= the model's vocabulary)
  SamplingOptions sampling{};
  bool kv_cache = true;  // false: every token runs the blocks over the whole window (a check)
};

// `samples` continuations of `prompt` (non-empty), each prompt + `tokens`
// ids, by the causal model of `cfg` whose whole parameters, unsharded, are
// `params` (one rank; activations fp32). Sequences longer than
// cfg.max_seq_len keep their last max_seq_len tokens. `on_token(step,
// seqs)` runs after each generated position (step 1..tokens) with the
// sequences so far, e.g. to print each token as it comes.
// `stats` (if given) says how the blocks ran.
using OnToken = std::function<void(int64_t step, const std::vector<std::vector<int32_t>>& seqs)>;
struct GenerateStats {
  bool kv_cache = false;    // the key/value cache was used (o.kv_cache and the model takes one)
  int64_t rows = 0;         // (sample, position) rows run through the blocks
  int64_t cached_rows = 0;  // of them, rows run with the cache (forward_cached)
};
std::vector<std::vector<int32_t>> generate(const ModelConfig& cfg, FlatParams& params, std::span<const int32_t> prompt,
                                           const GenerateOptions& o, const OnToken& on_token = {},
                                           GenerateStats* stats = nullptr);

}  // namespace lattice
