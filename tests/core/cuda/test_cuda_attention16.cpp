// Attention on 16-bit activations on the GPU (core/backend.h
// attention_forward16 / attention_backward16) against the CPU 16-bit kernels
// (core/kernels/cpu/attention.h, attention_masked.h) through lattice::ops,
// for bf16 and f16 with the matmuls in that type on both devices:
//   - the plain path (dropout, key-padding masks, a head size cuDNN does not
//     take, a T too short for the fused path's saved state): saved
//     probabilities within 1 ulp (both devices compute them in fp32 from the
//     same 16-bit operands, summing in another order, then round once), out
//     and dqkv at twice the 16-bit tolerance of tests/support (P and dS,
//     which the products read, may differ by that ulp);
//   - the fused path (cuDNN): out and dqkv at the same tolerance (cuDNN keeps
//     P in fp32 through an online softmax and rounds it for the products as
//     the CPU does), reading and writing the 16-bit buffers in place, and
//     through views 2 bytes off alignment (staged through scratch copies);
//     its forward out has the bits of the fused path on the same values in
//     f32 activations (the same graph on the same io-typed inputs);
//   - the compact state (ops::attention_state_shape), two calls
//     interleaved: fused, the bits of the (B, NH, T, T) buffer; plain, the
//     CPU kernel's results at the tolerance above.
// Each case first asks the backend which path it takes. The CPU reference
// needs bf16 matmuls there (AVX512-BF16 and oneDNN): bf16 cases skip, saying
// why, without. Without a GPU every case skips and says why.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "core/backend.h"
#include "core/kernels/cpu/matmul.h"
#include "core/ops.h"
#include "support/act16.h"
#include "support/attention_case.h"
#include "support/cuda_test_support.h"
#include "support/test_support.h"

