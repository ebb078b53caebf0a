// Helpers for the checkpoint tests: the one-line message of the Error a call
// throws, EXPECT_HAS, and raw file I/O for crafting and damaging files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"

namespace lattice::test {

// The message of the lattice::Error that `f` throws; a test failure if none
// is thrown or if the message is not one line.
template <typename F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << "not one line: " << e.message();
    return e.message();
  }
  ADD_FAILURE() << "expected a lattice::Error";
  return "";
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

}  // namespace lattice::test

#define EXPECT_HAS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "missing \"" << (part) << "\" in: " << (text)
