#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/loader.h"
#include "support/error_text.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::data;
using lattice::test::error_text;

namespace {

constexpr int64_t kT = 8;

// Two shards whose token at stream position p is p, so a window is known by
// its first input token: window w starts with w * T. Written out of order to
// check that shards are read in sorted path order.
std::string make_stream(int64_t n_first, int64_t n_second) {
  std::string dir = test::make_temp_dir("loader");
  std::vector<int32_t> a(static_cast<size_t>(n_first)), b(static_cast<size_t>(n_second));
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), int32_t(n_first));
  write_shard(dir + "/d_train_000001.bin", b);
  write_shard(dir + "/d_train_000000.bin", a);
  return dir;
}

TokenDatasetOptions options(const std::string& dir, uint64_t seed = 1234,
                            int64_t global_batch = 8) {
  TokenDatasetOptions o;
  o.pattern = dir + "/d_train_*.bin";
  o.name = "data.train";
  o.vocab_size = 50257;
  o.seq_len = kT;
  o.global_batch = global_batch;
  o.seed = seed;
  return o;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch fill(TokenDataset& d, int64_t step, int64_t first, int64_t count) {
  Batch b{std::vector<int32_t>(size_t(count * kT)), std::vector<int32_t>(size_t(count * kT))};
  d.fill_batch(step, first, count, b.inputs.data(), b.targets.data());
  return b;
}

}  // namespace

TEST(TokenDataset, StreamIsTheSortedShardsConcatenated) {
  std::string dir = make_stream(100, 150);
  TokenDataset d(options(dir));
  EXPECT_EQ(d.n_tokens(), 250);
  EXPECT_EQ(d.n_windows(), (250 - 1) / kT);
  EXPECT_EQ(d.shard_paths(),
            (std::vector<std::string>{dir + "/d_train_000000.bin", dir + "/d_train_000001.bin"}));
  std::vector<int32_t> got(20);
  d.read_tokens(90, 110, got.data());  // across the shard boundary
  for (int i = 0; i < 20; ++i) EXPECT_EQ(got[size_t(i)], 90 + i);
}

TEST(TokenDataset, WindowsAreTPlusOneTokensAtStrideT) {
  std::string dir = make_stream(100, 150);
  TokenDataset d(options(dir, 7, 31));
  Batch b = fill(d, 0, 0, 31);
  for (int64_t s = 0; s < 31; ++s) {
    int32_t start = b.inputs[size_t(s * kT)];
    ASSERT_EQ(start % kT, 0);
    for (int64_t t = 0; t < kT; ++t) {
      ASSERT_EQ(b.inputs[size_t(s * kT + t)], start + t);
      ASSERT_EQ(b.targets[size_t(s * kT + t)], start + t + 1);
    }
  }
}

TEST(TokenDataset, SameSeedAndStepGiveTheSameBatch) {
  std::string dir = make_stream(100, 150);
  TokenDataset a(options(dir)), b(options(dir)), other(options(dir, 99));
  for (int64_t step : {0, 3, 7, 1, 0}) EXPECT_EQ(fill(a, step, 0, 8), fill(b, step, 0, 8)) << step;
  EXPECT_NE(fill(a, 0, 0, 8), fill(other, 0, 0, 8));
  EXPECT_NE(fill(a, 0, 0, 8), fill(a, 1, 0, 8));
}

TEST(TokenDataset, AnySplitOfTheGlobalBatchGivesTheSameSequences) {
  std::string dir = make_stream(100, 150);
  TokenDataset whole(options(dir)), halves(options(dir)), singles(options(dir));
  for (int64_t step = 0; step < 10; ++step) {  // crosses epochs: 31 windows, 8 per step
    Batch all = fill(whole, step, 0, 8);
    Batch lo = fill(halves, step, 0, 4), hi = fill(halves, step, 4, 4);
    lo.inputs.insert(lo.inputs.end(), hi.inputs.begin(), hi.inputs.end());
    lo.targets.insert(lo.targets.end(), hi.targets.begin(), hi.targets.end());
    EXPECT_EQ(all, lo) << "step " << step;
    Batch one;
    for (int64_t g = 7; g >= 0; --g) {  // in reverse: order of requests does not matter
      Batch x = fill(singles, step, g, 1);
      one.inputs.insert(one.inputs.begin(), x.inputs.begin(), x.inputs.end());
      one.targets.insert(one.targets.begin(), x.targets.begin(), x.targets.end());
    }
    EXPECT_EQ(all, one) << "step " << step;
  }
}

TEST(TokenDataset, EachEpochVisitsEveryWindowOnce) {
  std::string dir = make_stream(100, 150);
  TokenDataset d(options(dir, 5, 4));
  const int64_t n = d.n_windows();
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t i = 0; i < n; ++i) epoch0.push_back(d.train_window(i));
  for (int64_t i = n; i < 2 * n; ++i) epoch1.push_back(d.train_window(i));
  EXPECT_NE(epoch0, epoch1);  // a fresh shuffle per epoch
  for (auto* e : {&epoch0, &epoch1}) {
    std::vector<int64_t> sorted = *e;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t w = 0; w < n; ++w) ASSERT_EQ(sorted[size_t(w)], w);
  }
  std::vector<int64_t> identity(static_cast<size_t>(n));
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epoch0, identity);
  // fill_batch agrees with train_window: step s, sample g is index s * 4 + g.
  Batch b = fill(d, 2, 1, 2);
  EXPECT_EQ(b.inputs[0], d.train_window(9) * kT);
  EXPECT_EQ(b.inputs[size_t(kT)], d.train_window(10) * kT);
}

