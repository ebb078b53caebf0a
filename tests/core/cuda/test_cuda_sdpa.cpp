// cuDNN's fused attention (src/core/cuda/sdpa_cudnn.h), the path causal
// attention takes on cuda with bf16 matmuls on, against the CPU attention
// kernel through lattice::ops: forward output and the qkv gradient, on inputs
// rounded to bf16 first (the fused path sees exactly those), at the bf16
// tolerance, for several shapes including odd T and a tp head offset. Each
// case first asks the backend which path it takes, so a shape cuDNN refuses
// fails here instead of passing through the plain path; the same case run
// twice gives the same bits unless the backend says its backward may vary.
// Then the fallback:
// shapes the plan does not take (head size 12, dropout) run the plain path
// with bf16 on and match the CPU at the f32 attention tolerance, saved
// probabilities included. The compact state (ops::attention_state_shape),
// two calls interleaved as a pipeline runs them: the full buffer's bits on
// the fused path, the CPU's results on the plain one. Without a GPU every
// case skips and says why.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "core/backend.h"
#include "core/cuda/sdpa_plan.h"
#include "core/dtype.h"
#include "core/ops.h"
#include "support/attention_case.h"
#include "support/cuda_test_support.h"
#include "support/test_support.h"

namespace lattice {
namespace {

struct Case {
  std::string name;
  int64_t B, T, NH, HS;
  int head_offset;
  float p = 0.0f;
};

// Rounds every element to bf16 (round to nearest even), kept as f32.
Tensor rounded_to_bf16(Tensor t) {
  float* x = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return t;
}

// The shared runners' view of case c (causal, no key mask).
test::AttentionCase attention_case(const Case& c) { return {c.name, c.B, c.T, c.NH, c.HS, false, c.p, c.head_offset}; }

CudaAttentionArgs args(const Case& c) {
  CudaAttentionArgs a;
  a.B = c.B, a.T = c.T, a.NH = c.NH, a.HS = c.HS, a.head_offset = c.head_offset, a.p = c.p;
  return a;
}

// Skips without a device; bf16 matmuls on for the test, off after it.
class Bf16Attention : public test::CudaBf16Matmuls {
 protected:
  // Forward and backward of causal attention on both devices.
  struct Run {
    Tensor out, att, dqkv, out_g, att_g, dqkv_g;
  };
  static Run run(const Case& c, const Tensor& qkv, const Tensor& dout) {
    const int64_t C = c.NH * c.HS;
    const ops::Dropout d = test::attention_dropout(c.p);
    Run r;
    r.out = Tensor::empty({c.B, c.T, C}, DType::f32);
    r.att = Tensor::empty({c.B, c.NH, c.T, c.T}, DType::f32);
    r.dqkv = Tensor::empty(qkv.shape(), DType::f32);
    Tensor scratch = Tensor::empty(r.att.shape(), DType::f32);
    r.out_g = gpu(r.out), r.att_g = gpu(r.att), r.dqkv_g = gpu(r.dqkv);
    Tensor scratch_g = gpu(scratch);
    const Tensor qkv_g = gpu(qkv), dout_g = gpu(dout);
    ops::attention_forward(r.out, r.att, qkv, int(c.NH), d, c.head_offset);
    ops::attention_backward(r.dqkv, scratch, dout, qkv, r.att, int(c.NH), d, c.head_offset);
    ops::attention_forward(r.out_g, r.att_g, qkv_g, int(c.NH), d, c.head_offset);
    ops::attention_backward(r.dqkv_g, scratch_g, dout_g, qkv_g, r.att_g, int(c.NH), d, c.head_offset);
    return r;
  }

