// Tests of core/kernels/cpu/embedding.cpp through ops::embedding_*.
#include <gtest/gtest.h>

#include "core/ops.h"
#include "ops_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {
// Ids into a full vocabulary of 10; this shard holds rows [4, 9) (V = 5).
const std::vector<int32_t> kIds = {4, 0, 8, 5, 9, 4, 3, 6};
constexpr int64_t kStart = 4, kV = 5, kC = 3;
}  // namespace

TEST(OpsEmbedding, ForwardLooksUpShardRowsAndZeroesOthers) {
  Tensor ids = Tensor::from<int32_t>(kIds, {2, 4});
  Tensor w = random_tensor({kV, kC}, DType::f64, 51), out = random_tensor({2, 4, kC}, DType::f64, 52);
  ops::embedding_forward(out, ids, w, kStart);
  for (size_t n = 0; n < kIds.size(); ++n) {
    int64_t row = kIds[n] - kStart;
    bool inside = row >= 0 && row < kV;
    for (int64_t c = 0; c < kC; ++c)
      EXPECT_EQ(out.data<double>()[int64_t(n) * kC + c], inside ? w.data<double>()[row * kC + c] : 0.0) << n;
  }
}

TEST(OpsEmbedding, BackwardScattersRepeatedIdsAndAccumulates) {
  Tensor ids = Tensor::from<int32_t>(kIds, {8});
  Tensor dout = random_tensor({8, kC}, DType::f64, 53), dw = random_tensor({kV, kC}, DType::f64, 54);
  Tensor expect = dw.clone();
  for (size_t n = 0; n < kIds.size(); ++n) {
    int64_t row = kIds[n] - kStart;
    if (row < 0 || row >= kV) continue;
    for (int64_t c = 0; c < kC; ++c) expect.data<double>()[row * kC + c] += dout.data<double>()[int64_t(n) * kC + c];
  }
  ops::embedding_backward(dw, dout, ids, kStart);
  EXPECT_TENSOR_NEAR(dw, expect, tolerance(DType::f64));
  // A second call adds the same scatter again: the increment equals the first one.
  Tensor once = dw.clone();
  ops::embedding_backward(dw, dout, ids, kStart);
  Tensor inc = Tensor::zeros({kV, kC}, DType::f64), first = Tensor::zeros({kV, kC}, DType::f64);
  ops::embedding_backward(first, dout, ids, kStart);
  for (int64_t i = 0; i < inc.numel(); ++i) inc.data<double>()[i] = dw.data<double>()[i] - once.data<double>()[i];
  EXPECT_TENSOR_NEAR(inc, first, tolerance(DType::f64));
}

TEST(OpsEmbedding, Gradcheck) {
  Tensor ids = Tensor::from<int32_t>(kIds, {8});
  Tensor w = random_tensor({kV, kC}, DType::f64, 51), R = random_tensor({8, kC}, DType::f64, 55);
  Tensor out = Tensor::zeros({8, kC}, DType::f64), dw = Tensor::zeros({kV, kC}, DType::f64);
  ops::embedding_backward(dw, R, ids, kStart);
  auto loss = [&] {
    ops::embedding_forward(out, ids, w, kStart);
    return dot(out, R);
  };
  expect_gradients(loss, {{&w, dw}});
}

TEST(OpsEmbedding, F32MatchesF64) {
  auto run = [](DType dt) {
    Tensor ids = Tensor::from<int32_t>(kIds, {8});
    Tensor w = random_tensor({kV, kC}, dt, 51), R = random_tensor({8, kC}, dt, 55);
    Tensor out = Tensor::zeros({8, kC}, dt), dw = Tensor::zeros({kV, kC}, dt);
    ops::embedding_forward(out, ids, w, kStart);
    ops::embedding_backward(dw, R, ids, kStart);
    return std::vector<Tensor>{out, dw};
  };
  expect_f32_matches_f64(run(DType::f32), run(DType::f64));
}

TEST(OpsEmbedding, RejectsBadArguments) {
  Tensor ids64 = Tensor::zeros({8}, DType::f64), w = Tensor::zeros({kV, kC}, DType::f64);
  Tensor out = Tensor::zeros({8, kC}, DType::f64);
  EXPECT_THROW(ops::embedding_forward(out, ids64, w), Error);  // ids must be i32
  Tensor ids = Tensor::from<int32_t>(kIds, {8}), small = Tensor::zeros({7, kC}, DType::f64);
  EXPECT_THROW(ops::embedding_forward(small, ids, w), Error);
}

// bf16/f16 activations beside an fp32 table: forward rounds each looked-up
// value once (bitwise the f32 lookup rounded); backward adds the widened dout
// rows in fp32 in the f32 kernel's order (bitwise the f32 kernel on them).
TEST(OpsEmbedding, Act16MatchesF32Bitwise) {
  Tensor ids = Tensor::from<int32_t>(kIds, {2, 4});
  const int64_t C = 300;  // more than one column block
  for (DType dt : kAct16) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor w = random_tensor({kV, C}, DType::f32, 53), out = Tensor::zeros({2, 4, C}, dt);
    Tensor out32 = Tensor::zeros({2, 4, C}, DType::f32);
    ops::embedding_forward(out, ids, w, kStart);
    ops::embedding_forward(out32, ids, w, kStart);
    expect_rounded_equal(out, out32);
    Tensor dout = act16({2, 4, C}, dt, 54), dw = random_tensor({kV, C}, DType::f32, 55), dw32 = dw.clone();
    ops::embedding_backward(dw, dout, ids, kStart);
    ops::embedding_backward(dw32, as_f32(dout), ids, kStart);
    EXPECT_TRUE(bitwise_equal(dw, dw32));
    Tensor w16 = w.to(dt);  // the table is a parameter: fp32 beside 16-bit activations
    EXPECT_THROW(ops::embedding_forward(out, ids, w16, kStart), Error);
    EXPECT_THROW(ops::embedding_backward(w16, dout, ids, kStart), Error);
  }
}