TEST(TokenDataset, WindowPermutationIsAPureFunctionOfSeedAndEpoch) {
  auto p = window_permutation(42, 3, 1000);
  EXPECT_EQ(p, window_permutation(42, 3, 1000));
  EXPECT_NE(p, window_permutation(43, 3, 1000));
  EXPECT_NE(p, window_permutation(42, 4, 1000));
  EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()).size(), 1000u);
  EXPECT_EQ(*std::max_element(p.begin(), p.end()), 999);
  // Roughly uniform: each window lands in the first half about half the time.
  int64_t first_half = 0;
  for (int64_t e = 0; e < 200; ++e) {
    auto q = window_permutation(1, e, 10);
    first_half += std::find(q.begin(), q.end(), 0) - q.begin() < 5;
  }
  EXPECT_GT(first_half, 70);
  EXPECT_LT(first_half, 130);
  EXPECT_EQ(window_permutation(1, 0, 1), std::vector<int64_t>{0});
}

TEST(TokenDataset, EvalWalksWindowsInOrderAndWraps) {
  std::string dir = make_stream(100, 150);
  TokenDataset d(options(dir, 1, 8));
  const int64_t n = d.n_windows();  // 31
  std::vector<int32_t> in(8 * kT), tg(8 * kT);
  for (int64_t batch = 0; batch < 5; ++batch) {
    d.fill_eval_batch(batch, 0, 8, in.data(), tg.data());
    for (int64_t s = 0; s < 8; ++s)
      ASSERT_EQ(in[size_t(s * kT)], ((batch * 8 + s) % n) * kT) << batch << " " << s;
  }
  d.fill_eval_batch(1, 6, 2, in.data(), tg.data());  // a slice of batch 1
  EXPECT_EQ(in[0], 14 * kT);
}

TEST(TokenDataset, TokenOutsideTheVocabularyIsRejected) {
  std::string dir = test::make_temp_dir("loader");
  std::vector<int32_t> tokens(200, 5);
  tokens[123] = 50300;
  tokens[150] = 60000;
  write_shard(dir + "/d_train_000000.bin", tokens);
  std::string msg = error_text([&] { TokenDataset d(options(dir)); });
  EXPECT_HAS(msg, "data.train: shard " + dir +
                      "/d_train_000000.bin token 123 has id 50300 >= "
                      "model.vocab_size 50257");
}

// A shard recording another tokenizer than data.tokenizer is refused with
// the fix; one recording none (llm.c's) is read as before.
TEST(TokenDataset, ShardOfAnotherTokenizerIsRejected) {
  std::string dir = test::make_temp_dir("loader");
  std::vector<int32_t> tokens(200, 5);
  write_shard(dir + "/d_train_000000.bin", tokens, "bytes");
  TokenDatasetOptions o = options(dir);
  o.tokenizer = "gpt2";
  EXPECT_HAS(error_text([&] { TokenDataset d(o); }),
             "data.train: shard " + dir +
                 "/d_train_000000.bin holds bytes tokens (lattice data prepare --tokenizer bytes), but "
                 "data.tokenizer is gpt2 — set data.tokenizer: bytes, or prepare the data again with --tokenizer gpt2");
  o.tokenizer = "bytes";
  EXPECT_EQ(TokenDataset(o).n_tokens(), 200);
  write_shard(dir + "/d_train_000000.bin", tokens);  // no record: not checked
  o.tokenizer = "gpt2";
  EXPECT_EQ(TokenDataset(o).n_tokens(), 200);
}

TEST(TokenDataset, GlobMatchingNothingIsNamed) {
  std::string dir = test::make_temp_dir("loader");
  TokenDatasetOptions o = options(dir);
  std::string msg = error_text([&] { TokenDataset d(o); });
  EXPECT_HAS(msg, "data.train: no file matches '" + o.pattern + "'");
  EXPECT_HAS(msg, "lattice data prepare");
}

TEST(TokenDataset, TooFewTokensForOneWindowIsAnError) {
  std::string dir = make_stream(5, 3);  // 8 tokens: one window needs T + 1 = 9
  std::string msg = error_text([&] { TokenDataset d(options(dir)); });
  EXPECT_HAS(msg, "hold 8 tokens, fewer than seq_len + 1 = 9");
  dir = make_stream(5, 4);
  EXPECT_EQ(TokenDataset(options(dir)).n_windows(), 1);
}

TEST(TokenDataset, SlicesOutsideTheGlobalBatchAreRejected) {
  std::string dir = make_stream(100, 150);
  TokenDataset d(options(dir));
  std::string msg = error_text([&] { fill(d, 0, 6, 4); });
  EXPECT_HAS(msg, "samples [6, 10) are outside the global batch of 8");
}