  // The compact state of c's shape for calls without dropout
  // (ops::attention_state_shape), whatever c.p is; and the full one.
  static Shape compact_state(const Case& c) {
    return ops::attention_state_shape({.B = c.B, .T = c.T, .NH = c.NH, .HS = c.HS}, DType::f32,
                                      ops::AttentionState::fused_cuda);
  }
  static Shape full_state(const Case& c) { return {c.B, c.NH, c.T, c.T}; }
};

// Every case takes the fused path: a refusal by cuDNN fails it, Lattice's
// own rule for cuDNN 9.15.0 and older (sdpa_version_refusal) skips it.
// qkv_ and dout_: inputs rounded to bf16 (the fused path sees exactly those).
class CudaSdpa : public Bf16Attention, public ::testing::WithParamInterface<Case> {
 protected:
  void SetUp() override {
    Bf16Attention::SetUp();
    if (IsSkipped()) return;
    const Case& c = GetParam();
    const std::string why = cuda_backend().attention_plain_reason(0, args(c), DType::f32);
    if (test::is_cudnn_version_rule(why)) GTEST_SKIP() << why;
    ASSERT_EQ(why, "");
    qkv_ = rounded_to_bf16(test::random_tensor({c.B, c.T, 3 * c.NH * c.HS}, DType::f32, 11));
    dout_ = rounded_to_bf16(test::random_tensor({c.B, c.T, c.NH * c.HS}, DType::f32, 12));
  }
  Tensor qkv_, dout_;
};

TEST_P(CudaSdpa, MatchesTheCpuOnBf16Inputs) {
  const Case& c = GetParam();
  const int64_t C = c.NH * c.HS;
  const Run r = run(c, qkv_, dout_);
  // P and O are rounded to bf16 inside the fused path; the CPU keeps f32.
  EXPECT_TENSOR_NEAR(host(r.out_g), r.out, test::tolerance(DType::bf16));
  EXPECT_TENSOR_NEAR(host(r.dqkv_g), r.dqkv, test::tolerance(DType::bf16));
  // The absolute floor above is as large as the smallest gradients (dQ of late
  // rows): each tensor as a whole must also be within 1% in L2.
  EXPECT_LT(test::rel_l2(host(r.out_g), r.out, C, 1, 0), 1e-2);
  for (int part = 0; part < 3; ++part) EXPECT_LT(test::rel_l2(host(r.dqkv_g), r.dqkv, C, 3, part), 1e-2) << "qkv"[part];
}

// The fused backward run twice on the same inputs gives the same bits,
// unless the backend says it may not (cuDNN's accumulating form, or an
// unpinned engine on compute capability 10.x; each said on stderr).
TEST_P(CudaSdpa, BackwardIsRepeatableWhereTheBackendSaysSo) {
  const Case& c = GetParam();
  if (!cuda_backend().attention_backward_repeatable(0, args(c), DType::f32))
    GTEST_SKIP() << "cuDNN's backward for this shape may vary from run to run (its stderr line says why)";
  const Tensor qkv[2] = {gpu(qkv_), gpu(qkv_)}, dout[2] = {gpu(dout_), gpu(dout_)};  // the same inputs twice
  const auto r = test::run_attention_interleaved(attention_case(c), qkv, dout, full_state(c));
  EXPECT_TRUE(test::same_bits(r[0].out, r[1].out));
  EXPECT_TRUE(test::same_bits(r[0].dqkv, r[1].dqkv));
}

// The compact state (Stats and O only, linear in T) gives the bits of the
// (B, NH, T, T) buffer, two calls interleaved as a pipeline runs them: the
// same graphs run, only the saved buffer is smaller (its offsets follow its
// own address).
TEST_P(CudaSdpa, CompactStateGivesTheSameBits) {
  const Case& c = GetParam();
  const Shape compact = compact_state(c);
  ASSERT_EQ(compact.size(), 1u) << "the shape should have a compact state";
  const Tensor qkv[2] = {gpu(qkv_), gpu(rounded_to_bf16(test::random_tensor(qkv_.shape(), DType::f32, 13)))};
  const Tensor dout[2] = {gpu(dout_), gpu(rounded_to_bf16(test::random_tensor(dout_.shape(), DType::f32, 14)))};
  const test::AttentionCase ac = attention_case(c);
  test::expect_bits_of_full_state(test::run_attention_interleaved(ac, qkv, dout, compact),
                                  test::run_attention_interleaved(ac, qkv, dout, full_state(c)),
                                  cuda_backend().attention_backward_repeatable(0, args(c), DType::f32),
                                  test::tolerance(DType::bf16));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaSdpa,
                         ::testing::Values(Case{"gpt2_head", 2, 64, 4, 64, 0}, Case{"odd_T", 2, 77, 2, 64, 0},
                                           Case{"tp_offset_head128", 1, 129, 2, 128, 2},
                                           Case{"head16_long", 3, 300, 3, 16, 0}),
                         [](const auto& info) { return info.param.name; });

class CudaSdpaFallback : public Bf16Attention, public ::testing::WithParamInterface<std::pair<Case, std::string>> {};

TEST_P(CudaSdpaFallback, UnsupportedShapesTakeThePlainPath) {
  const auto& [c, reason] = GetParam();
  const std::string why = cuda_backend().attention_plain_reason(0, args(c), DType::f32);
  EXPECT_NE(why.find(reason), std::string::npos) << why;
  const int64_t C = c.NH * c.HS;
  const Tensor qkv = test::random_tensor({c.B, c.T, 3 * C}, DType::f32, 21);
  const Tensor dout = test::random_tensor({c.B, c.T, C}, DType::f32, 22);
  const Run r = run(c, qkv, dout);
  // The plain path's products stay fp32 under bf16 (backend.h), so f32 tolerances hold.
  constexpr test::Tolerance kTol{2e-4, 2e-5};
  EXPECT_TENSOR_NEAR(host(r.att_g), r.att, kTol);  // the probabilities: only the plain path saves them
  EXPECT_TENSOR_NEAR(host(r.out_g), r.out, kTol);
  EXPECT_TENSOR_NEAR(host(r.dqkv_g), r.dqkv, kTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaSdpaFallback,
                         ::testing::Values(std::pair{Case{"head12", 2, 64, 2, 12, 0}, std::string("head size 12")},
                                           std::pair{Case{"dropout", 2, 64, 2, 64, 0, 0.1f}, std::string("Philox")},
                                           std::pair{Case{"short_T", 2, 8, 2, 64, 0}, std::string("too short")}),
                         [](const auto& info) { return info.param.first.name; });

// A compact state on the plain path, two calls interleaved: forward keeps
// each sample's P in the backend's temporary only while it runs, backward
// computes it there again, and each call matches the CPU as the plain path
// on the full buffer does. In training the path is a shape cuDNN refuses or
// fails to run; here dropout (which cuDNN's fused path does not take) and,
// without dropout, head size 12 on a state of the size the fused path's
// would have (sdpa_saved_elems; ops takes that size whatever the rules say).
TEST_F(Bf16Attention, CompactStateOnThePlainPathRecomputesTheProbabilities) {
  const Case dropout{"dropout", 2, 64, 2, 64, 0, 0.1f}, head12{"head12", 2, 64, 2, 12, 1};
  const cuda::SdpaShape head12_shape{.B = head12.B, .T = head12.T, .NH = head12.NH, .HS = head12.HS};
  for (const auto& [c, state, reason] :
       {std::tuple{dropout, compact_state(dropout), std::string("Philox")},
        std::tuple{head12, Shape{cuda::sdpa_saved_elems(head12_shape)}, std::string("head size 12")}}) {
    SCOPED_TRACE(c.name);
    EXPECT_NE(cuda_backend().attention_plain_reason(0, args(c), DType::f32).find(reason), std::string::npos);
    ASSERT_EQ(state.size(), 1u);
    ASSERT_LT(state[0], c.B * c.NH * c.T * c.T);
    const int64_t C = c.NH * c.HS;
    const Tensor qkv[2] = {test::random_tensor({c.B, c.T, 3 * C}, DType::f32, 31),
                           test::random_tensor({c.B, c.T, 3 * C}, DType::f32, 33)};
    const Tensor dout[2] = {test::random_tensor({c.B, c.T, C}, DType::f32, 32),
                            test::random_tensor({c.B, c.T, C}, DType::f32, 34)};
    const Tensor qkv_g[2] = {gpu(qkv[0]), gpu(qkv[1])}, dout_g[2] = {gpu(dout[0]), gpu(dout[1])};
    const auto got = test::run_attention_interleaved(attention_case(c), qkv_g, dout_g, state);
    constexpr test::Tolerance kTol{2e-4, 2e-5};  // the plain path's products stay fp32 under bf16
    for (int i = 0; i < 2; ++i) {
      const Run want = run(c, qkv[i], dout[i]);
      EXPECT_TENSOR_NEAR(got[size_t(i)].out, want.out, kTol) << "call " << i;
      EXPECT_TENSOR_NEAR(got[size_t(i)].dqkv, want.dqkv, kTol) << "call " << i;
    }
  }
}

// Runs without a device: with bf16 off the reason is the precision, decided
// before any CUDA call.
TEST(CudaSdpaArgs, Fp32TakesThePlainPath) {
  CudaAttentionArgs a;
  a.B = 1, a.T = 64, a.NH = 1, a.HS = 64;
  EXPECT_NE(cuda_backend().attention_plain_reason(0, a, DType::f32).find("bf16"), std::string::npos);
}

}  // namespace
}  // namespace lattice
