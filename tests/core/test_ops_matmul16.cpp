// The matmuls on 16-bit activations (core/kernels/cpu/matmul16.h through
// core/ops): for S = bf16 and f16, each op against the f32 op under the same
// 16-bit matmuls on the widened inputs (tests/support/act16.h), its 16-bit
// outputs rounded once: linear forward with and without bias, its f32-output
// form (bitwise the f32 op), linear + GELU, linear backward with each gradient
// alone and all together (dinp S or f32), a 16-bit shadow weight and its fp32
// master giving the same bits, odd shapes, gemm with every transpose and beta,
// the row blocks of outputs past 2^24 elements, and the error when S is not
// the matmul type. Every comparison is bitwise: the 16-bit path runs the same
// fp32 products on the same operand values and rounds once where the f32 op's
// result is rounded. bf16 skips, saying why, without AVX512-BF16 or oneDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/kernels/cpu/matmul.h"
#include "core/ops.h"
#include "ops_test_helpers.h"
#include "support/error_text.h"

namespace lattice::test {
namespace {

// The matmuls run in the activation type S for the test's duration.
class Matmul16 : public HalfMatmulTest {
 protected:
  DType s() const { return GetParam(); }
};

struct Shape3 {
  int64_t N, C, OC;
};
// Odd sizes (none a multiple of 16), a single element, and GPT-2's widths.
const Shape3 kShapes[] = {{37, 129, 67}, {5, 17, 3}, {1, 1, 1}, {48, 96, 200}, {16, 768, 64}};

// A weight and its 16-bit shadow.
struct Weight {
  Tensor f32, half;
};
Weight weight(int64_t OC, int64_t C, DType s, uint64_t seed) {
  Weight w{random_tensor({OC, C}, DType::f32, seed, 1.0 / std::sqrt(double(C))), Tensor::zeros({OC, C}, s)};
  ops::round_to_half(w.half, w.f32);
  return w;
}

TEST_P(Matmul16, LinearForwardIsTheF32OpRoundedOnce) {
  for (const Shape3& d : kShapes)
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(testing::Message() << "N " << d.N << " C " << d.C << " OC " << d.OC << " bias " << with_bias);
      Tensor inp = act16({d.N, d.C}, s(), 1);
      const Weight w = weight(d.OC, d.C, s(), 2);
      Tensor bias_t = random_tensor({d.OC}, DType::f32, 3);
      const Tensor* bias = with_bias ? &bias_t : nullptr;
      Tensor ref = Tensor::zeros({d.N, d.OC}, DType::f32);
      ops::linear_forward(ref, as_f32(inp), w.f32, bias);
      for (const Tensor* wt : {&w.f32, &w.half}) {
        Tensor out = Tensor::zeros({d.N, d.OC}, s()), out32 = Tensor::zeros({d.N, d.OC}, DType::f32);
        ops::linear_forward(out, inp, *wt, bias);
        expect_rounded_equal(out, ref);
        ops::linear_forward(out32, inp, *wt, bias);  // a tp partial: unrounded
        EXPECT_TRUE(bitwise_equal(out32, ref)) << "f32 out, weight " << dtype_name(wt->dtype());
      }
    }
}

TEST_P(Matmul16, LinearGeluIsTheLinearThenThe16BitGelu) {
  for (const Shape3& d : kShapes) {
    SCOPED_TRACE(testing::Message() << "N " << d.N << " C " << d.C << " OC " << d.OC);
    Tensor inp = act16({d.N, d.C}, s(), 4, 2.0);
    const Weight w = weight(d.OC, d.C, s(), 5);
    Tensor bias = random_tensor({d.OC}, DType::f32, 6);
    Tensor ref_pre = Tensor::zeros({d.N, d.OC}, DType::f32);
    ops::linear_forward(ref_pre, as_f32(inp), w.f32, &bias);
    for (const Tensor* wt : {&w.f32, &w.half}) {
      Tensor act = Tensor::zeros({d.N, d.OC}, s()), pre = Tensor::zeros({d.N, d.OC}, s());
      ops::linear_gelu_forward(act, pre, inp, *wt, &bias);
      expect_rounded_equal(pre, ref_pre);
      Tensor ref_act = Tensor::zeros({d.N, d.OC}, DType::f32);
      ops::gelu_forward(ref_act, as_f32(pre));  // GELU of the rounded pre, rounded again
      expect_rounded_equal(act, ref_act);
    }
  }
}

// Gradients of the 16-bit op with `parts` (bit 0 dinp, 1 dweight, 2 dbias),
// dinp of dtype `dinp_dtype`.
std::vector<Tensor> backward(int parts, DType dinp_dtype, const Tensor& dout, const Tensor& inp, const Tensor& w,
                             const Tensor& dw0) {
  Tensor dinp = Tensor::zeros(inp.shape(), dinp_dtype), dw = dw0.clone();
  Tensor db = random_tensor({w.dim(0)}, DType::f32, 21);  // accumulates onto it
  ops::linear_backward(parts & 1 ? &dinp : nullptr, parts & 2 ? &dw : nullptr, parts & 4 ? &db : nullptr, dout, inp, w);
  return {dinp, dw, db};
}

TEST_P(Matmul16, LinearBackwardIsTheF32OpOnTheWidenedValues) {
  for (const Shape3& d : kShapes) {
    SCOPED_TRACE(testing::Message() << "N " << d.N << " C " << d.C << " OC " << d.OC);
    Tensor dout = act16({d.N, d.OC}, s(), 7), inp = act16({d.N, d.C}, s(), 8);
    const Weight w = weight(d.OC, d.C, s(), 9);
    Tensor dw0 = random_tensor({d.OC, d.C}, DType::f32, 10);
    const std::vector<Tensor> ref = backward(7, DType::f32, as_f32(dout), as_f32(inp), w.f32, dw0);
    for (int parts = 1; parts <= 7; ++parts)
      for (const Tensor* wt : {&w.f32, &w.half})
        for (DType dinp_dtype : {s(), DType::f32}) {
          SCOPED_TRACE(testing::Message() << "parts " << parts << " weight " << dtype_name(wt->dtype()) << " dinp "
                                          << dtype_name(dinp_dtype));
          const std::vector<Tensor> got = backward(parts, dinp_dtype, dout, inp, *wt, dw0);
          if (parts & 1) {
            if (dinp_dtype == DType::f32)
              EXPECT_TRUE(bitwise_equal(got[0], ref[0])) << "dinp";
            else
              expect_rounded_equal(got[0], ref[0]);
          }
          if (parts & 2) {
            EXPECT_TRUE(bitwise_equal(got[1], ref[1])) << "dweight";
          } else {
            EXPECT_TRUE(bitwise_equal(got[1], dw0)) << "dweight untouched";
          }
          if (parts & 4) {
            EXPECT_TRUE(bitwise_equal(got[2], ref[2])) << "dbias";
          }
        }
  }
}

TEST_P(Matmul16, GemmWithA16BitOutputIsTheF32GemmRoundedOnce) {
  const int64_t m = 37, n = 53, k = 70;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 0.75f}) {
        SCOPED_TRACE(testing::Message() << "ta " << ta << " tb " << tb << " beta " << beta);
        Tensor a = act16(ta ? Shape{k, m} : Shape{m, k}, s(), 11);
        Tensor b = act16(tb ? Shape{n, k} : Shape{k, n}, s(), 12);
        Tensor b32 = random_tensor(b.shape(), DType::f32, 13);  // an fp32 operand, rounded on the call
        Tensor c0 = act16({m, n}, s(), 14);
        for (const Tensor* bt : {&b, &b32}) {
          Tensor ref = as_f32(c0), c = c0.clone();
          ops::gemm(ref, as_f32(a), bt == &b ? as_f32(b) : b32, ta, tb, 1.5f, beta);
          ops::gemm(c, a, *bt, ta, tb, 1.5f, beta);
          expect_rounded_equal(c, ref);
        }
        // An f32 c with 16-bit a and b: the f32 gemm's bits.
        Tensor ref = as_f32(c0), c32 = as_f32(c0);
        ops::gemm(ref, as_f32(a), as_f32(b), ta, tb, 1.5f, beta);
        ops::gemm(c32, a, b, ta, tb, 1.5f, beta);
        EXPECT_TRUE(bitwise_equal(c32, ref));
      }
}

