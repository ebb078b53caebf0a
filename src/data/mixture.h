// Weighted data mixtures: the training samples drawn from several sources
// (the TokenDatasets of data.train's globs) in given proportions.
//
// Interleave (MixtureSchedule): the weights are normalised and held as
// integers q_s (shares of 2^30, at least 1; Q = sum q_s), so every rank and
// build makes the same exact comparisons. Global sample index i (loader.h:
// step_index * global_batch + g) goes to the source with the largest deficit
//   q_s * (i + 1) - Q * c_s(i),   c_s(i) = samples of [0, i) that went to s,
// ties to the lower index, and is that source's c_s(i)-th sample. So every
// prefix of n samples gives source s fewer than w_s * n + 1 of them (never a
// whole sample ahead of its share) and more than w_s * n - (S - 1) (with 2
// sources: within one sample either way; in practice about one for any S).
// The pick is a pure function of (weights, i): the samples of a step do not
// depend on how dp ranks or microbatches split the global batch.
// With one source, sample i is that source's sample i: the order of a run
// without a mixture.
//
// Each source then reads its k-th sample as TokenDataset::train_window(k):
// its own windows in its own per-epoch permutation (keyed by its index,
// TokenDatasetOptions::source), so each epoch of a source visits each of its
// windows once, whatever the other sources hold.
//
// Random access: a cursor walks the picks forward and keeps the per-source
// counts at every multiple of kStride samples; a later sample walks on from
// the cursor, an earlier one from the snapshot below it (at most kStride
// picks). A resume at sample i walks from 0 once: S integer products per
// sample: 0.48 s per 10^8 samples with two sources, 1.2 s with eight, on one
// core (bench/mixture, BENCHMARKS.md).
//
// Not thread-safe (the cursor, the sources' cached permutations).
// Shapes: inputs and targets are (count, T) int32, row-major.
#pragma once

#include <cstdint>
#include <vector>

#include "data/loader.h"

namespace lattice::data {

class MixtureSchedule {
 public:
  static constexpr int64_t kStride = int64_t(1) << 16;
  // weights: one per source, each finite and > 0 (not necessarily normalised).
  explicit MixtureSchedule(std::vector<double> weights);

  struct Pick {
    int64_t source = 0, index = 0;  // sample `index` (from 0) of source `source`
    bool operator==(const Pick&) const = default;
  };
  Pick pick(int64_t sample_index);
  // The samples of [0, n) that go to each source.
  std::vector<int64_t> counts(int64_t n);
  size_t sources() const { return shares_.size(); }
  double share(size_t s) const { return double(shares_[s]) / double(total_); }  // normalised weight

 private:
  void seek(int64_t n);         // the cursor to n: counts_ = the counts of [0, n)
  int64_t next_source() const;  // the source of sample at_

  std::vector<int64_t> shares_;  // q_s
  int64_t total_ = 0;            // Q
  int64_t at_ = 0;
  std::vector<int64_t> counts_;     // of [0, at_)
  std::vector<int64_t> snapshots_;  // counts of [0, k * kStride) at [k * S, (k + 1) * S)
};

// The training sources with their schedule: hands out any slice of a step's
// global batch, as TokenDataset::fill_batch does for one source.
class DataMixture {
 public:
  // sources[s] was built with TokenDatasetOptions::source = s.
  DataMixture(std::vector<TokenDataset> sources, std::vector<double> weights, int64_t global_batch);

  size_t size() const { return sources_.size(); }
  const TokenDataset& source(size_t s) const { return sources_[s]; }
  double share(size_t s) const { return schedule_.share(s); }
  // Samples [first_sample, first_sample + count) of step `step_index`'s global batch.
  void fill_batch(int64_t step_index, int64_t first_sample, int64_t count, int32_t* inputs /* (count, T) */,
                  int32_t* targets /* (count, T) */);
  MixtureSchedule::Pick pick(int64_t sample_index) { return schedule_.pick(sample_index); }

 private:
  std::vector<TokenDataset> sources_;
  MixtureSchedule schedule_;
  int64_t global_batch_ = 1;
};

}  // namespace lattice::data
