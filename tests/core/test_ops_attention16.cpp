// The CPU attention kernels (core/kernels/cpu/attention.cpp, causal;
// attention_masked.cpp, key-padding mask) on 16-bit activations through
// lattice::ops, for bf16 and f16 with the matmuls in that type:
//   - forward out and the saved probabilities against the f32 kernel on the
//     same rounded qkv under the same 16-bit matmuls, its results rounded
//     (tests/support/act16.h);
//   - backward dqkv against the f32 backward fed the same rounded dout, qkv
//     and saved P;
//   - both against the f64 kernel on the same inputs at a loose tolerance;
//   - the results do not depend on the thread count;
//   - 16-bit activations with the matmuls in another type are one error.
// Causal and masked (a padded sample, a sample with no valid key), dropout
// p = 0 and p > 0, a tp head offset, odd T (one crossing the causal kernel's
// 128-row block) and odd head sizes. The bf16 cases skip, saying why, without
// AVX512-BF16 or oneDNN.
//
// Why bitwise: the 16-bit kernel does the f32 kernel's arithmetic on the
// same values. Its products get the same operands (a 16-bit operand is read
// as it is, the f32 kernel's fp32 operand holding the same value is rounded
// to it: test_ops_matmul_half shows these give the same bits), its scores,
// softmax, dropout and softmax backward are the same fp32 row functions on
// the same values, and it rounds each output once, where the test rounds the
// f32 kernel's. P stored in 16-bit changes no forward bit: the product
// P @ V rounds P to that type in both kernels.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "core/kernels/cpu/matmul.h"
#include "core/ops.h"
#include "ops_test_helpers.h"
#include "support/act16.h"
#include "support/attention_case.h"
#include "support/error_text.h"

namespace lattice {
namespace {

using Case = test::AttentionCase;
using Results = test::AttentionResults;

Results run(const Case& c, const Tensor& qkv, const Tensor& dout, const Tensor& saved = Tensor(),
            const Shape& state = {}) {
  return test::run_attention(c, qkv, dout, saved, state);
}

const std::vector<Case> kCases = {
    {"causal", 2, 9, 2, 8, false, 0.0f, 0},
    {"causal_dropout_tp_offset", 2, 17, 3, 5, false, 0.2f, 3},
    {"causal_odd_T_crosses_block", 1, 133, 2, 7, false, 0.1f, 1},
    {"causal_threads", 2, 64, 4, 16, false, 0.0f, 0},
    {"masked", 3, 11, 2, 8, true, 0.0f, 0},
    {"masked_dropout_tp_offset", 3, 21, 2, 9, true, 0.25f, 2},
};

// The matmuls run in the parameter's type for the test's duration.
class Attention16 : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    const std::string why = test::half_matmuls_missing(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
    cpu::set_matmul_dtype(GetParam());
  }
  void TearDown() override { cpu::set_matmul_dtype(DType::f32); }

  // Rounded inputs of case c.
  Tensor qkv(const Case& c) const { return test::act16({c.B, c.T, 3 * c.C()}, GetParam(), 31, 1.5); }
  Tensor dout(const Case& c) const { return test::act16({c.B, c.T, c.C()}, GetParam(), 32); }
};

TEST_P(Attention16, ForwardIsTheF32KernelRounded) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Tensor q = qkv(c), g = dout(c);
    const Results h = run(c, q, g), f = run(c, test::as_f32(q), test::as_f32(g));
    test::expect_rounded_equal(h.att, f.att);
    test::expect_rounded_equal(h.out, f.out);
  }
}

TEST_P(Attention16, BackwardIsTheF32KernelOnTheStoredProbabilities) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Tensor q = qkv(c), g = dout(c);
    const Results h = run(c, q, g);
    // The f32 backward on the same values: qkv, dout and the 16-bit P widened.
    const Results f = run(c, test::as_f32(q), test::as_f32(g), test::as_f32(h.att));
    test::expect_rounded_equal(h.dqkv, f.dqkv);
  }
}

