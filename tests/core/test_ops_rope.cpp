// Tests of core/kernels/cpu/rope.cpp on bf16/f16 activations (the f32/f64
// paths are tested through the LLaMA block, tests/models/test_llama.cpp).
//
// RoPE: the 16-bit kernel rotates the widened values in double and rounds to
// float, as the f32 kernel does, then once to the 16-bit type: bitwise the f32
// kernel's output (on the same rounded inputs) rounded. repeat_kv: forward
// copies; backward sums each group in float in head order from 0, as the f32
// kernel does, and rounds once: bitwise as well.
#include <gtest/gtest.h>

#include <utility>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

constexpr int64_t kB = 2, kT = 13, kHS = 16, kRot = 3, kW = 5 * kHS;  // 3 rotated heads, 2 copied
constexpr double kTheta = 10000.0;

TEST(OpsRope, Act16MatchesRoundedF32Bitwise) {
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = act16({kB, kT, kW}, dt, 61, 3.0), dy = act16({kB, kT, kW}, dt, 62);
    Tensor x32 = as_f32(x), dy32 = as_f32(dy);
    Tensor y = zeros_like(x), y32 = zeros_like(x32), dx = zeros_like(x), dx32 = zeros_like(x32);
    ops::rope_forward(y, x, kRot, kHS, kTheta);
    ops::rope_forward(y32, x32, kRot, kHS, kTheta);
    expect_rounded_equal(y, y32);
    ops::rope_backward(dx, dy, kRot, kHS, kTheta);
    ops::rope_backward(dx32, dy32, kRot, kHS, kTheta);
    expect_rounded_equal(dx, dx32);
    Tensor z = x.clone();  // in place
    ops::rope_forward(z, z, kRot, kHS, kTheta);
    EXPECT_TRUE(bitwise_equal(z, y));
    ops::rope_backward(dy, dy, kRot, kHS, kTheta);
    EXPECT_TRUE(bitwise_equal(dy, dx));
  }
}

TEST(OpsRope, RepeatKvAct16MatchesRoundedF32Bitwise) {
  const int64_t HS = 12;
  for (DType dt : kAct16)
    for (auto [NH, KV] : {std::pair<int, int>{8, 2}, {6, 1}, {4, 4}}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " NH " << NH << " KV " << KV);
      const Shape packed{2, 7, (NH + 2 * KV) * HS}, expanded{2, 7, 3 * NH * HS};
      Tensor x = act16(packed, dt, 63), dy = act16(expanded, dt, 64);
      Tensor y = zeros_like(dy), dx = act16(packed, dt, 65);  // dx is overwritten
      Tensor y32 = as_f32(y), dx32 = as_f32(dx);
      ops::repeat_kv_forward(y, x, NH, KV);
      ops::repeat_kv_forward(y32, as_f32(x), NH, KV);
      expect_rounded_equal(y, y32);
      ops::repeat_kv_backward(dx, dy, NH, KV);
      ops::repeat_kv_backward(dx32, as_f32(dy), NH, KV);
      expect_rounded_equal(dx, dx32);
    }
}

TEST(OpsRope, Act16MixedDtypesThrow) {
  Tensor x = Tensor::zeros({1, 2, kHS}, DType::bf16), y = Tensor::zeros({1, 2, kHS}, DType::f16);
  EXPECT_THROW(ops::rope_forward(y, x, 1, kHS, kTheta), Error);
  Tensor p = Tensor::zeros({1, 3 * kHS}, DType::bf16), e = Tensor::zeros({1, 3 * kHS}, DType::f32);
  EXPECT_THROW(ops::repeat_kv_forward(e, p, 1, 1), Error);
}

}  // namespace

// Rows rotated at a position offset (a key/value cache holds the earlier
// ones) are the same rows of the whole sequence's rotation, bit for bit: the
// angles depend on the position only. f32 and bf16.
TEST(OpsRope, PositionOffsetRotatesAsTheWholeSequence) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    Tensor whole_in = random_tensor({1, kT, kW}, DType::f32, 7).to(dt), whole = zeros_like(whole_in);
    ops::rope_forward(whole, whole_in, int(kRot), kHS, kTheta);
    for (int64_t pos0 : {int64_t(0), int64_t(5), kT - 1}) {
      const int64_t n = kT - pos0;
      Tensor part_in = whole_in.view(pos0 * kW, {1, n, kW}).to(dt), part = zeros_like(part_in);  // a copy
      ops::rope_forward(part, part_in, int(kRot), kHS, kTheta, pos0);
      EXPECT_TRUE(bitwise_equal(part, whole.view(pos0 * kW, {1, n, kW}).to(dt))) << dtype_name(dt) << " pos0 " << pos0;
    }
    Tensor x = zeros_like(whole_in);
    EXPECT_THROW(ops::rope_forward(x, whole_in, int(kRot), kHS, kTheta, -1), Error);
  }
}
