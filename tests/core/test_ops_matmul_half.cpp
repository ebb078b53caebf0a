// The 16-bit matmul driver (core/kernels/cpu/matmul_half.h) with operands
// that are already 16-bit (a parameter's shadow, core/param.h) against the
// same product with the fp32 operands rounded on the call: the same bits, for
// bf16 and f16, every transpose, row strides, a, b or both 16-bit, at odd
// element offsets (unaligned pointers) and packed (where bf16 is read in
// place); ops::gemm, linear_forward, linear_gelu_forward and linear_backward
// with a 16-bit weight against its fp32 master; linear backward's single
// rounding of dout equals two gemm_half calls for both types; round_to_half
// is dtype.h's rounding on every element; and a 16-bit operand of a type the
// matmuls do not run in is one error naming runtime.precision. The bf16 cases
// skip, saying why, without AVX512-BF16 or oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "core/kernels/cpu/matmul_half.h"
#include "core/ops.h"
#include "core/rng.h"
#include "ops_test_helpers.h"
#include "support/error_text.h"

namespace lattice {
namespace {

// The matmuls run in the parameter type for the test's duration.
using HalfMatmul = test::HalfMatmulTest;

// rows x cols stored with row stride ld (the gap holds values beyond fp16's range).
std::vector<float> matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  return test::strided_matrix(rows, cols, ld, seed, 1.5f);
}

// v rounded to `dtype`, starting `off` elements into the returned buffer (off > 0: an unaligned start).
std::vector<uint16_t> halved(const std::vector<float>& v, DType dtype, int64_t off) {
  std::vector<uint16_t> h(v.size() + size_t(off), 0);
  cpu::round_to_half(dtype, h.data() + off, v.data(), int64_t(v.size()));
  return h;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(HalfMatmul, GemmWithHalfOperandsEqualsRoundingPerCall) {
  const DType t = GetParam();
  const int64_t m = 37, n = 53, k = 70;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t gap : {0, 3})      // ld - cols: packed (bf16 read in place) or strided
        for (int64_t off : {0, 1}) {  // the 16-bit copy's start: aligned or not
          SCOPED_TRACE(testing::Message() << "ta " << ta << " tb " << tb << " gap " << gap << " off " << off);
          const int64_t lda = (ta ? m : k) + gap, ldb = (tb ? k : n) + gap, ldc = n + 2;
          const auto a = matrix(ta ? k : m, ta ? m : k, lda, 1), b = matrix(tb ? n : k, tb ? k : n, ldb, 2);
          const auto a16 = halved(a, t, off), b16 = halved(b, t, off);
          const auto c0 = matrix(m, n, ldc, 3);
          std::vector<float> want = c0;
          cpu::gemm<float>(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, want.data(), ldc);
          const MatmulOperand ah(a16.data() + off, t), bh(b16.data() + off, t);
          for (int which = 0; which < 3; ++which) {  // a, b or both 16-bit
            std::vector<float> got = c0;
            cpu::gemm(ta, tb, m, n, k, 0.5f, which != 1 ? ah : MatmulOperand(a.data()), lda,
                      which != 0 ? bh : MatmulOperand(b.data()), ldb, 0.25f, got.data(), ldc);
            EXPECT_TRUE(same_bits(got, want)) << "16-bit operand(s) " << (which == 0 ? "a" : which == 1 ? "b" : "a, b");
          }
        }
}

// A weight's 16-bit copy, `off` elements into its own buffer.
Tensor half_copy(const Tensor& w, DType t, int64_t off) {
  Tensor buf = Tensor::zeros({w.numel() + off}, t);
  Tensor v = buf.view(off, w.shape());
  ops::round_to_half(v, w);
  return v;
}

TEST_P(HalfMatmul, LinearWithHalfWeightEqualsItsFp32Master) {
  struct Case {
    int64_t N, C, OC;
    bool bias;
    int64_t off;
  };
  for (const Case& c : {Case{48, 96, 200, true, 0}, Case{37, 129, 67, false, 1}, Case{16, 768, 64, true, 3}}) {
    SCOPED_TRACE(testing::Message() << "N " << c.N << " C " << c.C << " OC " << c.OC << " off " << c.off);
    Tensor inp = test::random_tensor({c.N, c.C}, DType::f32, 1);
    Tensor w = test::random_tensor({c.OC, c.C}, DType::f32, 2, 1.0 / std::sqrt(double(c.C)));
    Tensor bias = test::random_tensor({c.OC}, DType::f32, 3);
    Tensor w16 = half_copy(w, GetParam(), c.off);
    const Tensor* b = c.bias ? &bias : nullptr;
    auto forward = [&](const Tensor& weight) {
      Tensor out = Tensor::zeros({c.N, c.OC}, DType::f32);
      ops::linear_forward(out, inp, weight, b);
      return out;
    };
    EXPECT_TRUE(test::bitwise_equal(forward(w16), forward(w))) << "linear_forward";
    auto forward_gelu = [&](const Tensor& weight) {
      Tensor act = Tensor::zeros({c.N, c.OC}, DType::f32), pre = Tensor::zeros({c.N, c.OC}, DType::f32);
      ops::linear_gelu_forward(act, pre, inp, weight, b);
      return std::pair{act, pre};
    };
    auto [act16, pre16] = forward_gelu(w16);
    auto [act, pre] = forward_gelu(w);
    EXPECT_TRUE(test::bitwise_equal(act16, act) && test::bitwise_equal(pre16, pre)) << "linear_gelu_forward";
    Tensor dout = test::random_tensor({c.N, c.OC}, DType::f32, 4);
    Tensor dw0 = test::random_tensor({c.OC, c.C}, DType::f32, 5);  // the gradients accumulate onto it
    for (int parts = 1; parts <= 3; ++parts) {  // dinp only, dweight and dbias only, all (tp layers split them)
      auto backward = [&](const Tensor& weight) {
        Tensor dinp = Tensor::zeros({c.N, c.C}, DType::f32), dw = dw0.clone(), db = Tensor::zeros({c.OC}, DType::f32);
        ops::linear_backward(parts & 1 ? &dinp : nullptr, parts & 2 ? &dw : nullptr, parts & 2 ? &db : nullptr, dout,
                             inp, weight);
        return std::vector<Tensor>{dinp, dw, db};
      };
      const std::vector<Tensor> got = backward(w16), want = backward(w);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(test::bitwise_equal(got[i], want[i])) << "linear_backward parts " << parts << " result " << i;
    }
  }
}

TEST_P(HalfMatmul, GemmOpTakesAHalfOperandOnEitherSide) {  // e.g. a tied embedding as the LM head
  Tensor x = test::random_tensor({24, 40}, DType::f32, 6), table = test::random_tensor({50, 40}, DType::f32, 7);
  Tensor table16 = half_copy(table, GetParam(), 1);
  Tensor want = Tensor::zeros({24, 50}, DType::f32), got = Tensor::zeros({24, 50}, DType::f32);
  ops::gemm(want, x, table, false, true);
  ops::gemm(got, x, table16, false, true);
  EXPECT_TRUE(test::bitwise_equal(got, want));
  Tensor want_t = Tensor::zeros({50, 24}, DType::f32), got_t = Tensor::zeros({50, 24}, DType::f32);
  ops::gemm(want_t, table, x, false, true, 2.0f);
  ops::gemm(got_t, table16, x, false, true, 2.0f);
  EXPECT_TRUE(test::bitwise_equal(got_t, want_t));
}

// dout is rounded once for linear backward's two products: the bits of two
// gemm_half calls, each rounding it again.
TEST_P(HalfMatmul, LinearBackwardEqualsTwoGemms) {
  const DType t = GetParam();
  const int64_t N = 24, C = 40, OC = 56;
  const auto dout = matrix(N, OC, OC, 20), inp = matrix(N, C, C, 21), w = matrix(OC, C, C, 22);
  const auto dw0 = matrix(OC, C, C, 23);
  std::vector<float> dinp(size_t(N * C)), dw = dw0, ref_dinp(size_t(N * C)), ref_dw = dw0;
  cpu::linear_backward_half(t, dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  cpu::gemm_half(t, false, false, N, C, OC, 1.0f, dout.data(), OC, w.data(), C, 0.0f, ref_dinp.data(), C);
  cpu::gemm_half(t, true, false, OC, C, N, 1.0f, dout.data(), OC, inp.data(), C, 1.0f, ref_dw.data(), C);
  EXPECT_TRUE(same_bits(dinp, ref_dinp));
  EXPECT_TRUE(same_bits(dw, ref_dw));
}

INSTANTIATE_TEST_SUITE_P(Types, HalfMatmul, ::testing::Values(DType::bf16, DType::f16), test::dtype_param_name);

// round_to_half over blocks (parallel past 2^16 elements) gives dtype.h's
// scalar rounding on every element: ties, subnormals, the fp16 overflow edge,
// infinities, signed zeros; NaN stays NaN.
TEST(RoundToHalf, IsTheScalarRoundingOnEveryElement) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f + std::ldexp(1.0f, -11),
                          1.0f + 3 * std::ldexp(1.0f, -11),
                          65504.0f,
                          65520.0f,
                          -65536.0f,
                          2.98023224e-8f,
                          6.09755516e-5f,
                          1e-40f,
                          std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          f32_from_bits(0x3f808000u),
                          f32_from_bits(0x3f818000u)};  // bf16 ties at 1
  RngKey key{.seed = 4, .purpose = RngPurpose::data};
  for (uint64_t i = 0; v.size() < 3 * 16384 + 17; ++i)
    v.push_back((rng_uniform(key, 0, i) < 0.5f ? -1.0f : 1.0f) *
                std::ldexp(1.0f + rng_uniform(key, 1, i), int(rng_uniform(key, 2, i) * 60) - 40));
  const int64_t n = int64_t(v.size());
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor src = Tensor::empty({n}, DType::f32), dst = Tensor::zeros({n}, t);
    std::copy(v.begin(), v.end(), src.data<float>());
    ops::round_to_half(dst, src);
    const uint16_t* got = static_cast<const uint16_t*>(dst.raw());
    for (int64_t i = 0; i < n; ++i) {
      const float x = v[size_t(i)];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(t == DType::bf16 ? bf16_to_f32(got[i]) : f16_to_f32(got[i])));
        continue;
      }
      ASSERT_EQ(got[i], t == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x)) << "x " << x << " at " << i;
    }
  }
  Tensor wrong = Tensor::zeros({n}, DType::f32);
  EXPECT_HAS(test::error_text([&] { ops::round_to_half(wrong, wrong); }), "ops::round_to_half");
}