// The 16-bit results against exact math on the same rounded inputs: what the
// roundings of P, dS and the outputs cost. Loose: twice the 16-bit tolerance
// of tests/support (bf16 keeps 8 significant bits, fp16 11).
TEST_P(Attention16, CloseToF64) {
  const test::Tolerance t = test::tolerance(GetParam());
  const test::Tolerance loose{2 * t.rtol, 2 * t.atol};
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Tensor q = qkv(c), g = dout(c);
    const Results h = run(c, q, g), x = run(c, test::to_f64(q), test::to_f64(g));
    EXPECT_TENSOR_NEAR(test::as_f32(h.att), x.att, loose);
    EXPECT_TENSOR_NEAR(test::as_f32(h.out), x.out, loose);
    EXPECT_TENSOR_NEAR(test::as_f32(h.dqkv), x.dqkv, loose);
  }
}

// The CPU's compact state (row statistics; backward computes P again,
// rounds it to 16 bits and widens it, as the full state is read) gives the
// full state's bits: out, dqkv, and the statistics agree with P.
TEST_P(Attention16, CompactStateGivesTheFullStatesBits) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Tensor q = qkv(c), g = dout(c);
    const Shape compact = ops::attention_state_shape({.B = c.B, .T = c.T, .NH = c.NH, .HS = c.C() / c.NH}, GetParam(),
                                                     ops::AttentionState::compact_cpu);
    ASSERT_EQ(compact, Shape({4 * c.B * c.NH * c.T}));  // two fp32 values per row, in 16-bit elements
    const Results full = run(c, q, g), small = run(c, q, g, Tensor(), compact);
    EXPECT_TRUE(test::bitwise_equal(small.out, full.out));
    EXPECT_TRUE(test::bitwise_equal(small.dqkv, full.dqkv));
  }
}

TEST_P(Attention16, ResultsDoNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Tensor q = qkv(c), g = dout(c);
    omp_set_num_threads(1);
    const Results one = run(c, q, g);
    omp_set_num_threads(std::max(2, saved));
    const Results many = run(c, q, g);
    omp_set_num_threads(saved);
    EXPECT_TRUE(test::bitwise_equal(one.out, many.out));
    EXPECT_TRUE(test::bitwise_equal(one.att, many.att));
    EXPECT_TRUE(test::bitwise_equal(one.dqkv, many.dqkv));
  }
}

// 16-bit attention hands its operands to the matmuls as they are: with the
// matmuls in another type it is one error naming runtime.precision.
TEST_P(Attention16, NeedsTheMatmulsInItsType) {
  const DType other = GetParam() == DType::bf16 ? DType::f16 : DType::bf16;
  const Case c = kCases[0];
  Tensor q = test::act16({c.B, c.T, 3 * c.C()}, other, 1), out = Tensor::empty({c.B, c.T, c.C()}, other);
  Tensor att = Tensor::empty({c.B, c.NH, c.T, c.T}, other), dq = Tensor::empty(q.shape(), other);
  Tensor dS = Tensor::empty(att.shape(), other);
  const std::string want = other == DType::bf16 ? "runtime.precision bf16" : "runtime.precision fp16";
  const std::string f =
      test::error_text([&] { ops::attention_forward(out, att, q, int(c.NH), test::attention_dropout(0.0f)); });
  EXPECT_HAS(f, "ops::attention_forward");
  EXPECT_HAS(f, want);
  EXPECT_HAS(f, "run in " + std::string(dtype_name(GetParam())));
  EXPECT_HAS(test::error_text([&] {
               ops::attention_masked_backward(dq, dS, out, q, att, nullptr, int(c.NH), test::attention_dropout(0.0f));
             }),
             want);
  cpu::set_matmul_dtype(DType::f32);
  EXPECT_HAS(
      test::error_text([&] { ops::attention_backward(dq, dS, out, q, att, int(c.NH), test::attention_dropout(0.0f)); }),
      "they run in f32");
}

INSTANTIATE_TEST_SUITE_P(Types, Attention16, ::testing::ValuesIn(test::kAct16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace lattice
