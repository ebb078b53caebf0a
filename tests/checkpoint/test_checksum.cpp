// Checksum64 is XXH64 with seed 0: the expected digests below come from the
// reference `xxhash` Python package (xxhash.xxh64_hexdigest(data, seed=0)).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint_test_util.h"
#include "support/test_support.h"

namespace lattice::checkpoint {
namespace {

std::string bytes_0_to(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(char(i));
  return s;
}

TEST(Checksum64, MatchesReferenceXxh64) {
  struct Case {
    std::string data;
    const char* hex;
  };
  std::string kb;
  for (int r = 0; r < 4; ++r) kb += bytes_0_to(256);
  std::vector<Case> cases = {
      {"", "ef46db3751d8e999"},
      {"a", "d24ec4f1a98c6e5b"},
      {"abc", "44bc2cf5ad770999"},
      {"0123456789abcdef0123456789abcdef", "642a94958e71e6c5"},
      {bytes_0_to(31), "c346d2b59b4d8ee1"},
      {bytes_0_to(36), "dde0ef85e3aef05c"},
      {kb + "xyz", "e146cb31b65bc21a"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(checksum_hex(checksum64(c.data.data(), c.data.size())), c.hex) << "length " << c.data.size();
}

TEST(Checksum64, StreamingInAnySplitEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(char((i * 131 + 7) & 0xff));
  uint64_t whole = checksum64(data.data(), data.size());
  for (size_t piece : {1, 3, 7, 31, 32, 33, 100, 999}) {
    Checksum64 sum;
    for (size_t at = 0; at < data.size(); at += piece) sum.update(data.data() + at, std::min(piece, data.size() - at));
    EXPECT_EQ(sum.digest(), whole) << "pieces of " << piece;
    EXPECT_EQ(sum.bytes(), data.size());
  }
  data[500] ^= 1;
  EXPECT_NE(checksum64(data.data(), data.size()), whole) << "one flipped bit must change the digest";
}

TEST(Checksum64, DigestFileReadsEveryByte) {
  std::string dir = test::make_temp_dir("checksum");
  std::string data(size_t(9) << 20, '\0');  // larger than one 8 MiB read
  for (size_t i = 0; i < data.size(); ++i) data[i] = char((i * 2654435761u) >> 13);
  test::write_bytes(dir + "/f", data);
  FileDigest d = digest_file(dir + "/f");
  EXPECT_EQ(d.size, data.size());
  EXPECT_EQ(d.checksum, checksum64(data.data(), data.size()));
  std::string msg = test::error_text([&] { digest_file(dir + "/absent"); });
  EXPECT_HAS(msg, dir + "/absent");
}

TEST(Checksum64, HexRoundTripAndRejects) {
  uint64_t v = 0;
  ASSERT_TRUE(parse_checksum_hex(checksum_hex(0x0123456789abcdefull), v));
  EXPECT_EQ(v, 0x0123456789abcdefull);
  EXPECT_EQ(checksum_hex(1), "0000000000000001");
  for (const char* bad : {"", "123", "0123456789ABCDEF", "0123456789abcdeg", "0123456789abcdef0"})
    EXPECT_FALSE(parse_checksum_hex(bad, v)) << bad;
}

}  // namespace
}  // namespace lattice::checkpoint
