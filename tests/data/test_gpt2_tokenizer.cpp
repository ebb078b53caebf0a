#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "data/gpt2_tokenizer.h"
#include "data/utf8.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::data;

namespace {

const Gpt2Tokenizer& gpt2() {
  static Gpt2Tokenizer tok(test::shared_dir() + "/data/gpt2-bpe");
  return tok;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

#define REQUIRE_VOCAB() LATTICE_REQUIRE_SHARED("data/gpt2-bpe/encoder.json")

}  // namespace

TEST(Gpt2ByteAlphabet, PrintableBytesStandForThemselvesOthersFollow256) {
  auto map = gpt2_byte_to_unicode();
  int fixed = 0;
  std::vector<bool> used(512, false);
  for (int b = 0; b < 256; ++b) {
    fixed += map[size_t(b)] == uint32_t(b);
    ASSERT_LT(map[size_t(b)], 512u);
    ASSERT_FALSE(used[map[size_t(b)]]) << "not one-to-one at byte " << b;
    used[map[size_t(b)]] = true;
  }
  EXPECT_EQ(fixed, 188);
  EXPECT_EQ(map[' '], 0x120u);   // 'Ġ', as in GPT-2's " world" -> "Ġworld"
  EXPECT_EQ(map['\n'], 0x10Au);  // 'Ċ'
  EXPECT_EQ(map[0], 0x100u);
  EXPECT_EQ(map[0xAD], 0x143u);  // the soft hyphen is the last one remapped
}

TEST(Gpt2Tokenizer, VocabularyLayoutMatchesGpt2) {
  REQUIRE_VOCAB();
  EXPECT_EQ(gpt2().base_vocab_size(), 50256);
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eot_id(), 50256);
  std::vector<int32_t> eot = {50256};
  EXPECT_EQ(gpt2().decode(eot), "<|endoftext|>");
}

TEST(Gpt2Tokenizer, HelloWorld) {
  REQUIRE_VOCAB();
  EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
}

TEST(Gpt2Tokenizer, KnownEncodings) {
  REQUIRE_VOCAB();
  // Expected ids obtained offline, once, from GPT-2's original encoder
  // algorithm (Python `regex` module, the released encoder.json/vocab.bpe);
  // tiktoken 0.14's gpt2 encoding (encode_ordinary) gives the same ids.
  struct Case {
    std::string text;
    std::vector<int32_t> ids;
  };
  const Case cases[] = {
      {"Hello, world! How's it going? I'm fine, they'll say.",
       {15496, 11, 995, 0, 1374, 338, 340, 1016, 30, 314, 1101, 3734, 11, 484, 1183, 910, 13}},
      {"  leading spaces\n\n\ntrailing   ", {220, 3756, 9029, 628, 198, 9535, 4386, 220, 220, 220}},
      {"na\u00efve caf\u00e9 r\u00e9sum\u00e9", {2616, 38776, 40304, 40560, 16345, 2634}},
      {"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
       {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"emoji \U0001F917\U0001F389 and \U0001F469\u200d\U0001F469\u200d\U0001F467",
       {368, 31370, 12520, 97, 245, 8582, 236, 231, 290, 50169, 102, 447, 235, 41840, 102, 447, 235,
        41840, 100}},
      {"e\u0301 combining a\u0308", {68, 136, 223, 19771, 257, 136, 230}},
      {"numbers 1234567 3.14159", {77, 17024, 17031, 2231, 3134, 513, 13, 1415, 19707}},
      {"tabs\tand\r\nwindows", {8658, 82, 197, 392, 201, 198, 28457}},
      {"\u00a0nbsp\u3000ideographic space\u2003em",
       {1849, 77, 24145, 5099, 222, 485, 6826, 2272, 447, 225, 368}},
      {"x\x1cy\x1d\x1e\x1fz\u0085w", {87, 216, 88, 217, 218, 219, 89, 126, 227, 86}},
      {"a\n\nB", {64, 198, 198, 33}},
      {"First Citizen:\nBefore we proceed any further, hear me speak.",
       {5962, 22307, 25, 198, 8421, 356, 5120, 597, 2252, 11, 3285, 502, 2740, 13}},
      // U+180E is not White_Space in Unicode (nor for GPT-2's regex), though PCRE2's \s takes it.
      {"\u180e'dY", {157, 254, 236, 6, 67, 56}},
  };
  for (const auto& c : cases) EXPECT_EQ(gpt2().encode(c.text), c.ids) << c.text;
}

TEST(Gpt2Tokenizer, LiteralEndOfTextIsEncodedAsOrdinaryText) {
  REQUIRE_VOCAB();
  // Like GPT-2's encoder and tiktoken's encode_ordinary: "<|", "endoftext", "|>".
  EXPECT_EQ(gpt2().encode("<|endoftext|>"),
            (std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29}));
}

