#include <gtest/gtest.h>

#include <random>

#include "data/tokenizer.h"
#include "support/error_text.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::data;
using lattice::test::error_text;

TEST(BytesTokenizer, OneTokenPerByteAndEotAfterThem) {
  auto tok = make_tokenizer("bytes", "");
  EXPECT_EQ(tok->name(), "bytes");
  EXPECT_EQ(tok->base_vocab_size(), 256);
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_EQ(tok->eot_id(), 256);
  EXPECT_EQ(tok->special_id("<|endoftext|>"), 256);
  ASSERT_EQ(tok->special_tokens().size(), 1u);
  EXPECT_EQ(tok->encode("Az\xff"), (std::vector<int32_t>{65, 122, 255}));
  std::vector<int32_t> ids = {104, 105, 256, 0};
  EXPECT_EQ(tok->decode(ids), std::string("hi<|endoftext|>\0", 16));
}

TEST(BytesTokenizer, LiteralEndOfTextIsOrdinaryText) {
  auto tok = make_tokenizer("bytes", "");
  auto ids = tok->encode("<|endoftext|>");
  EXPECT_EQ(ids.size(), 13u);
  for (int32_t id : ids) EXPECT_LT(id, 256);
}

TEST(BytesTokenizer, RoundTripsArbitraryBytes) {
  auto tok = make_tokenizer("bytes", "");
  std::mt19937 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = char(rng());
    ASSERT_EQ(tok->decode(tok->encode(s)), s);
  }
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tok = make_tokenizer("bytes", "");
  std::vector<int32_t> ids = {65, 257};
  std::string msg = error_text([&] { tok->decode(ids); });
  EXPECT_HAS(msg, "tokenizer bytes: cannot decode id 257: outside the vocabulary [0, 257)");
  ids = {-1};
  msg = error_text([&] { tok->decode(ids); });
  EXPECT_HAS(msg, "id -1");
}

TEST(Tokenizer, UnknownSpecialTokenListsTheKnownOnes) {
  auto tok = make_tokenizer("bytes", "");
  EXPECT_FALSE(tok->find_special("[MASK]").has_value());
  std::string msg = error_text([&] { tok->special_id("[MASK]"); });
  EXPECT_HAS(msg, "no special token '[MASK]'");
  EXPECT_HAS(msg, "<|endoftext|>");
}

TEST(Tokenizer, FactoryRejectsUnknownNames) {
  std::string msg = error_text([] { make_tokenizer("sentencepiece", ""); });
  EXPECT_EQ(msg, "unknown tokenizer 'sentencepiece'; expected gpt2 or bytes");
}

TEST(Tokenizer, FactoryNamesTheMissingVocabFile) {
  std::string dir = test::make_temp_dir("tok");
  std::string msg = error_text([&] { make_tokenizer("gpt2", dir); });
  EXPECT_HAS(msg, dir + "/encoder.json not found");
  EXPECT_HAS(msg, "vocab_dir");
  msg = error_text([] { make_tokenizer("gpt2", ""); });
  EXPECT_HAS(msg, "no vocab dir given");
}

TEST(Tokenizer, FactoryBuildsGpt2FromTheSharedVocab) {
  LATTICE_REQUIRE_SHARED("data/gpt2-bpe/vocab.bpe");
  auto tok = make_tokenizer("gpt2", test::shared_dir() + "/data/gpt2-bpe");
  EXPECT_EQ(tok->name(), "gpt2");
  EXPECT_EQ(tok->vocab_size(), 50257);
}