namespace lattice {
namespace {

using Case = test::AttentionCase;
using Results = test::AttentionResults;

// The backend's view of case c (attention_plain_reason reads only whether there is a key mask).
CudaAttentionArgs args(const Case& c) {
  static const int32_t some_mask = 1;
  CudaAttentionArgs a;
  a.B = c.B, a.T = c.T, a.NH = c.NH, a.HS = c.HS, a.head_offset = c.head_offset, a.p = c.p, a.causal = !c.masked;
  a.key_mask = c.masked ? &some_mask : nullptr;
  return a;
}

Results run(const Case& c, const Tensor& qkv, const Tensor& dout) { return test::run_attention(c, qkv, dout); }

// Skips without a device or (bf16) without CPU bf16 matmuls; the matmuls of
// both devices in the parameter's type for the test's duration.
class CudaAttention16 : public test::CudaOps, public ::testing::WithParamInterface<std::tuple<DType, Case>> {
 protected:
  void SetUp() override {
    test::CudaOps::SetUp();
    if (IsSkipped()) return;
    const std::string why = test::half_matmuls_missing(dt());
    if (!why.empty()) GTEST_SKIP() << why;
    cpu::set_matmul_dtype(dt());
    cuda_backend().set_matmul_dtype(dt());
    half_on_ = true;
    if (!kase().fused) return;
    // Lattice's own rule for an old cuDNN skips a fused case; a refusal by cuDNN fails it (in the tests).
    const std::string plain = cuda_backend().attention_plain_reason(0, args(kase()), dt());
    if (test::is_cudnn_version_rule(plain)) GTEST_SKIP() << plain;
  }
  void TearDown() override {  // also after a skip in the test's body
    if (!half_on_) return;
    cpu::set_matmul_dtype(DType::f32);
    cuda_backend().set_matmul_dtype(DType::f32);
  }
  bool half_on_ = false;
  DType dt() const { return std::get<0>(GetParam()); }
  const Case& kase() const { return std::get<1>(GetParam()); }
  test::Tolerance tol() const {
    const test::Tolerance t = test::tolerance(dt());
    return {2 * t.rtol, 2 * t.atol};
  }
};

TEST_P(CudaAttention16, MatchesTheCpu16BitKernel) {
  const Case& c = kase();
  const std::string why = cuda_backend().attention_plain_reason(0, args(c), dt());
  ASSERT_EQ(why.empty(), c.fused) << why;
  const Tensor qkv = test::act16({c.B, c.T, 3 * c.C()}, dt(), 51, 1.5), dout = test::act16({c.B, c.T, c.C()}, dt(), 52);
  const Results want = run(c, qkv, dout), got = run(c, gpu(qkv), gpu(dout));
  if (!c.fused)
    test::expect_rounded_equal(got.att, want.att, 1, test::kCancelAtol);  // the fused path saves Stats and O instead
  EXPECT_TENSOR_NEAR(test::as_f32(got.out), test::as_f32(want.out), tol());
  EXPECT_TENSOR_NEAR(test::as_f32(got.dqkv), test::as_f32(want.dqkv), tol());
}

// 16-bit buffers 2 bytes off alignment: the fused path stages them through
// scratch copies, with the results of the aligned buffers.
TEST_P(CudaAttention16, MisalignedViewsGiveTheAlignedResults) {
  const Case& c = kase();
  if (!c.fused) GTEST_SKIP() << "the plain path has no alignment rule";
  const Tensor qkv = test::act16({c.B, c.T, 3 * c.C()}, dt(), 53), dout = test::act16({c.B, c.T, c.C()}, dt(), 54);
  auto shifted = [&](const Tensor& t) {  // t's values in a device view starting one element into its storage
    Tensor big = Tensor::zeros({t.numel() + 1}, dt(), Device::cuda(0));
    Tensor v = big.view(1, t.shape());
    v.copy_from(t.to(Device::cuda(0)));
    return v;
  };
  const Results aligned = run(c, gpu(qkv), gpu(dout)), off = run(c, shifted(qkv), shifted(dout));
  test::expect_rounded_equal(off.out, aligned.out);
  EXPECT_TENSOR_NEAR(test::as_f32(off.dqkv), test::as_f32(aligned.dqkv), tol());
}

// The same graph on the same io-typed values: the fused forward on 16-bit
// activations gives the bits of the fused forward on their f32 values.
TEST_P(CudaAttention16, FusedForwardEqualsItsF32ActivationTwin) {
  const Case& c = kase();
  if (!c.fused) GTEST_SKIP() << "only the fused path has an f32-activation twin on the same graph";
  ASSERT_EQ(cuda_backend().attention_plain_reason(0, args(c), DType::f32), "");
  const Tensor qkv = test::act16({c.B, c.T, 3 * c.C()}, dt(), 55), dout = test::act16({c.B, c.T, c.C()}, dt(), 56);
  const Results half = run(c, gpu(qkv), gpu(dout));
  const Results f32 = run(c, gpu(test::as_f32(qkv)), gpu(test::as_f32(dout)));
  test::expect_rounded_equal(half.out, f32.out);
  EXPECT_TENSOR_NEAR(test::as_f32(half.dqkv), f32.dqkv, tol());
}

// The compact state (ops::attention_state_shape: Stats and O only, linear
// in T), two calls interleaved: on the fused path the bits of the
// (B, NH, T, T) buffer (the same graphs); on the plain one (here dropout on a
// state sized for calls without it, in training a shape cuDNN refuses) each
// sample's P kept in the backend's temporary only while it runs and computed
// there again in backward, each call matching the CPU 16-bit kernel.
TEST_P(CudaAttention16, CompactStateServesInterleavedCalls) {
  const Case& c = kase();
  if (c.masked) GTEST_SKIP() << "the key-mask ops take (B, NH, T, T) only";
  const Shape state =
      ops::attention_state_shape({.B = c.B, .T = c.T, .NH = c.NH, .HS = c.HS}, dt(), ops::AttentionState::fused_cuda);
  if (state.size() != 1) GTEST_SKIP() << "no compact state: the fused path's rules do not take this shape";
  const std::string why = cuda_backend().attention_plain_reason(0, args(c), dt());
  ASSERT_EQ(why.empty(), c.fused) << why;
  const Tensor qkv[2] = {test::act16({c.B, c.T, 3 * c.C()}, dt(), 57, 1.5),
                         test::act16({c.B, c.T, 3 * c.C()}, dt(), 59)};
  const Tensor dout[2] = {test::act16({c.B, c.T, c.C()}, dt(), 58), test::act16({c.B, c.T, c.C()}, dt(), 60)};
  const Tensor qkv_g[2] = {gpu(qkv[0]), gpu(qkv[1])}, dout_g[2] = {gpu(dout[0]), gpu(dout[1])};
  const std::array<Results, 2> got = test::run_attention_interleaved(c, qkv_g, dout_g, state);
  if (!c.fused) {
    for (int i = 0; i < 2; ++i) {
      const Results want = run(c, qkv[i], dout[i]);
      EXPECT_TENSOR_NEAR(test::as_f32(got[size_t(i)].out), test::as_f32(want.out), tol()) << "call " << i;
      EXPECT_TENSOR_NEAR(test::as_f32(got[size_t(i)].dqkv), test::as_f32(want.dqkv), tol()) << "call " << i;
    }
    return;
  }
  const std::array<Results, 2> full = test::run_attention_interleaved(c, qkv_g, dout_g, {c.B, c.NH, c.T, c.T});
  const bool repeatable = cuda_backend().attention_backward_repeatable(0, args(c), dt());
  test::expect_bits_of_full_state(got, full, repeatable, tol());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttention16,
    ::testing::Combine(::testing::ValuesIn(test::kAct16),
                       ::testing::Values(Case{"plain_causal_dropout_tp_offset", 2, 33, 2, 16, false, 0.1f, 2, false},
                                         Case{"plain_masked", 3, 40, 2, 16, true, 0.0f, 0, false},
                                         Case{"plain_masked_dropout", 3, 24, 4, 8, true, 0.2f, 4, false},
                                         Case{"plain_head12", 2, 64, 2, 12, false, 0.0f, 0, false},
                                         Case{"plain_short_T", 2, 40, 2, 64, false, 0.0f, 0, false},
                                         Case{"plain_long_rows", 1, 300, 2, 36, false, 0.0f, 0,
                                              false},  // head size 36: not fused
                                         Case{"fused_gpt2_head", 2, 96, 4, 64, false, 0.0f, 0, true},
                                         Case{"fused_odd_T", 2, 77, 2, 32, false, 0.0f, 0, true},
                                         Case{"fused_tp_offset_head128", 1, 137, 2, 128, false, 0.0f, 2, true})),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
    });

// Checked before any CUDA call: runs without a device too.
TEST(CudaAttention16Args, SixteenBitActivationsNeedTheMatmulsInTheirType) {
  CudaAttentionArgs a;
  a.B = 1, a.T = 4, a.NH = 1, a.HS = 8;
  uint16_t dummy = 0;
  try {
    cuda_backend().attention_forward16(0, DType::bf16, &dummy, &dummy, &dummy, a);  // matmuls f32
    FAIL() << "bf16 activations accepted with f32 matmuls";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("runtime.precision bf16"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace lattice
