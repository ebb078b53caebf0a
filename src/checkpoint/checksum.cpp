#include "checkpoint/checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

#include "checkpoint/posix_file.h"
#include "core/error.h"

namespace lattice::checkpoint {

namespace {

static_assert(std::endian::native == std::endian::little, "Checksum64 reads words as little-endian");

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t lane_round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}

uint64_t merge_lane(uint64_t h, uint64_t lane) {
  h ^= lane_round(0, lane);
  return h * kP1 + kP4;
}

// Consumes whole 32-byte stripes from p; returns the bytes consumed.
size_t consume_stripes(uint64_t lanes[4], const unsigned char* p, size_t n) {
  uint64_t v0 = lanes[0], v1 = lanes[1], v2 = lanes[2], v3 = lanes[3];
  size_t done = 0;
  for (; done + 32 <= n; done += 32) {
    v0 = lane_round(v0, load64(p + done));
    v1 = lane_round(v1, load64(p + done + 8));
    v2 = lane_round(v2, load64(p + done + 16));
    v3 = lane_round(v3, load64(p + done + 24));
  }
  lanes[0] = v0, lanes[1] = v1, lanes[2] = v2, lanes[3] = v3;
  return done;
}

}  // namespace

Checksum64::Checksum64() {
  lanes_[0] = kP1 + kP2;
  lanes_[1] = kP2;
  lanes_[2] = 0;
  lanes_[3] = 0 - kP1;
}

void Checksum64::update(const void* data, size_t bytes) {
  auto* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (stripe_used_ > 0) {  // finish the pending stripe first
    size_t take = std::min(bytes, 32 - stripe_used_);
    std::memcpy(stripe_ + stripe_used_, p, take);
    stripe_used_ += take, p += take, bytes -= take;
    if (stripe_used_ < 32) return;
    consume_stripes(lanes_, stripe_, 32);
    stripe_used_ = 0;
  }
  size_t done = consume_stripes(lanes_, p, bytes);
  std::memcpy(stripe_, p + done, bytes - done);
  stripe_used_ = bytes - done;
}

uint64_t Checksum64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = std::rotl(lanes_[0], 1) + std::rotl(lanes_[1], 7) + std::rotl(lanes_[2], 12) + std::rotl(lanes_[3], 18);
    for (uint64_t lane : lanes_) h = merge_lane(h, lane);
  } else {
    h = kP5;  // seed 0 + P5
  }
  h += total_;
  const unsigned char* p = stripe_;
  size_t n = stripe_used_;
  for (; n >= 8; n -= 8, p += 8) h = std::rotl(h ^ lane_round(0, load64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = std::rotl(h ^ (uint64_t(load32(p)) * kP1), 23) * kP2 + kP3;
    n -= 4, p += 4;
  }
  for (; n > 0; --n, ++p) h = std::rotl(h ^ (uint64_t(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t checksum64(const void* data, size_t bytes) {
  Checksum64 c;
  c.update(data, bytes);
  return c.digest();
}

FileDigest digest_file(const std::string& path) {
  PosixFile file = PosixFile::open_read(path);
  ::posix_fadvise(file.fd(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<unsigned char> buf(size_t(8) << 20);
  Checksum64 sum;
  for (;;) {
    size_t got = file.read_some(buf.data(), buf.size());
    if (got == 0) break;
    sum.update(buf.data(), got);
  }
  return {sum.bytes(), sum.digest()};
}

std::string checksum_hex(uint64_t checksum) { return fmt::format("{:016x}", checksum); }

bool parse_checksum_hex(std::string_view text, uint64_t& out) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | uint64_t(d);
  }
  out = v;
  return true;
}

}  // namespace lattice::checkpoint