// Outputs past 2^24 elements are summed in blocks of rows (a bounded
// scratch), each block the f32 op's bits on the same rows, rounded. The
// reference runs the f32 op on each block of rows, not on all N at once:
// OpenBLAS's sgemm (fp16 is sgemm on rounded operands) may give a row other
// last bits for another row count (seen with its Haswell kernels on a Zen 5),
// which is the BLAS's doing, not the blocking's.
TEST_P(Matmul16, LargeOutputsInRowBlocks) {
  const int64_t N = (int64_t(1) << 17) + 3, C = 8, OC = 130;  // N * OC > 2^24
  const int64_t block = (int64_t(1) << 24) / OC;              // matmul16.cpp's rows per block
  ASSERT_LT(block, N);
  // f(out rows [r0, r0 + rows), inp rows likewise) computes one block of the reference.
  auto blockwise = [&](Tensor& ref, const Tensor& in, int64_t in_cols, auto&& f) {
    for (int64_t r0 = 0; r0 < N; r0 += block) {
      const int64_t rows = std::min(block, N - r0);
      Tensor out = ref.view(r0 * OC, {rows, OC});
      f(out, in.view(r0 * in_cols, {rows, in_cols}));
    }
  };
  Tensor inp = act16({N, C}, s(), 15);
  const Weight w = weight(OC, C, s(), 17);
  Tensor bias = random_tensor({OC}, DType::f32, 18);
  Tensor ref = Tensor::zeros({N, OC}, DType::f32), out = Tensor::zeros({N, OC}, s());
  blockwise(ref, as_f32(inp), C, [&](Tensor& o, const Tensor& x) { ops::linear_forward(o, x, w.f32, &bias); });
  ops::linear_forward(out, inp, w.half, &bias);
  expect_rounded_equal(out, ref);
  Tensor g_ref = Tensor::zeros({N, OC}, DType::f32), g = Tensor::zeros({N, OC}, s());
  blockwise(g_ref, as_f32(inp), C, [&](Tensor& o, const Tensor& x) { ops::gemm(o, x, w.f32, false, true); });
  ops::gemm(g, inp, w.half, false, true);
  expect_rounded_equal(g, g_ref);
  // dinp (N, OC) of a layer (OC, C) -> (N, C) outputs: weight (C, OC), dout (N, C).
  const Weight wt = weight(C, OC, s(), 19);
  Tensor x = Tensor::zeros({N, OC}, s()), dout_c = act16({N, C}, s(), 20);
  Tensor dref = Tensor::zeros({N, OC}, DType::f32), dinp = Tensor::zeros({N, OC}, s());
  blockwise(dref, as_f32(dout_c), C, [&](Tensor& o, const Tensor& d) {
    ops::linear_backward(&o, nullptr, nullptr, d, Tensor::zeros({d.dim(0), OC}, DType::f32), wt.f32);
  });
  ops::linear_backward(&dinp, nullptr, nullptr, dout_c, x, wt.half);
  expect_rounded_equal(dinp, dref);
}

