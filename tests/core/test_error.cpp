#include "core/error.h"

#include <gtest/gtest.h>

using namespace lattice;

TEST(Error, CarriesHostRankExpressionAndLocation) {
  set_error_rank(3);
  try {
    int world = 8;
    LATTICE_CHECK(world == 12, "tp (2) * pp (2) * dp (3) = 12, but the job has {} ranks", world);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "tp (2) * pp (2) * dp (3) = 12, but the job has 8 ranks");
    EXPECT_EQ(e.expression(), "world == 12");
    std::string d = e.describe();
    EXPECT_NE(d.find(host_name() + " rank 3"), std::string::npos) << d;
    EXPECT_NE(d.find("test_error.cpp:"), std::string::npos) << d;
    EXPECT_EQ(d.find('\n'), std::string::npos);
  }
  set_error_rank(-1);
}

// std::bad_alloc's what() is "std::bad_alloc": the report names the memory, the
// rank and the fix instead. Other exceptions keep their own text.
TEST(Error, OutOfMemoryIsNamedWithTheFix) {
  set_error_rank(1);
  std::string d;
  try {
    throw std::bad_alloc();
  } catch (const std::exception& e) {
    d = describe_exception(e);
  }
  EXPECT_NE(d.find(host_name() + " rank 1: out of host memory"), std::string::npos) << d;
  EXPECT_NE(d.find("lattice plan"), std::string::npos) << d;
  EXPECT_EQ(d.find('\n'), std::string::npos);
  EXPECT_EQ(describe_exception(std::runtime_error("disk full")), "disk full");
  set_error_rank(-1);
}
