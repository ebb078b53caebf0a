#include "data/loader.h"

#include <glob.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace lattice::data {

namespace {

std::vector<std::string> match_glob(const std::string& pattern, const std::string& name) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty()))
    LATTICE_INPUT_FAIL(
        "{}: no file matches '{}'; write shards with `lattice data prepare --out PREFIX` "
        "and point {} at PREFIX_train_*.bin or PREFIX_val_*.bin",
        name, pattern, name);
  LATTICE_CHECK(rc == 0, "{}: cannot expand '{}' (glob error {})", name, pattern, rc);
  std::sort(paths.begin(), paths.end());  // byte-wise, whatever the locale
  return paths;
}

}  // namespace

std::vector<int64_t> window_permutation(uint64_t seed, int64_t epoch, int64_t n_windows, uint32_t source) {
  std::vector<int64_t> perm(static_cast<size_t>(n_windows));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  RngKey key;
  key.seed = seed;
  key.purpose = RngPurpose::data;
  key.step = uint32_t(epoch);
  key.layer = uint32_t(uint64_t(epoch) >> 32);
  key.site = source;
  for (int64_t k = n_windows - 1; k > 0; --k) {
    // 64 random bits per swap (element k*4 owns a whole Philox block);
    // j = floor(bits * (k+1) / 2^64) is uniform in [0, k] up to 2^-64 bias.
    Philox4 r = rng_bits(key, 0, uint64_t(k) * 4);
    uint64_t bits = (uint64_t(r.v[0]) << 32) | r.v[1];
    auto j = int64_t((unsigned __int128)bits * uint64_t(k + 1) >> 64);
    std::swap(perm[size_t(k)], perm[size_t(j)]);
  }
  return perm;
}

TokenDataset::TokenDataset(TokenDatasetOptions options) : opts_(std::move(options)) {
  const std::string& name = opts_.name;
  LATTICE_CHECK(opts_.seq_len >= 1, "{}: seq_len {} must be >= 1", name, opts_.seq_len);
  LATTICE_CHECK(opts_.global_batch >= 1, "{}: global_batch {} must be >= 1", name, opts_.global_batch);
  LATTICE_CHECK(opts_.vocab_size >= 1, "{}: {} {} must be >= 1", name, opts_.vocab_key, opts_.vocab_size);
  for (const auto& path : match_glob(opts_.pattern, name)) {
    Shard s = Shard::open(path);
    if (!opts_.tokenizer.empty() && !s.tokenizer().empty() && s.tokenizer() != opts_.tokenizer)
      LATTICE_INPUT_FAIL(
          "{}: shard {} holds {} tokens (lattice data prepare --tokenizer {}), but data.tokenizer is {} — set "
          "data.tokenizer: {}, or prepare the data again with --tokenizer {}",
          name, path, s.tokenizer(), s.tokenizer(), opts_.tokenizer, s.tokenizer(), opts_.tokenizer);
    validate_tokens(s);
    starts_.push_back(n_tokens_);
    n_tokens_ += s.size();
    shards_.push_back(std::move(s));
  }
  n_windows_ = n_tokens_ > 0 ? (n_tokens_ - 1) / opts_.seq_len : 0;
  LATTICE_INPUT_CHECK(n_windows_ >= 1,
                      "{}: the {} shard(s) matching '{}' hold {} tokens, fewer than seq_len + 1 = {} "
                      "needed for one sample; prepare more data or lower train.seq_len",
                      name, shards_.size(), opts_.pattern, n_tokens_, opts_.seq_len + 1);
}

void TokenDataset::validate_tokens(const Shard& shard) const {
  auto tokens = shard.tokens();
  uint16_t max = 0;
  for (uint16_t t : tokens) max = std::max(max, t);  // vectorises; the slow search only on failure
  if (tokens.empty() || int64_t(max) < opts_.vocab_size) return;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (int64_t(tokens[i]) >= opts_.vocab_size)
      LATTICE_INPUT_FAIL("{}: shard {} token {} has id {} >= {} {}; raise {} or re-tokenize", opts_.name, shard.path(),
                         i, tokens[i], opts_.vocab_key, opts_.vocab_size, opts_.vocab_key);
}