INSTANTIATE_TEST_SUITE_P(Types, Matmul16, ::testing::Values(DType::bf16, DType::f16), dtype_param_name);

TEST(Matmul16Errors, ActivationsOfAnotherTypeThanTheMatmulsAreOneError) {
  Tensor inp = act16({4, 8}, DType::f16, 1), out = Tensor::zeros({4, 3}, DType::f16);
  Tensor w = random_tensor({3, 8}, DType::f32, 2), dw = Tensor::zeros({3, 8}, DType::f32);
  // fp32 matmuls (the default): 16-bit activations are refused, naming the precision.
  std::string e = error_text([&] { ops::linear_forward(out, inp, w, nullptr); });
  EXPECT_HAS(e, "ops::linear_forward: f16 activations need the matmuls on cpu to run in f16");
  EXPECT_HAS(e, "runtime.precision fp16");
  EXPECT_HAS(e, "they run in f32");
  EXPECT_HAS(error_text([&] { ops::linear_backward(nullptr, &dw, nullptr, out, inp, w); }), "ops::linear_backward");
  EXPECT_HAS(error_text([&] { ops::gemm(out, inp, w, false, true); }), "ops::gemm: f16 activations");
  // bf16 activations under fp16 matmuls.
  cpu::set_matmul_dtype(DType::f16);
  Tensor inp_bf = act16({4, 8}, DType::bf16, 1), out_bf = Tensor::zeros({4, 3}, DType::bf16);
  EXPECT_HAS(error_text([&] { ops::linear_forward(out_bf, inp_bf, w, nullptr); }), "runtime.precision bf16");
  // Beside f16 activations: out f16 or f32 only; a bf16 shadow is refused; parameter gradients f32.
  EXPECT_HAS(error_text([&] { ops::linear_forward(out_bf, inp, w, nullptr); }), "out must be f16 or f32");
  Tensor w_bf = Tensor::zeros({3, 8}, DType::bf16);
  EXPECT_HAS(error_text([&] { ops::linear_forward(out, inp, w_bf, nullptr); }), "mixed tensors");
  Tensor dw16 = Tensor::zeros({3, 8}, DType::f16);
  EXPECT_HAS(error_text([&] { ops::linear_backward(nullptr, &dw16, nullptr, out, inp, w); }), "must be f32");
  EXPECT_NO_THROW(ops::linear_forward(out, inp, w, nullptr));
  cpu::set_matmul_dtype(DType::f32);
}

}  // namespace
}  // namespace lattice::test