TEST(HalfOperands, OfAnotherTypeThanTheMatmulsAreOneError) {
  Tensor inp = test::random_tensor({4, 8}, DType::f32, 1), w = test::random_tensor({3, 8}, DType::f32, 2);
  Tensor out = Tensor::zeros({4, 3}, DType::f32);
  Tensor w16 = half_copy(w, DType::f16, 0);
  // fp32 matmuls (the default): a 16-bit weight is refused.
  EXPECT_HAS(test::error_text([&] { ops::linear_forward(out, inp, w16, nullptr); }), "runtime.precision fp16");
  EXPECT_HAS(test::error_text([&] { ops::linear_backward(nullptr, nullptr, nullptr, out, inp, w16); }),
             "the matmuls on cpu run in f32");
  cpu::set_matmul_dtype(DType::f16);
  Tensor bf = half_copy(w, DType::bf16, 0);
  EXPECT_HAS(test::error_text([&] { ops::linear_forward(out, inp, bf, nullptr); }), "runtime.precision bf16");
  // An f64 product takes f64 operands only.
  Tensor out64 = Tensor::zeros({4, 3}, DType::f64);
  EXPECT_HAS(test::error_text([&] { ops::linear_forward(out64, inp.to(DType::f64), w16, nullptr); }), "mixed tensors");
  cpu::set_matmul_dtype(DType::f32);
}

}  // namespace
}  // namespace lattice
