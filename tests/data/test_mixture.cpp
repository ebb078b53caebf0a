// Tests src/data/mixture: the interleave's shares at every prefix, its
// determinism and random access, and DataMixture's batches: any slice of a
// step equals the whole, each source walks its own windows, and one source
// is TokenDataset's order (the order of a run without a mixture).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "data/mixture.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::data;

namespace {

constexpr int64_t kT = 8;

// A source whose token at stream position p is base + p (a window is known by
// its first token), in one shard d_train_000000.bin under its own directory.
std::string make_source(int32_t base, int64_t n_tokens) {
  std::string dir = test::make_temp_dir("mixture");
  std::vector<int32_t> t(static_cast<size_t>(n_tokens));
  std::iota(t.begin(), t.end(), base);
  write_shard(dir + "/d_train_000000.bin", t);
  return dir;
}

TokenDataset source(const std::string& dir, uint32_t index, int64_t global_batch) {
  return TokenDataset({.pattern = dir + "/d_train_*.bin",
                       .name = "data.train",
                       .vocab_size = 50257,
                       .tokenizer = "",
                       .seq_len = kT,
                       .global_batch = global_batch,
                       .seed = 99,
                       .source = index});
}

std::vector<int32_t> fill(DataMixture& m, int64_t step, int64_t first, int64_t count) {
  std::vector<int32_t> in(size_t(count * kT)), tg(size_t(count * kT));
  m.fill_batch(step, first, count, in.data(), tg.data());
  in.insert(in.end(), tg.begin(), tg.end());
  return in;
}

const std::vector<std::vector<double>> kWeights = {{3, 1},    {0.5, 0.5},      {1, 2, 3},
                                                   {0.01, 1}, {5, 1, 1, 1, 1}, {0.3, 0.2, 0.1, 0.25, 0.15, 0.7}};

}  // namespace

// Every prefix of n samples gives source s fewer than w_s n + 1 and more than
// w_s n - (S - 1) of them; with two sources, within one either way.
TEST(MixtureSchedule, SharesTrackTheWeightsAtEveryPrefix) {
  for (const auto& w : kWeights) {
    MixtureSchedule m(w);
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    const auto S = double(w.size());
    std::vector<int64_t> c(w.size(), 0);
    for (int64_t n = 1; n <= 20000; ++n) {
      ++c[size_t(m.pick(n - 1).source)];
      for (size_t s = 0; s < w.size(); ++s) {
        EXPECT_NEAR(m.share(s), w[s] / sum, 1e-8);
        const double ahead = double(c[s]) - m.share(s) * double(n);
        ASSERT_LT(ahead, 1.0) << "source " << s << " after " << n << " samples";
        ASSERT_GT(ahead, -std::max(1.0, S - 1)) << "source " << s << " after " << n << " samples";
      }
    }
    EXPECT_EQ(m.counts(20000), c);
  }
}

// Sample i is the c-th of its source, c the samples of [0, i) it got; the
// same weights give the same picks, scaled weights too.
TEST(MixtureSchedule, PicksNumberEachSourcesSamplesInOrder) {
  MixtureSchedule a({3, 1, 2}), b({1.5, 0.5, 1}), other({1, 3, 2});
  std::vector<int64_t> next(3, 0);
  int differ = 0;
  for (int64_t i = 0; i < 5000; ++i) {
    const MixtureSchedule::Pick p = a.pick(i);
    ASSERT_EQ(p.index, next[size_t(p.source)]++) << i;
    ASSERT_EQ(b.pick(i), p) << i;
    differ += other.pick(i).source != p.source;
  }
  EXPECT_GT(differ, 0);
}

// Ties go to the lower index: equal weights take turns, source 0 first.
TEST(MixtureSchedule, TiesGoToTheLowerSource) {
  MixtureSchedule m({2, 2, 2});
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(m.pick(i), (MixtureSchedule::Pick{i % 3, i / 3})) << i;
}

TEST(MixtureSchedule, OneSourceIsTheIdentity) {
  MixtureSchedule m({0.25});
  for (int64_t i : {int64_t(0), int64_t(1), int64_t(12345), int64_t(1) << 40}) {
    EXPECT_EQ(m.pick(i), (MixtureSchedule::Pick{0, i}));
    EXPECT_EQ(m.counts(i), std::vector<int64_t>{i});
  }
}

// Picks in any order (forward jumps, back across snapshots) equal the sequential walk.
TEST(MixtureSchedule, RandomAccessEqualsSequential) {
  const std::vector<double> w = {0.7, 0.2, 0.1};
  const int64_t n = 3 * MixtureSchedule::kStride + 1000;
  MixtureSchedule seq(w);
  std::vector<MixtureSchedule::Pick> all;
  for (int64_t i = 0; i < n; ++i) all.push_back(seq.pick(i));
  MixtureSchedule r(w);
  uint64_t x = 12345;
  for (int k = 0; k < 200; ++k) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const auto i = int64_t((x >> 17) % uint64_t(n));
    ASSERT_EQ(r.pick(i), all[size_t(i)]) << "sample " << i << " after " << k << " jumps";
  }
  MixtureSchedule late(w);  // a resume: the first access is far in
  EXPECT_EQ(late.pick(n - 1), all.back());
  EXPECT_EQ(late.pick(5), all[5]);
}

