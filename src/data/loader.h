// TokenDataset: the shards matched by a glob, read as one token stream, cut
// into training windows in a seeded order that depends only on (seed, step).
//
// Stream: the shards in sorted (byte-wise) path order, concatenated; N tokens.
// Windows: window w covers tokens [w*T, w*T + T + 1) -- inputs are the first T,
//   targets the last T -- so n_windows = (N - 1) / T and consecutive windows
//   share one token. A window may span two shards.
// Training order: global sample index i = step_index * global_batch + g
//   (step_index from 0, g the sample's place in the step's global batch);
//   epoch = i / n_windows; the window is perm_epoch[i % n_windows], where
//   perm_epoch is a Fisher-Yates shuffle of [0, n_windows) driven by Philox
//   keyed by (seed, RngPurpose::data, epoch, options.source). So each epoch
//   visits every window once, and the sequences of a step do not depend on how
//   dp ranks or microbatches split the global batch: fill_batch(step, first,
//   count) hands out any slice of it. A mixture of several sources
//   (data/mixture.h) gives each its own index i (its own sample count) and
//   its own permutations (options.source).
// Evaluation: fill_eval_batch walks the windows in order, without shuffling,
//   from window 0, wrapping at the end.
//
// Invariants: every token is < vocab_size (checked for every shard on open);
// every shard that records its tokenizer records options.tokenizer;
// at least one window exists. fill_batch caches the current epoch's
// permutation, so one TokenDataset must not be used by two threads at once.
// Shapes: inputs and targets are (count, T) int32, row-major.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace lattice::data {

struct TokenDatasetOptions {
  std::string pattern;                         // glob(3) of shard files
  std::string name = "data";                   // config key for messages, e.g. "data.train"
  int64_t vocab_size = 0;                      // every token id must be below it
  std::string vocab_key = "model.vocab_size";  // how messages name vocab_size
  // "bytes" | "gpt2": a shard whose header records another tokenizer is
  // refused (data.tokenizer); "" checks nothing.
  std::string tokenizer;
  int64_t seq_len = 0;                         // T
  int64_t global_batch = 1;                    // sequences per step
  uint64_t seed = 0;
  // Which source of data.train this is (data/mixture.h): keys the window
  // permutations, so the sources of a mixture shuffle independently; source 0
  // is the order of a run without a mixture.
  uint32_t source = 0;
};

// The window order of one epoch of a source: a permutation of [0, n_windows).
std::vector<int64_t> window_permutation(uint64_t seed, int64_t epoch, int64_t n_windows, uint32_t source = 0);

class TokenDataset {
 public:
  explicit TokenDataset(TokenDatasetOptions options);

  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_windows() const { return n_windows_; }
  int64_t seq_len() const { return opts_.seq_len; }
  int64_t global_batch() const { return opts_.global_batch; }
  std::vector<std::string> shard_paths() const;

  // The window that global sample index i (over the whole run) trains on.
  int64_t train_window(int64_t sample_index);
  // The inputs and targets of that window.
  void fill_sample(int64_t sample_index, int32_t* inputs /* (T) */, int32_t* targets /* (T) */);
  // Samples [first_sample, first_sample + count) of step `step_index`'s global batch.
  void fill_batch(int64_t step_index, int64_t first_sample, int64_t count,
                  int32_t* inputs /* (count, T) */, int32_t* targets /* (count, T) */);
  // Samples of evaluation batch `eval_batch_index` (global_batch per batch), in window order.
  void fill_eval_batch(int64_t eval_batch_index, int64_t first_sample, int64_t count,
                       int32_t* inputs /* (count, T) */, int32_t* targets /* (count, T) */) const;
  // Copies tokens [begin, end) of the stream.
  void read_tokens(int64_t begin, int64_t end, int32_t* out) const;

 private:
  void check_slice(int64_t first_sample, int64_t count) const;
  void fill_window(int64_t window, int32_t* inputs, int32_t* targets) const;
  void validate_tokens(const Shard& shard) const;

  TokenDatasetOptions opts_;
  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;  // stream offset of each shard's first token
  int64_t n_tokens_ = 0, n_windows_ = 0;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace lattice::data
