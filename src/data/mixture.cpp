#include "data/mixture.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lattice::data {

MixtureSchedule::MixtureSchedule(std::vector<double> weights) {
  LATTICE_CHECK(!weights.empty(), "data mixture: no source");
  double sum = 0;
  for (double w : weights) {
    LATTICE_CHECK(std::isfinite(w) && w > 0, "data mixture: weight {} must be finite and > 0", w);
    sum += w;
  }
  LATTICE_CHECK(std::isfinite(sum), "data mixture: the weights sum to {}", sum);
  constexpr double kOne = double(int64_t(1) << 30);
  for (double w : weights) shares_.push_back(std::max<int64_t>(1, std::llround(w / sum * kOne)));
  for (int64_t q : shares_) total_ += q;
  counts_.assign(shares_.size(), 0);
}

int64_t MixtureSchedule::next_source() const {
  // deficit_s = q_s * (i + 1) - Q * c_s: up to 2^31 * 2^63, exact in 128 bits.
  int64_t best = 0;
  __int128 best_deficit = 0;
  for (size_t s = 0; s < shares_.size(); ++s) {
    const __int128 d = __int128(shares_[s]) * (at_ + 1) - __int128(total_) * counts_[s];
    if (s == 0 || d > best_deficit) best = int64_t(s), best_deficit = d;
  }
  return best;
}

void MixtureSchedule::seek(int64_t n) {
  const size_t S = shares_.size();
  if (n < at_) {  // back to the snapshot at or below n: it was taken on the way to at_
    const int64_t k = n / kStride;
    std::copy_n(snapshots_.begin() + k * int64_t(S), S, counts_.begin());
    at_ = k * kStride;
  }
  while (at_ < n) {
    if (at_ % kStride == 0 && snapshots_.size() == size_t(at_ / kStride) * S)
      snapshots_.insert(snapshots_.end(), counts_.begin(), counts_.end());
    ++counts_[size_t(next_source())];
    ++at_;
  }
}

MixtureSchedule::Pick MixtureSchedule::pick(int64_t sample_index) {
  LATTICE_CHECK(sample_index >= 0, "data mixture: sample index {} must be >= 0", sample_index);
  if (shares_.size() == 1) return {0, sample_index};
  seek(sample_index);
  const int64_t s = next_source();
  return {s, counts_[size_t(s)]};
}

std::vector<int64_t> MixtureSchedule::counts(int64_t n) {
  LATTICE_CHECK(n >= 0, "data mixture: sample count {} must be >= 0", n);
  if (shares_.size() == 1) return {n};
  seek(n);
  return counts_;
}

DataMixture::DataMixture(std::vector<TokenDataset> sources, std::vector<double> weights, int64_t global_batch)
    : sources_(std::move(sources)), schedule_(std::move(weights)), global_batch_(global_batch) {
  LATTICE_CHECK(schedule_.sources() == sources_.size(), "data mixture: {} weights for {} sources", schedule_.sources(),
                sources_.size());
  for (const TokenDataset& d : sources_)
    LATTICE_CHECK(d.seq_len() == sources_.front().seq_len(), "data mixture: sources of seq_len {} and {}", d.seq_len(),
                  sources_.front().seq_len());
}

void DataMixture::fill_batch(int64_t step_index, int64_t first_sample, int64_t count, int32_t* inputs,
                             int32_t* targets) {
  LATTICE_CHECK(first_sample >= 0 && count >= 0 && first_sample + count <= global_batch_,
                "data mixture: samples [{}, {}) are outside the global batch of {}", first_sample, first_sample + count,
                global_batch_);
  LATTICE_CHECK(step_index >= 0, "data mixture: step index {} must be >= 0", step_index);
  const int64_t T = sources_.front().seq_len();
  for (int64_t k = 0; k < count; ++k) {
    const MixtureSchedule::Pick p = schedule_.pick(step_index * global_batch_ + first_sample + k);
    sources_[size_t(p.source)].fill_sample(p.index, inputs + k * T, targets + k * T);
  }
}

}  // namespace lattice::data
