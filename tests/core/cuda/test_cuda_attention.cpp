// The plain CUDA attention (src/core/cuda/attention.h) against the CPU
// kernels through lattice::ops: causal (GPT-2, LLaMA) and bidirectional with
// a key padding mask (BERT), with and without dropout, a head offset as under
// tp, forward outputs, saved probabilities and the qkv gradient. The dropout
// masks come from the same Philox counters, so with p > 0 the two devices
// must still agree element for element. Without a GPU every case skips and
// says why; the argument checks that run before any CUDA call run anyway.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/ops.h"
#include "support/cuda_test_support.h"
#include "support/test_support.h"

namespace lattice {
namespace {

struct Case {
  std::string name;
  int64_t B, T, NH, HS;
  bool causal;
  float p;
  int head_offset;
};

// Skips without a device (tests/support/cuda_test_support.h).
class CudaAttention : public test::CudaOps, public ::testing::WithParamInterface<Case> {};

// f32 on both sides; the GPU sums in another order (cuBLAS, block reductions).
constexpr test::Tolerance kTol{2e-4, 2e-5};

TEST_P(CudaAttention, MatchesTheCpuKernels) {
  const Case c = GetParam();
  const int64_t C = c.NH * c.HS;
  Tensor qkv = test::random_tensor({c.B, c.T, 3 * C}, DType::f32, 1);
  Tensor dout = test::random_tensor({c.B, c.T, C}, DType::f32, 2);
  Tensor mask = Tensor::empty({c.B, c.T}, DType::i32);
  for (int64_t b = 0; b < c.B; ++b)  // sample b pads its last b keys; sample 2 (if any) has none valid
    for (int64_t t = 0; t < c.T; ++t) mask.data<int32_t>()[b * c.T + t] = (b == 2) ? 0 : int32_t(t < c.T - b);
  ops::Dropout d;
  d.p = c.p;
  d.key = RngKey{.seed = 9, .purpose = RngPurpose::dropout, .step = 3, .layer = 2, .site = 0};
  d.sample0 = 5;

  Tensor out = Tensor::empty({c.B, c.T, C}, DType::f32), att = Tensor::empty({c.B, c.NH, c.T, c.T}, DType::f32);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::f32), scratch = Tensor::empty(att.shape(), DType::f32);
  Tensor out_g = gpu(out), att_g = gpu(att), dqkv_g = gpu(dqkv), scratch_g = gpu(scratch);
  const Tensor qkv_g = gpu(qkv), dout_g = gpu(dout), mask_g = gpu(mask);
  if (c.causal) {
    ops::attention_forward(out, att, qkv, int(c.NH), d, c.head_offset);
    ops::attention_backward(dqkv, scratch, dout, qkv, att, int(c.NH), d, c.head_offset);
    ops::attention_forward(out_g, att_g, qkv_g, int(c.NH), d, c.head_offset);
    ops::attention_backward(dqkv_g, scratch_g, dout_g, qkv_g, att_g, int(c.NH), d, c.head_offset);
  } else {
    ops::attention_masked_forward(out, att, qkv, &mask, int(c.NH), d, c.head_offset);
    ops::attention_masked_backward(dqkv, scratch, dout, qkv, att, &mask, int(c.NH), d, c.head_offset);
    ops::attention_masked_forward(out_g, att_g, qkv_g, &mask_g, int(c.NH), d, c.head_offset);
    ops::attention_masked_backward(dqkv_g, scratch_g, dout_g, qkv_g, att_g, &mask_g, int(c.NH), d, c.head_offset);
  }
  EXPECT_TENSOR_NEAR(host(att_g), att, kTol);
  EXPECT_TENSOR_NEAR(host(out_g), out, kTol);
  EXPECT_TENSOR_NEAR(host(dqkv_g), dqkv, kTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(Case{"causal", 2, 16, 4, 8, true, 0.0f, 0},
                                           Case{"causal_dropout_tp_offset", 2, 33, 2, 16, true, 0.1f, 2},
                                           Case{"causal_long_rows", 1, 300, 2, 32, true, 0.0f, 0},
                                           Case{"masked", 3, 12, 2, 8, false, 0.0f, 0},
                                           Case{"masked_dropout", 3, 40, 4, 16, false, 0.2f, 4}),
                         [](const auto& info) { return info.param.name; });

// A row whose every allowed score is -inf (an infinite q against keys that
// all meet it with a negative weight) attends to nothing on the CPU
// (softmax_row): zero probabilities and output, not exp(-inf - -inf) = NaN.
class CudaAttentionEdge : public test::CudaOps {};

TEST_F(CudaAttentionEdge, ARowOfMinusInfinityScoresIsZero) {
  const int64_t B = 1, T = 4, NH = 1, HS = 8, C = NH * HS, row = 2;
  Tensor qkv = test::random_tensor({B, T, 3 * C}, DType::f32, 3);
  float* x = qkv.data<float>();
  for (int64_t t = 0; t < T; ++t) x[t * 3 * C + C] = -1.0f;  // element 0 of every k
  x[row * 3 * C] = INFINITY;                                 // element 0 of q at `row`: its scores are -inf
  ops::Dropout d;
  Tensor out = Tensor::empty({B, T, C}, DType::f32), att = Tensor::empty({B, NH, T, T}, DType::f32);
  Tensor out_g = gpu(out), att_g = gpu(att);
  ops::attention_forward(out, att, qkv, int(NH), d, 0);
  ops::attention_forward(out_g, att_g, gpu(qkv), int(NH), d, 0);
  for (int64_t j = 0; j < T; ++j) ASSERT_EQ(att.data<float>()[row * T + j], 0.0f) << "the CPU reference changed";
  EXPECT_TENSOR_NEAR(host(att_g), att, kTol);
  EXPECT_TENSOR_NEAR(host(out_g), out, kTol);
}

// Checked before any CUDA call: runs without a device too.
TEST(CudaAttentionArgs, ShapesTheKernelsCannotTakeAreOneLineErrors) {
  CudaAttentionArgs a;
  a.B = 1, a.T = 4, a.NH = 1, a.HS = 8, a.p = 1.0f;
  float dummy = 0;
  try {
    cuda_backend().attention_forward(0, &dummy, &dummy, &dummy, a);
    FAIL() << "p = 1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("dropout p = 1"), std::string::npos) << e.message();
  }
  a.p = 0.0f;
  a.key_mask = reinterpret_cast<const int32_t*>(&dummy);  // a key mask on causal attention
  try {
    cuda_backend().attention_backward(0, &dummy, &dummy, &dummy, &dummy, &dummy, a);
    FAIL() << "key mask with causal accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("key mask is for bidirectional"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace lattice
