#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/allocator.h"

using namespace lattice;

TEST(Tensor, ViewsShareStorageAndCountBytes) {
  MemoryStats before = memory_stats(Device::cpu());
  {
    Tensor t = Tensor::zeros({4, 6}, DType::f32);
    EXPECT_EQ(memory_stats(Device::cpu()).live_bytes, before.live_bytes + 96);
    Tensor v = t.view(6, {2, 3});
    v.data<float>()[0] = 5.0f;
    EXPECT_EQ(t.data<float>()[6], 5.0f);
    EXPECT_TRUE(v.same_storage(t));
    EXPECT_THROW(t.view(20, {2, 3}), Error);
    EXPECT_THROW(t.data<double>(), Error);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).live_bytes, before.live_bytes);
}
