#include "data/utf8.h"

#include <cstring>
#include <string>

namespace lattice::data {

namespace {
bool is_cont(uint8_t c) { return (c & 0xC0) == 0x80; }
}  // namespace

int utf8_char_length(const uint8_t* p, size_t n) {
  const uint8_t c = p[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;  // a continuation byte, or C0/C1 (overlong 2-byte forms)
  if (c < 0xE0) return n >= 2 && is_cont(p[1]) ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || !is_cont(p[1]) || !is_cont(p[2])) return 0;
    if (c == 0xE0 && p[1] < 0xA0) return 0;   // overlong
    if (c == 0xED && p[1] >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || !is_cont(p[1]) || !is_cont(p[2]) || !is_cont(p[3])) return 0;
    if (c == 0xF0 && p[1] < 0x90) return 0;   // overlong
    if (c == 0xF4 && p[1] >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

size_t utf8_valid_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Fast path: eight ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    int len = utf8_char_length(p + i, n - i);
    if (len == 0) return i;
    i += size_t(len);
  }
  return n;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace lattice::data
