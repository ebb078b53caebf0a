#include "booster/tensorboard.h"

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace lattice {

namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}

// Protobuf wire format: the few pieces an Event of scalars needs.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86, arm64)
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view s) {
  put_key(out, field, 2);
  put_varint(out, s.size());
  out.append(s);
}

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string scalar_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, 5);
    put_fixed(v, value);
    put_bytes(summary, 1, v);
  }
  std::string event;
  put_key(event, 1, 1);
  put_fixed(event, wall_time);
  put_key(event, 2, 0);
  put_varint(event, uint64_t(step));
  put_bytes(event, 5, summary);
  return event;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LATTICE_CHECK(!ec, "log.tensorboard: cannot create '{}': {}", dir, ec.message());
  path_ = dir + "/events.out.tfevents." + std::to_string(int64_t(now_s())) + "." + host_name();
  f_ = std::fopen(path_.c_str(), "ab");
  LATTICE_CHECK(f_ != nullptr, "log.tensorboard: cannot open '{}' for writing", path_);
  std::string first;
  put_key(first, 1, 1);
  put_fixed(first, now_s());
  put_bytes(first, 3, "brain.Event:2");
  write_record(first);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  write_record(scalar_event(now_s(), step, values));
}

void TensorBoardWriter::write_record(std::string_view data) {
  std::string rec;
  const uint64_t len = data.size();
  put_fixed(rec, len);
  put_fixed(rec, masked_crc32c(rec.data(), 8));
  rec.append(data);
  put_fixed(rec, masked_crc32c(data.data(), data.size()));
  LATTICE_CHECK(std::fwrite(rec.data(), 1, rec.size(), f_) == rec.size() && std::fflush(f_) == 0,
                "log.tensorboard: cannot write '{}'", path_);
}

}  // namespace lattice
