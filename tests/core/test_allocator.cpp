#include "core/allocator.h"

#include <gtest/gtest.h>

#include "core/tensor.h"

using namespace lattice;

TEST(Allocator, CountsLiveAndPeakBytesPerDevice) {
  const Device cpu = Device::cpu();
  reset_peak_memory(cpu);
  MemoryStats s0 = memory_stats(cpu);
  EXPECT_EQ(s0.peak_bytes, s0.live_bytes);
  {
    Tensor a = Tensor::empty({1000}, DType::f32);
    Tensor b = Tensor::empty({500}, DType::f64);
    EXPECT_EQ(memory_stats(cpu).live_bytes, s0.live_bytes + 8000);
  }
  MemoryStats s1 = memory_stats(cpu);
  EXPECT_EQ(s1.live_bytes, s0.live_bytes);
  EXPECT_EQ(s1.peak_bytes, s0.live_bytes + 8000);
  EXPECT_EQ(s1.total_allocs, s0.total_allocs + 2);
  reset_peak_memory(cpu);
  EXPECT_EQ(memory_stats(cpu).peak_bytes, s1.live_bytes);
}

TEST(Allocator, CpuMemoryIsAligned) {
  void* p = device_alloc(Device::cpu(), 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  device_free(Device::cpu(), p, 3);
}
