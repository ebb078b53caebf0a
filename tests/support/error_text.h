// Error-message helpers for tests: error_text(f) is the message of
// the lattice::Error that `f` throws (a test failure if none, or if the
// message is not one line); EXPECT_HAS(text, part) checks a substring.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace lattice::test {

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

}  // namespace lattice::test

#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "missing \"" << (part) << "\" in: " << (text)
