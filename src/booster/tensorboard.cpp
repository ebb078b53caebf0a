#include "booster/tensorboard.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

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

namespace {

// The step of a serialized Event (0 when absent, as protobuf reads it);
// nullopt when the bytes are not a well-formed message.
std::optional<int64_t> event_step(std::string_view e) {
  size_t i = 0;
  auto varint = [&]() -> std::optional<uint64_t> {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && i < e.size(); shift += 7) {
      const auto b = uint8_t(e[i++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return std::nullopt;
  };
  int64_t step = 0;
  while (i < e.size()) {
    const std::optional<uint64_t> key = varint();
    if (!key) return std::nullopt;
    const uint64_t field = *key >> 3, wire = *key & 7;
    if (wire == 0) {
      const std::optional<uint64_t> v = varint();
      if (!v) return std::nullopt;
      if (field == 2) step = int64_t(*v);
    } else if (wire == 1 || wire == 5) {
      i += wire == 1 ? 8 : 4;
    } else if (wire == 2) {
      const std::optional<uint64_t> n = varint();
      if (!n || *n > e.size() - i) return std::nullopt;
      i += size_t(*n);
    } else {
      return std::nullopt;
    }
  }
  if (i != e.size()) return std::nullopt;
  return step;
}

}  // namespace

int64_t truncate_event_files(const std::string& dir, int64_t last_step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t dropped = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (!entry.is_regular_file(ec) || entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    std::ifstream in(path, std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string kept;
    int64_t dropped_here = 0;
    size_t i = 0;
    while (i < all.size()) {
      uint64_t len = 0;
      if (all.size() - i >= 16) std::memcpy(&len, all.data() + i, 8);
      std::optional<int64_t> step;
      if (all.size() - i >= 16 && len <= all.size() - i - 16)
        step = event_step(std::string_view(all).substr(i + 12, size_t(len)));
      if (!step) {  // cut short (or not ours): it and anything after it go
        ++dropped_here;
        break;
      }
      const size_t size = 16 + size_t(len);
      if (*step <= last_step)
        kept.append(all, i, size);
      else
        ++dropped_here;
      i += size;
    }
    if (dropped_here == 0) continue;
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(kept.data(), std::streamsize(kept.size()));
      LATTICE_CHECK(out.good(), "log.tensorboard: cannot write '{}'", tmp);
    }
    fs::rename(tmp, path);
    dropped += dropped_here;
  }
  return dropped;
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
  errno = 0;
  if (std::fwrite(rec.data(), 1, rec.size(), f_) == rec.size() && std::fflush(f_) == 0) return;
  LATTICE_INPUT_FAIL("log.tensorboard: cannot write '{}': {} — free space (or fix the disk) and start the same command "
                     "again: it resumes from the last checkpoint",
                     path_, errno ? std::strerror(errno) : "write error");
}

}  // namespace lattice