TEST(Gpt2Tokenizer, PreTokenizationFollowsGpt2Pattern) {
  REQUIRE_VOCAB();
  auto pieces = gpt2().pretokenize("  leading spaces\n\n\ntrailing   it's");
  std::vector<std::string_view> expected = {" ",        " leading", " spaces", "\n\n", "\n",
                                            "trailing", "  ",       " it",     "'s"};
  EXPECT_EQ(pieces, expected);
  // Invalid UTF-8 bytes are pieces of their own; the valid runs around them
  // are pre-tokenized as usual.
  pieces = gpt2().pretokenize("ab\xff\xfe cd\xe6\x97");
  expected = {"ab", "\xff", "\xfe", " cd", "\xe6", "\x97"};
  EXPECT_EQ(pieces, expected);
}

TEST(Gpt2Tokenizer, TinyShakespeareHas338025Tokens) {
  LATTICE_REQUIRE_SHARED("data/tinyshakespeare/input.txt");
  REQUIRE_VOCAB();
  std::string text = read_text(test::shared_dir() + "/data/tinyshakespeare/input.txt");
  auto ids = gpt2().encode(text);
  EXPECT_EQ(ids.size(), 338025u);  // llm.c's tinyshakespeare: 32768 val + 305257 train
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 4),
            (std::vector<int32_t>{5962, 22307, 25, 198}));
  EXPECT_EQ(gpt2().decode(ids), text);
}

TEST(Gpt2Tokenizer, RoundTripsUnicodeText) {
  REQUIRE_VOCAB();
  for (const std::string& s : std::vector<std::string>{
           "", "a", " ", "\n\n\n", "\u00e9\u0301\u0308 stacked marks", "\u4e2d\u6587\u6d4b\u8bd5",
           "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family",
           "mixed \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea",
           std::string("nul\0byte", 8), "\U0010FFFF\uFFFD"}) {
    EXPECT_EQ(gpt2().decode(gpt2().encode(s)), s);
  }
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) {
      // Code points from every UTF-8 length; skip surrogates.
      uint32_t limits[] = {0x80, 0x800, 0x10000, 0x110000};
      uint32_t cp = rng() % limits[rng() % 4];
      if (cp >= 0xD800 && cp < 0xE000) cp = 'x';
      append_utf8(cp, s);
    }
    ASSERT_EQ(gpt2().decode(gpt2().encode(s)), s) << "trial " << trial;
  }
}

TEST(Gpt2Tokenizer, RoundTripsArbitraryBytesIncludingInvalidUtf8) {
  REQUIRE_VOCAB();
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    std::string s(rng() % 48, '\0');
    for (char& c : s) c = char(rng() % 3 == 0 ? ' ' : rng());
    auto ids = gpt2().encode(s);
    for (int32_t id : ids) ASSERT_LT(id, 50256);  // never the special token
    ASSERT_EQ(gpt2().decode(ids), s) << "trial " << trial;
  }
}

TEST(Gpt2Tokenizer, LongWhitespaceRunsDoNotExhaustTheMatcher) {
  REQUIRE_VOCAB();
  std::string s = "a" + std::string(200000, ' ') + "b" + std::string(100000, '\n');
  auto ids = gpt2().encode(s);
  EXPECT_EQ(gpt2().decode(ids), s);
  EXPECT_EQ(ids.front(), 64);  // "a"
}

TEST(Gpt2Tokenizer, ConcurrentEncodesAgree) {
  LATTICE_REQUIRE_SHARED("data/tinyshakespeare/input.txt");
  REQUIRE_VOCAB();
  std::string text =
      read_text(test::shared_dir() + "/data/tinyshakespeare/input.txt").substr(0, 200000);
  auto expected = gpt2().encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) threads.emplace_back([&] { g = gpt2().encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}
