// Checksum64: the 64-bit checksum of checkpoint manifests.
//
// The algorithm is XXH64 (seed 0), implemented here from its public
// specification: four independent 64-bit lanes consume 32-byte stripes, so
// it runs at memory speed (several GB/s per core) and is far cheaper than the
// disk write it guards. It detects corruption and truncation, not tampering.
// Digests are written as 16 lowercase hex digits; XXH64("") = ef46db3751d8e999,
// so any xxhash tool can cross-check a manifest.
//
// Invariants: streaming is exact -- update() in any split of the same bytes
// gives the same digest as one call over all of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lattice::checkpoint {

class Checksum64 {
 public:
  Checksum64();
  void update(const void* data, size_t bytes);
  uint64_t digest() const;  // the state is unchanged: more update() calls may follow
  uint64_t bytes() const { return total_; }

 private:
  uint64_t lanes_[4];
  unsigned char stripe_[32];  // a partial stripe, stripe_used_ bytes long
  size_t stripe_used_ = 0;
  uint64_t total_ = 0;
};

uint64_t checksum64(const void* data, size_t bytes);

// A file's size and checksum, as a manifest records them.
struct FileDigest {
  uint64_t size = 0;
  uint64_t checksum = 0;
  bool operator==(const FileDigest&) const = default;
};

// Reads the whole file in large sequential chunks. Errors name the file.
FileDigest digest_file(const std::string& path);

std::string checksum_hex(uint64_t checksum);  // 16 lowercase hex digits
// Parses checksum_hex's output; false on anything else.
bool parse_checksum_hex(std::string_view text, uint64_t& out);

}  // namespace lattice::checkpoint
