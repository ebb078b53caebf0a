#include "core/timer.h"

#include <gtest/gtest.h>

#include <thread>

using namespace lattice;

TEST(Timer, ScopedTimersAccumulate) {
  double total = 0;
  for (int i = 0; i < 2; ++i) {
    ScopedTimer t(total);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(total, 0.009);
  Timer t;
  EXPECT_GE(t.seconds(), 0.0);
}
