#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <vector>

#include "data/shard.h"
#include "support/error_text.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::data;
using lattice::test::error_text;

namespace {

// A file holding a header with the given fields followed by `tokens` uint16 values.
void write_raw(const std::string& path, int32_t magic, int32_t version, int32_t count,
               int n_tokens) {
  std::array<int32_t, 256> header{};
  header[0] = magic, header[1] = version, header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), sizeof(header));
  std::vector<uint16_t> tokens(size_t(n_tokens), 7);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

}  // namespace

TEST(Shard, RoundTripKeepsTokensAndWritesTheLlmcHeader) {
  std::string path = test::make_temp_dir("shard") + "/a.bin";
  std::vector<int32_t> tokens = {0, 1, 2, 50256, 65535, 300, 7};
  for (int i = 0; i < 5000; ++i) tokens.push_back((i * 7919) % 65536);
  write_shard(path, tokens);

  std::ifstream in(path, std::ios::binary);
  std::array<int32_t, 256> header{};
  in.read(reinterpret_cast<char*>(header.data()), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], int32_t(tokens.size()));
  for (size_t i = 3; i < header.size(); ++i) EXPECT_EQ(header[i], 0);

  Shard s = Shard::open(path);
  EXPECT_EQ(s.path(), path);
  ASSERT_EQ(s.size(), int64_t(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(int32_t(s.tokens()[i]), tokens[i]) << i;

  Shard moved = std::move(s);  // the mapping moves with it
  EXPECT_EQ(moved.tokens()[3], 50256);
  EXPECT_EQ(s.size(), 0);
}

// Lattice's writer records the tokenizer in two header ints llm.c leaves zero;
// a shard without them (llm.c's) records none.
TEST(Shard, HeaderRecordsTheTokenizerWhenGiven) {
  std::string dir = test::make_temp_dir("shard");
  std::vector<int32_t> tokens = {1, 2, 3};
  write_shard(dir + "/g.bin", tokens, "gpt2");
  write_shard(dir + "/b.bin", tokens, "bytes");
  write_shard(dir + "/n.bin", tokens);
  std::ifstream in(dir + "/g.bin", std::ios::binary);
  std::array<int32_t, 256> header{};
  in.read(reinterpret_cast<char*>(header.data()), sizeof(header));
  EXPECT_EQ(header[3], kShardTokenizerTag);
  EXPECT_EQ(header[4], 2);
  EXPECT_EQ(Shard::open(dir + "/g.bin").tokenizer(), "gpt2");
  EXPECT_EQ(Shard::open(dir + "/b.bin").tokenizer(), "bytes");
  EXPECT_EQ(Shard::open(dir + "/n.bin").tokenizer(), "");
  EXPECT_EQ(Shard::open(dir + "/g.bin").size(), 3);
  // A code this build does not know is a located error, not a guess.
  header[4] = 9;
  {
    std::fstream f(dir + "/g.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.write(reinterpret_cast<const char*>(header.data()), sizeof(header));
  }
  EXPECT_HAS(error_text([&] { Shard::open(dir + "/g.bin"); }), "tokenizer code 9");
  EXPECT_ANY_THROW(write_shard(dir + "/x.bin", tokens, "sentencepiece"));
}

TEST(Shard, StreamingWriterAppendsInPiecesAndAllowsEmptyShards) {
  std::string dir = test::make_temp_dir("shard");
  {
    ShardWriter w(dir + "/s.bin");
    std::vector<int32_t> a = {1, 2, 3}, b = {4, 5};
    w.append(a);
    w.append(b);
    EXPECT_EQ(w.tokens(), 5);
    w.close();
  }
  Shard s = Shard::open(dir + "/s.bin");
  ASSERT_EQ(s.size(), 5);
  EXPECT_EQ(s.tokens()[4], 5);

  write_shard(dir + "/empty.bin", {});
  EXPECT_EQ(Shard::open(dir + "/empty.bin").size(), 0);
}

TEST(Shard, WriterRejectsIdsThatDoNotFitUint16) {
  std::string path = test::make_temp_dir("shard") + "/big.bin";
  std::vector<int32_t> tokens = {5, 65536};
  std::string msg = error_text([&] { write_shard(path, tokens); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "token 1 has id 65536");
  std::vector<int32_t> negative = {-1};
  msg = error_text([&] { write_shard(path, negative); });
  EXPECT_HAS(msg, "id -1");
}

TEST(Shard, MissingFileIsNamed) {
  std::string path = test::make_temp_dir("shard") + "/absent.bin";
  std::string msg = error_text([&] { Shard::open(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "cannot open");
}

TEST(Shard, FileShorterThanTheHeaderIsRejected) {
  std::string path = test::make_temp_dir("shard") + "/short.bin";
  std::ofstream(path, std::ios::binary) << std::string(100, 'x');
  std::string msg = error_text([&] { Shard::open(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "100 bytes, shorter than the 1024-byte header");
  EXPECT_HAS(msg, "lattice data prepare");

  std::ofstream(path, std::ios::binary | std::ios::trunc);  // empty file
  msg = error_text([&] { Shard::open(path); });
  EXPECT_HAS(msg, "0 bytes");
}

TEST(Shard, BadMagicNamesFoundAndExpectedValues) {
  std::string path = test::make_temp_dir("shard") + "/magic.bin";
  write_raw(path, 12345, 1, 4, 4);
  std::string msg = error_text([&] { Shard::open(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "magic 12345");
  EXPECT_HAS(msg, "expected 20240520");
  EXPECT_HAS(msg, "regenerate it with `lattice data prepare`");
}

TEST(Shard, BadVersionIsRejected) {
  std::string path = test::make_temp_dir("shard") + "/version.bin";
  write_raw(path, 20240520, 2, 4, 4);
  std::string msg = error_text([&] { Shard::open(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "version 2, expected 1");
}

TEST(Shard, TokenCountInconsistentWithFileSizeIsRejected) {
  std::string dir = test::make_temp_dir("shard");
  write_raw(dir + "/truncated.bin", 20240520, 1, 10, 5);  // claims 10, holds 5
  std::string msg = error_text([&] { Shard::open(dir + "/truncated.bin"); });
  EXPECT_HAS(msg, dir + "/truncated.bin");
  EXPECT_HAS(msg, "header says 10 tokens (1044 bytes with the header)");
  EXPECT_HAS(msg, "file is 1034 bytes");

  write_raw(dir + "/long.bin", 20240520, 1, 3, 5);  // trailing garbage
  msg = error_text([&] { Shard::open(dir + "/long.bin"); });
  EXPECT_HAS(msg, "header says 3 tokens");
  write_raw(dir + "/negative.bin", 20240520, 1, -2, 0);
  msg = error_text([&] { Shard::open(dir + "/negative.bin"); });
  EXPECT_HAS(msg, "header says -2");
}