TEST(MixtureSchedule, BadWeightsAreRefused) {
  for (const auto& w : std::vector<std::vector<double>>{{}, {1, 0}, {-1}, {NAN, 1}, {INFINITY}, {1e308, 1e308}})
    EXPECT_THROW(MixtureSchedule{w}, Error);
}

// One source: DataMixture hands out TokenDataset::fill_batch's samples.
TEST(DataMixture, OneSourceIsTheOrderWithoutAMixture) {
  const std::string dir = make_source(0, 300);  // 37 windows: steps cross epochs
  std::vector<TokenDataset> one;
  one.push_back(source(dir, 0, 8));
  DataMixture m(std::move(one), {1.0}, 8);
  TokenDataset plain = source(dir, 0, 8);
  for (int64_t step = 0; step < 12; ++step) {
    std::vector<int32_t> in(8 * kT), tg(8 * kT);
    plain.fill_batch(step, 0, 8, in.data(), tg.data());
    in.insert(in.end(), tg.begin(), tg.end());
    ASSERT_EQ(fill(m, step, 0, 8), in) << "step " << step;
  }
}

// Two sources: any split of a step (dp ranks, microbatches) gives the
// step's samples, each from the source the schedule picks, each source's
// epoch visits each of its windows once, in an order of its own.
TEST(DataMixture, SlicesOfAStepEqualTheWholeAndSourcesKeepTheirWindows) {
  constexpr int64_t kBatch = 12, kSteps = 20, kBase = 10000;
  const std::string a = make_source(0, 200), b = make_source(kBase, 120);  // 24 and 14 windows
  auto mixture = [&] {
    std::vector<TokenDataset> s;
    s.push_back(source(a, 0, kBatch));
    s.push_back(source(b, 1, kBatch));
    return DataMixture(std::move(s), {2, 1}, kBatch);
  };
  DataMixture whole = mixture(), split = mixture();
  MixtureSchedule schedule({2, 1});
  std::vector<std::vector<int64_t>> windows(2);  // each source's windows, in the order read
  for (int64_t step = 0; step < kSteps; ++step) {
    const std::vector<int32_t> all = fill(whole, step, 0, kBatch);
    std::vector<int32_t> parts;
    for (int64_t first : {0, 4, 8})  // dp 3 x 1 microbatch of 4, or dp 1 x 3
      for (int64_t half : {0, 2}) {
        std::vector<int32_t> p = fill(split, step, first + half, 2);
        parts.insert(parts.end(), p.begin(), p.begin() + 2 * kT);
      }
    const std::vector<int32_t> inputs(all.begin(), all.begin() + kBatch * kT);
    ASSERT_EQ(parts, inputs) << "step " << step;
    for (int64_t g = 0; g < kBatch; ++g) {
      const int32_t first_token = inputs[size_t(g * kT)];
      const int64_t src = first_token >= kBase;
      ASSERT_EQ(src, schedule.pick(step * kBatch + g).source) << "step " << step << " sample " << g;
      windows[size_t(src)].push_back((first_token - (src ? kBase : 0)) / kT);
    }
  }
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t n = whole.source(size_t(s)).n_windows();
    const auto& w = windows[size_t(s)];
    ASSERT_GE(int64_t(w.size()), 2 * n) << "source " << s << " read fewer than two epochs";
    for (int64_t e = 0; e < 2; ++e) {
      std::set<int64_t> epoch(w.begin() + e * n, w.begin() + (e + 1) * n);
      EXPECT_EQ(int64_t(epoch.size()), n) << "source " << s << " epoch " << e;
    }
  }
  // Source 1's order is its own, not source 0's permutation of the same size.
  EXPECT_NE(window_permutation(99, 0, 14, 1), window_permutation(99, 0, 14, 0));
  EXPECT_EQ(window_permutation(99, 0, 14, 1), window_permutation(99, 0, 14, 1));
}

// A fresh mixture asked for a late step (a resume) gives what one that read
// every step before it gives.
TEST(DataMixture, ALateStepEqualsTheSequentialRun) {
  const std::string a = make_source(0, 200), b = make_source(10000, 120);
  auto mixture = [&] {
    std::vector<TokenDataset> s;
    s.push_back(source(a, 0, 8));
    s.push_back(source(b, 1, 8));
    return DataMixture(std::move(s), {0.3, 0.7}, 8);
  };
  DataMixture seq = mixture();
  std::vector<int32_t> last;
  for (int64_t step = 0; step <= 40; ++step) last = fill(seq, step, 0, 8);
  DataMixture resumed = mixture();
  EXPECT_EQ(fill(resumed, 40, 0, 8), last);
  EXPECT_THROW(fill(resumed, 0, 6, 3), Error);  // outside the global batch
}