std::vector<std::string> TokenDataset::shard_paths() const {
  std::vector<std::string> paths;
  for (const auto& s : shards_) paths.push_back(s.path());
  return paths;
}

void TokenDataset::read_tokens(int64_t begin, int64_t end, int32_t* out) const {
  LATTICE_CHECK(0 <= begin && begin <= end && end <= n_tokens_,
                "{}: token range [{}, {}) is outside the stream of {} tokens", opts_.name, begin, end, n_tokens_);
  // The shard holding `begin`: the last one starting at or before it.
  auto it = std::upper_bound(starts_.begin(), starts_.end(), begin);
  size_t s = size_t(it - starts_.begin()) - 1;
  while (begin < end) {
    auto tokens = shards_[s].tokens();
    int64_t local = begin - starts_[s];
    int64_t n = std::min<int64_t>(end - begin, int64_t(tokens.size()) - local);
    for (int64_t k = 0; k < n; ++k) out[k] = tokens[size_t(local + k)];
    out += n;
    begin += n;
    ++s;
  }
}

int64_t TokenDataset::train_window(int64_t sample_index) {
  LATTICE_CHECK(sample_index >= 0, "{}: sample index {} must be >= 0", opts_.name, sample_index);
  const int64_t epoch = sample_index / n_windows_;
  if (epoch != perm_epoch_) {
    perm_ = window_permutation(opts_.seed, epoch, n_windows_, opts_.source);
    perm_epoch_ = epoch;
  }
  return perm_[size_t(sample_index % n_windows_)];
}

void TokenDataset::fill_sample(int64_t sample_index, int32_t* inputs, int32_t* targets) {
  fill_window(train_window(sample_index), inputs, targets);
}

void TokenDataset::check_slice(int64_t first_sample, int64_t count) const {
  LATTICE_CHECK(first_sample >= 0 && count >= 0 && first_sample + count <= opts_.global_batch,
                "{}: samples [{}, {}) are outside the global batch of {}", opts_.name, first_sample,
                first_sample + count, opts_.global_batch);
}

void TokenDataset::fill_window(int64_t window, int32_t* inputs, int32_t* targets) const {
  const int64_t T = opts_.seq_len;
  std::vector<int32_t> buf(size_t(T + 1));
  read_tokens(window * T, window * T + T + 1, buf.data());
  std::copy(buf.begin(), buf.end() - 1, inputs);
  std::copy(buf.begin() + 1, buf.end(), targets);
}

void TokenDataset::fill_batch(int64_t step_index, int64_t first_sample, int64_t count, int32_t* inputs,
                              int32_t* targets) {
  check_slice(first_sample, count);
  LATTICE_CHECK(step_index >= 0, "{}: step index {} must be >= 0", opts_.name, step_index);
  const int64_t T = opts_.seq_len;
  for (int64_t s = 0; s < count; ++s) {
    fill_sample(step_index * opts_.global_batch + first_sample + s, inputs + s * T, targets + s * T);
  }
}

void TokenDataset::fill_eval_batch(int64_t eval_batch_index, int64_t first_sample, int64_t count, int32_t* inputs,
                                   int32_t* targets) const {
  check_slice(first_sample, count);
  LATTICE_CHECK(eval_batch_index >= 0, "{}: eval batch index {} must be >= 0", opts_.name, eval_batch_index);
  const int64_t T = opts_.seq_len;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t i = eval_batch_index * opts_.global_batch + first_sample + s;
    fill_window(i % n_windows_, inputs + s * T, targets + s * T);
  }
}

}  // namespace lattice::data
