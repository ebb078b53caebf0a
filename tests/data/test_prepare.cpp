#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "data/gpt2_tokenizer.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "support/error_text.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::data;
using lattice::test::error_text;

namespace {

std::string gpt2_dir() { return test::shared_dir() + "/data/gpt2-bpe"; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string write_text(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::vector<int32_t> read_shards(const std::vector<std::string>& paths) {
  std::vector<int32_t> ids;
  for (const auto& p : paths) {
    Shard s = Shard::open(p);
    ids.insert(ids.end(), s.tokens().begin(), s.tokens().end());
  }
  return ids;
}

// Text that exercises the split rule: many newlines, runs of blank lines,
// spaces and tabs around them, punctuation and letters.
std::string tricky_text(uint32_t seed, size_t n) {
  const char* parts[] = {"\n", "\n\n", " \n", "\n ", "word", "A", "z",        ":",
                         "!",  " ",    "  ",  "\t",  "'s",   "9", "\xc3\xa9", "\xe3\x80\x80"};
  std::mt19937 rng(seed);
  std::string s;
  while (s.size() < n) s += parts[rng() % (sizeof(parts) / sizeof(parts[0]))];
  return s;
}

}  // namespace

TEST(SplitForEncoding, CutsOnlyBetweenPrintableNewlinePrintable) {
  std::string text = tricky_text(1, 20000);
  auto pieces = split_for_encoding(text, 50);
  EXPECT_GT(pieces.size(), 50u);
  std::string joined;
  for (size_t i = 0; i < pieces.size(); ++i) {
    joined += pieces[i];
    if (i + 1 == pieces.size()) break;
    size_t cut = joined.size();
    ASSERT_GE(pieces[i].size(), 50u);
    ASSERT_EQ(text[cut - 1], '\n');
    ASSERT_TRUE(text[cut - 2] >= 0x21 && text[cut - 2] <= 0x7E) << cut;
    ASSERT_TRUE(text[cut] >= 0x21 && text[cut] <= 0x7E) << cut;
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(split_for_encoding("no newline at all", 2).size(), 1u);
  EXPECT_EQ(split_for_encoding("", 10).size(), 1u);
}

TEST(SplitForEncoding, ACutAfterTwoNewlinesWouldChangeTheEncoding) {
  LATTICE_REQUIRE_SHARED("data/gpt2-bpe/encoder.json");
  // Why the rule needs a non-space byte before the '\n': "a\n\nB" is
  // "a" "\n" "\n" "B", but "a\n\n" alone ends in the one piece "\n\n".
  Gpt2Tokenizer tok(gpt2_dir());
  auto whole = tok.encode("a\n\nB");
  auto left = tok.encode("a\n\n"), right = tok.encode("B");
  left.insert(left.end(), right.begin(), right.end());
  EXPECT_NE(whole, left);
  EXPECT_EQ(split_for_encoding("a\n\nB", 1).size(), 1u);
  EXPECT_EQ(split_for_encoding("a\nB", 1).size(), 2u);
}

TEST(EncodeParallel, EqualsSerialOnTinyShakespeare) {
  LATTICE_REQUIRE_SHARED("data/tinyshakespeare/input.txt");
  LATTICE_REQUIRE_SHARED("data/gpt2-bpe/encoder.json");
  Gpt2Tokenizer tok(gpt2_dir());
  std::string text = read_text(test::shared_dir() + "/data/tinyshakespeare/input.txt");
  auto serial = tok.encode(text);
  ASSERT_GT(split_for_encoding(text, 4096).size(), 200u);
  EXPECT_EQ(encode_parallel(tok, text, 4, 4096), serial);
  EXPECT_EQ(encode_parallel(tok, text, 3, 100), serial);
}

TEST(EncodeParallel, EqualsSerialOnTrickyWhitespace) {
  LATTICE_REQUIRE_SHARED("data/gpt2-bpe/encoder.json");
  Gpt2Tokenizer tok(gpt2_dir());
  for (uint32_t seed = 0; seed < 5; ++seed) {
    std::string text = tricky_text(seed, 30000);
    ASSERT_EQ(encode_parallel(tok, text, 4, 17), tok.encode(text)) << "seed " << seed;
  }
}

// Options that tokenize `inputs` with the bytes tokenizer into prefix dir/p.
PrepareOptions bytes_options(const std::string& dir, std::vector<std::string> inputs) {
  PrepareOptions o;
  o.inputs = std::move(inputs);
  o.tokenizer = "bytes";
  o.out_prefix = dir + "/p";
  return o;
}

TEST(PrepareData, JoinsDocumentsWithEotAndSplitsValThenTrain) {
  std::string dir = test::make_temp_dir("prepare");
  PrepareOptions o;
  o.inputs = {write_text(dir, "a.txt", "abc"), write_text(dir, "b.txt", "de"), write_text(dir, "c.txt", ""),
              write_text(dir, "d.txt", "f")};
  o.tokenizer = "bytes";
  o.out_prefix = dir + "/out/tiny";
  o.val_tokens = 3;
  o.shard_tokens = 2;
  o.threads = 2;
  PrepareSummary s = prepare_data(o);

  // a b c EOT d e EOT EOT f: no EOT before the first document or after the last.
  const std::vector<int32_t> stream = {'a', 'b', 'c', 256, 'd', 'e', 256, 256, 'f'};
  EXPECT_EQ(s.documents, 4);
  EXPECT_EQ(s.input_bytes, 6);
  EXPECT_EQ(s.vocab_size, 257);
  EXPECT_EQ(s.val_tokens, 3);
  EXPECT_EQ(s.train_tokens, 6);
  EXPECT_EQ(s.val_shards,
            (std::vector<std::string>{o.out_prefix + "_val_000000.bin", o.out_prefix + "_val_000001.bin"}));
  ASSERT_EQ(s.train_shards.size(), 3u);
  EXPECT_EQ(s.train_shards[2], o.out_prefix + "_train_000002.bin");
  EXPECT_EQ(Shard::open(s.val_shards[0]).size(), 2);
  EXPECT_EQ(Shard::open(s.val_shards[1]).size(), 1);  // the val split ends its last shard
  for (const auto& p : s.train_shards) EXPECT_EQ(Shard::open(p).size(), 2);
  for (const auto* list : {&s.val_shards, &s.train_shards})
    for (const auto& p : *list) EXPECT_EQ(Shard::open(p).tokenizer(), "bytes") << p;  // recorded in the header
  EXPECT_EQ(read_shards(s.val_shards), std::vector<int32_t>(stream.begin(), stream.begin() + 3));
  EXPECT_EQ(read_shards(s.train_shards), std::vector<int32_t>(stream.begin() + 3, stream.end()));
}

TEST(PrepareData, NoValTokensMeansNoValShard) {
  std::string dir = test::make_temp_dir("prepare");
  PrepareOptions o = bytes_options(dir, {write_text(dir, "a.txt", "hello")});
  PrepareSummary s = prepare_data(o);
  EXPECT_TRUE(s.val_shards.empty());
  EXPECT_EQ(s.train_tokens, 5);
  EXPECT_FALSE(std::filesystem::exists(dir + "/p_val_000000.bin"));
  EXPECT_EQ(read_shards(s.train_shards), (std::vector<int32_t>{'h', 'e', 'l', 'l', 'o'}));
}

TEST(PrepareData, Gpt2ParallelShardsEqualSerialEncoding) {
  LATTICE_REQUIRE_SHARED("data/tinyshakespeare/input.txt");
  LATTICE_REQUIRE_SHARED("data/gpt2-bpe/encoder.json");
  std::string dir = test::make_temp_dir("prepare");
  std::string shakespeare = test::shared_dir() + "/data/tinyshakespeare/input.txt";
  PrepareOptions o;
  o.inputs = {shakespeare, write_text(dir, "second.txt", "Second document.\nIt ends here.")};
  o.tokenizer = "gpt2";
  o.vocab_dir = gpt2_dir();
  o.out_prefix = dir + "/ts";
  o.val_tokens = 32768;
  o.shard_tokens = 100000;
  o.threads = 4;
  o.chunk_bytes = 8192;
  PrepareSummary s = prepare_data(o);

  Gpt2Tokenizer tok(gpt2_dir());
  auto expected = tok.encode(read_text(shakespeare));
  expected.push_back(50256);
  auto second = tok.encode("Second document.\nIt ends here.");
  expected.insert(expected.end(), second.begin(), second.end());

  EXPECT_EQ(s.val_tokens, 32768);
  EXPECT_EQ(s.val_tokens + s.train_tokens, int64_t(expected.size()));
  ASSERT_EQ(s.train_shards.size(), 4u);  // 305257 + 1 + 9 train tokens, 100000 per shard
  EXPECT_EQ(Shard::open(s.train_shards[3]).size(), int64_t(expected.size()) - 32768 - 300000);
  auto all = read_shards(s.val_shards);
  auto train = read_shards(s.train_shards);
  all.insert(all.end(), train.begin(), train.end());
  EXPECT_EQ(all, expected);
}

TEST(PrepareData, MissingInputIsNamedAndNothingIsWritten) {
  std::string dir = test::make_temp_dir("prepare");
  PrepareOptions o = bytes_options(dir, {write_text(dir, "a.txt", "x"), dir + "/missing.txt"});
  std::string msg = error_text([&] { prepare_data(o); });
  EXPECT_EQ(msg, "data prepare: input file " + dir + "/missing.txt not found");
  EXPECT_FALSE(std::filesystem::exists(dir + "/p_train_000000.bin"));
}

TEST(PrepareData, BadOptionsAreOneLineErrors) {
  std::string dir = test::make_temp_dir("prepare");
  PrepareOptions o = bytes_options(dir, {write_text(dir, "a.txt", "x")});
  o.shard_tokens = 0;
  std::string msg = error_text([&] { prepare_data(o); });
  EXPECT_HAS(msg, "--shard-tokens 0");
  o.shard_tokens = 10;
  o.tokenizer = "wordpiece";
  msg = error_text([&] { prepare_data(o); });
  EXPECT_HAS(msg, "unknown tokenizer 'wordpiece'");
}

// Inputs that give nothing to train on are one line, and a prepare that fails
// leaves the shards of the last one that worked as they were (it writes
// PATH.tmp and renames only on success).
TEST(PrepareData, NothingToTrainOnIsAnErrorThatKeepsTheOldShards) {
  std::string dir = test::make_temp_dir("prepare");
  PrepareOptions o = bytes_options(dir, {write_text(dir, "a.txt", "hello world")});
  o.val_tokens = 4;
  const PrepareSummary good = prepare_data(o);
  const std::vector<int32_t> val = read_shards(good.val_shards), train = read_shards(good.train_shards);
  o.val_tokens = 11;  // every token
  EXPECT_EQ(error_text([&] { prepare_data(o); }),
            "data prepare: --val-tokens 11 takes all 11 tokens of the input, leaving none to train on — pass at most "
            "10");
  o.val_tokens = 4;
  o.inputs = {write_text(dir, "empty.txt", "")};
  EXPECT_HAS(error_text([&] { prepare_data(o); }), "the 1 input file(s) are empty");
  o.inputs = {dir};
  EXPECT_HAS(error_text([&] { prepare_data(o); }), "input " + dir + " is a directory — pass the files in it");
  EXPECT_EQ(read_shards(good.val_shards), val);
  EXPECT_EQ(read_shards(good.train_shards), train);
  for (const auto& e : std::filesystem::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
}

TEST(PrepareData, RemovesStaleNumberedShardsOfThePrefixOnly) {
  std::string dir = test::make_temp_dir("prepare");
  std::vector<int32_t> old = {1, 2};
  write_shard(dir + "/p_train_000007.bin", old);
  write_shard(dir + "/p_val_000003.bin", old);
  write_shard(dir + "/p_train_extra.bin", old);   // not a numbered shard: kept
  write_shard(dir + "/q_train_000007.bin", old);  // another prefix: kept
  PrepareOptions o = bytes_options(dir, {write_text(dir, "a.txt", "abc")});
  PrepareSummary s = prepare_data(o);
  EXPECT_EQ(s.removed_stale.size(), 2u);
  EXPECT_EQ(s.replaced, 0);  // no shard of this run's numbers existed
  // The same prepare again writes over its own shard (one train shard, no val).
  EXPECT_EQ(prepare_data(o).replaced, 1);
  EXPECT_FALSE(std::filesystem::exists(dir + "/p_train_000007.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/p_val_000003.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/p_train_000000.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/p_train_extra.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/q_train_000007.bin"));
}
