#include <gtest/gtest.h>

#include "data/utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <random>
#include <string>
#include <vector>

using namespace lattice::data;

namespace {

// PCRE2's own verdict: the offset of the first invalid character, or the
// length when the whole string is valid UTF-8. The tokenizer hands valid runs
// to PCRE2 with PCRE2_NO_UTF_CHECK, so both must agree exactly.
size_t pcre2_valid_prefix(const std::string& s) {
  int err;
  PCRE2_SIZE off;
  static pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(""), 0, PCRE2_UTF, &err, &off, nullptr);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr);
  size_t result = s.size();
  if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) result = pcre2_get_startchar(md);
  pcre2_match_data_free(md);
  return result;
}

}  // namespace

TEST(Utf8, ValidTextIsAcceptedWhole) {
  for (const std::string& s : std::vector<std::string>{
           "", "plain ascii", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\xa4\x97 emoji",
           "\xf4\x8f\xbf\xbf max", "\xed\x9f\xbf below surrogates", std::string("nul\0inside", 10)})
    EXPECT_EQ(utf8_valid_prefix(s), s.size()) << s;
}

TEST(Utf8, InvalidSequencesStopThePrefix) {
  struct Case {
    std::string text;
    size_t prefix;
  };
  const Case cases[] = {
      {"ab\xff", 2},            // never valid
      {"ab\x80z", 2},           // lone continuation byte
      {"\xc0\xaf", 0},          // overlong '/'
      {"\xc1\xbf", 0},          // overlong
      {"\xe0\x80\xaf", 0},      // overlong 3-byte
      {"\xf0\x80\x80\xaf", 0},  // overlong 4-byte
      {"x\xed\xa0\x80", 1},     // UTF-16 surrogate U+D800
      {"\xf4\x90\x80\x80", 0},  // above U+10FFFF
      {"\xf5\x80\x80\x80", 0},  // lead byte beyond F4
      {"abc\xe6\x97", 3},       // truncated at the end
      {"\xe6\x97z", 0},         // truncated before ASCII
      {"\xc3\xa9\xc3", 2},      // valid then truncated
  };
  for (const auto& c : cases) EXPECT_EQ(utf8_valid_prefix(c.text), c.prefix) << c.text;
}

TEST(Utf8, AgreesWithPcre2OnRandomBytes) {
  std::mt19937 rng(7);
  // Bias toward bytes that form (and nearly form) multi-byte sequences.
  const unsigned char pool[] = {'a',  ' ',  '\n', 0x00, 0x7f, 0x80, 0x8f, 0x90,
                                0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0,
                                0xe6, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff};
  for (int trial = 0; trial < 20000; ++trial) {
    std::string s;
    int n = int(rng() % 12);
    for (int i = 0; i < n; ++i) s.push_back(char(pool[rng() % sizeof(pool)]));
    ASSERT_EQ(utf8_valid_prefix(s), pcre2_valid_prefix(s)) << "trial " << trial;
  }
}

TEST(Utf8, AppendEncodesEveryLength) {
  std::string s;
  for (uint32_t cp : {0x41u, 0xE9u, 0x65E5u, 0x1F917u}) append_utf8(cp, s);
  EXPECT_EQ(s, "A\xc3\xa9\xe6\x97\xa5\xf0\x9f\xa4\x97");
  EXPECT_EQ(utf8_valid_prefix(s), s.size());
}
