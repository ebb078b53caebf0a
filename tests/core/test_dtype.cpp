#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/tensor.h"

using namespace lattice;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_from_name("f16"), DType::f16);
  EXPECT_THROW(dtype_from_name("f8"), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half way between two bf16 values: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 ties to the even 1 + 2^-6... i.e. rounds up.
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (float x : {0.0f, -2.5f, 3.140625f, 1e30f, -1e-30f}) EXPECT_NEAR(bf16_to_f32(f32_to_bf16(x)), x, std::fabs(x) / 128);
}

TEST(DType, F16ExactValuesSubnormalsAndOverflow) {
  for (float x : {0.0f, 1.0f, -2.0f, 0.5f, 65504.0f, 6.103515625e-05f /* min normal */, 5.9604645e-08f /* min subnormal */})
    EXPECT_EQ(f16_to_f32(f32_to_f16(x)), x) << x;
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to +inf
  EXPECT_EQ(f32_to_f16(1e-9f), 0x0000);     // underflows to zero
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie to even
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  // Every f16 bit pattern round-trips through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff)) continue;  // NaN payloads
    ASSERT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << h;
  }
}

TEST(DType, TensorConversionsRoundTrip) {
  Tensor t = Tensor::from<float>({1.5f, -0.25f, 3.0f}, {3});
  EXPECT_EQ(t.to(DType::bf16).to(DType::f32).data<float>()[0], 1.5f);
  EXPECT_EQ(t.to(DType::f16).to(DType::f64).data<double>()[1], -0.25);
  EXPECT_EQ(t.to(DType::i32).data<int32_t>()[2], 3);
}
