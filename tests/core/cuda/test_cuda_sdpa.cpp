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
// probabilities included. Without a GPU every case skips and says why.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/dtype.h"
#include "core/ops.h"
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

CudaAttentionArgs args(const Case& c) {
  CudaAttentionArgs a;
  a.B = c.B, a.T = c.T, a.NH = c.NH, a.HS = c.HS, a.head_offset = c.head_offset, a.p = c.p;
  return a;
}

// Skips without a device; bf16 matmuls on for the test, off after it.
class Bf16Attention : public test::CudaOps {
 protected:
  void SetUp() override {
    test::CudaOps::SetUp();
    if (!IsSkipped()) cuda_backend().set_matmul_dtype(DType::bf16);
  }
  void TearDown() override {
    if (!IsSkipped()) cuda_backend().set_matmul_dtype(DType::f32);
  }

  // Forward and backward of causal attention on both devices.
  struct Run {
    Tensor out, att, dqkv, out_g, att_g, dqkv_g;
  };
  static Run run(const Case& c, const Tensor& qkv, const Tensor& dout) {
    const int64_t C = c.NH * c.HS;
    ops::Dropout d;
    d.p = c.p;
    d.key = RngKey{.seed = 4, .purpose = RngPurpose::dropout, .step = 1, .layer = 0, .site = 0};
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
};

class CudaSdpa : public Bf16Attention, public ::testing::WithParamInterface<Case> {};

// ||got - want|| / ||want|| over the elements of part `part` (0 q, 1 k, 2 v)
// of rows of `parts` blocks of `width` (parts 1: every element).
double rel_l2(const Tensor& got, const Tensor& want, int64_t width, int parts, int part) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if ((i % (width * parts)) / width != part) continue;
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    num += (g - w) * (g - w);
    den += w * w;
  }
  return std::sqrt(num / den);
}

TEST_P(CudaSdpa, MatchesTheCpuOnBf16Inputs) {
  const Case c = GetParam();
  const std::string why = cuda_backend().attention_plain_reason(0, args(c), DType::f32);
  // Lattice's own rule for cuDNN 9.15.0 and older (sdpa_version_refusal), not a refusal by cuDNN.
  if (why.find("multiple of 128") != std::string::npos) GTEST_SKIP() << why;
  ASSERT_EQ(why, "");
  const int64_t C = c.NH * c.HS;
  const Tensor qkv = rounded_to_bf16(test::random_tensor({c.B, c.T, 3 * C}, DType::f32, 11));
  const Tensor dout = rounded_to_bf16(test::random_tensor({c.B, c.T, C}, DType::f32, 12));
  const Run r = run(c, qkv, dout);
  // P and O are rounded to bf16 inside the fused path; the CPU keeps f32.
  EXPECT_TENSOR_NEAR(host(r.out_g), r.out, test::tolerance(DType::bf16));
  EXPECT_TENSOR_NEAR(host(r.dqkv_g), r.dqkv, test::tolerance(DType::bf16));
  // The absolute floor above is as large as the smallest gradients (dQ of late
  // rows): each tensor as a whole must also be within 1% in L2.
  EXPECT_LT(rel_l2(host(r.out_g), r.out, C, 1, 0), 1e-2);
  for (int part = 0; part < 3; ++part) EXPECT_LT(rel_l2(host(r.dqkv_g), r.dqkv, C, 3, part), 1e-2) << "qkv"[part];
}

// The fused backward run twice on the same inputs gives the same bits,
// unless the backend says it may not (cuDNN's accumulating form, or an
// unpinned engine on compute capability 10.x; each said on stderr).
TEST_P(CudaSdpa, BackwardIsRepeatableWhereTheBackendSaysSo) {
  const Case c = GetParam();
  const std::string why = cuda_backend().attention_plain_reason(0, args(c), DType::f32);
  if (why.find("multiple of 128") != std::string::npos) GTEST_SKIP() << why;
  ASSERT_EQ(why, "");
  if (!cuda_backend().attention_backward_repeatable(0, args(c), DType::f32))
    GTEST_SKIP() << "cuDNN's backward for this shape may vary from run to run (its stderr line says why)";
  const int64_t C = c.NH * c.HS;
  const Tensor qkv = rounded_to_bf16(test::random_tensor({c.B, c.T, 3 * C}, DType::f32, 11));
  const Tensor dout = rounded_to_bf16(test::random_tensor({c.B, c.T, C}, DType::f32, 12));
  const Run a = run(c, qkv, dout), b = run(c, qkv, dout);
  EXPECT_TRUE(test::same_bits(host(a.out_g), host(b.out_g)));
  EXPECT_TRUE(test::same_bits(host(a.dqkv_g), host(b.dqkv_g)));
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

// Runs without a device: with bf16 off the reason is the precision, decided
// before any CUDA call.
TEST(CudaSdpaArgs, Fp32TakesThePlainPath) {
  CudaAttentionArgs a;
  a.B = 1, a.T = 64, a.NH = 1, a.HS = 64;
  EXPECT_NE(cuda_backend().attention_plain_reason(0, a, DType::f32).find("bf16"), std::string::npos);
}

}  // namespace
}  // namespace lattice
