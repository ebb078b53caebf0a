// Tests src/core/cuda/lt_plan.h, the host-side choice of the cuBLASLt matmul
// behind a CUDA linear layer, on the CPU: the row-major to column-major
// mapping, transposes and leading dimensions, where the bias goes (epilogue
// or kernel), the alignment preferences, and the empty shapes. Runs without a
// device. That the chosen descriptors compute the CPU's linear is checked on
// a GPU by test_cuda_linear.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "core/cuda/lt_plan.h"

namespace lattice::cuda {
namespace {

constexpr uintptr_t kBase = uintptr_t(1) << 20;  // a 256-byte aligned address

TEST(LtPlan, MapsTheRowMajorLayerToColumnMajor) {
  // out (N, OC) = inp (N, C) weight (OC, C)^T: D (OC, N) = A^T (OC, C) B (C, N).
  const int64_t N = 6, C = 5, OC = 3;
  const LtLinearPlan p = plan_lt_linear(N, C, OC, kBase, 2 * kBase, 3 * kBase, 4 * kBase);
  EXPECT_TRUE(p.matmul);
  EXPECT_FALSE(p.zero_out);
  EXPECT_EQ(p.op_a, LtOp::t);
  EXPECT_EQ(p.op_b, LtOp::n);
  EXPECT_EQ(p.m, OC);
  EXPECT_EQ(p.n, N);
  EXPECT_EQ(p.k, C);
  EXPECT_EQ(p.a, (LtLayout{uint64_t(C), uint64_t(OC), C}));  // weight as stored: (C, OC), ld C
  EXPECT_EQ(p.b, (LtLayout{uint64_t(C), uint64_t(N), C}));   // inp as stored: (C, N), ld C
  EXPECT_EQ(p.d, (LtLayout{uint64_t(OC), uint64_t(N), OC}));
}

TEST(LtPlan, LayoutsAgreeWithTheProductShape) {
  // op(A) is (m, k) and op(B) is (k, n) for every shape, including ones.
  for (int64_t N : {1, 7, 64})
    for (int64_t C : {1, 3, 768})
      for (int64_t OC : {1, 5, 2304}) {
        SCOPED_TRACE(testing::Message() << "N " << N << " C " << C << " OC " << OC);
        const LtLinearPlan p = plan_lt_linear(N, C, OC, kBase, kBase, kBase, 0);
        const uint64_t a_rows = p.op_a == LtOp::t ? p.a.cols : p.a.rows;
        const uint64_t a_cols = p.op_a == LtOp::t ? p.a.rows : p.a.cols;
        const uint64_t b_rows = p.op_b == LtOp::t ? p.b.cols : p.b.rows;
        const uint64_t b_cols = p.op_b == LtOp::t ? p.b.rows : p.b.cols;
        EXPECT_EQ(a_rows, uint64_t(p.m));
        EXPECT_EQ(a_cols, uint64_t(p.k));
        EXPECT_EQ(b_rows, uint64_t(p.k));
        EXPECT_EQ(b_cols, uint64_t(p.n));
        EXPECT_EQ(p.d.rows, uint64_t(p.m));
        EXPECT_EQ(p.d.cols, uint64_t(p.n));
        // Contiguous column-major storage: ld is the stored row count.
        for (const LtLayout& l : {p.a, p.b, p.d}) EXPECT_EQ(l.ld, int64_t(l.rows));
      }
}

TEST(LtPlan, BiasGoesToTheEpilogueWhenAligned) {
  EXPECT_EQ(plan_lt_linear(4, 8, 2, kBase, kBase, kBase, 0).bias, LtBias::none);
  EXPECT_EQ(plan_lt_linear(4, 8, 2, kBase, kBase, kBase, kBase).bias, LtBias::epilogue);
  EXPECT_EQ(plan_lt_linear(4, 8, 2, kBase, kBase, kBase, kBase + 16).bias, LtBias::epilogue);
  // A bias view at an odd float offset into a flat buffer: the kernel adds it.
  EXPECT_EQ(plan_lt_linear(4, 8, 2, kBase, kBase, kBase, kBase + 4).bias, LtBias::kernel);
  EXPECT_EQ(plan_lt_linear(4, 8, 2, kBase, kBase, kBase, kBase + 8).bias, LtBias::kernel);
  // The bias does not depend on the other pointers' alignment.
  EXPECT_EQ(plan_lt_linear(4, 8, 2, kBase + 4, kBase + 4, kBase + 4, kBase).bias, LtBias::epilogue);
}

TEST(LtPlan, WithoutBiasEpilogueMovesOnlyAnEpilogueBias) {
  LtLinearPlan fused = plan_lt_linear(4, 8, 2, kBase, kBase, kBase, kBase);
  LtLinearPlan moved = without_bias_epilogue(fused);
  EXPECT_EQ(moved.bias, LtBias::kernel);
  EXPECT_TRUE(moved.matmul);
  EXPECT_EQ(moved.a, fused.a);
  EXPECT_EQ(moved.d, fused.d);
  EXPECT_EQ(without_bias_epilogue(plan_lt_linear(4, 8, 2, kBase, kBase, kBase, 0)).bias, LtBias::none);
  EXPECT_EQ(without_bias_epilogue(plan_lt_linear(4, 8, 2, kBase, kBase, kBase, kBase + 4)).bias, LtBias::kernel);
}

TEST(LtPlan, GeluGoesToTheEpilogueWithTheBiasWhenItCan) {
  // pre at kBase, act at 2 kBase: the epilogue writes act as D and pre as aux (ld OC).
  const LtLinearPlan p = plan_lt_linear_gelu(4, 8, 16, kBase, kBase, kBase, 2 * kBase + 8, kBase);
  EXPECT_EQ(p.gelu, LtGelu::epilogue);
  EXPECT_EQ(p.bias, LtBias::epilogue);
  EXPECT_EQ(p.aux_ld, 16);
  EXPECT_EQ(p.align_d, 8u);  // D is act now
  EXPECT_EQ(p.d, (LtLayout{16, 4, 16}));
  // No bias: GELU_AUX alone.
  const LtLinearPlan nb = plan_lt_linear_gelu(4, 8, 16, kBase, kBase, kBase, kBase, 0);
  EXPECT_EQ(nb.gelu, LtGelu::epilogue);
  EXPECT_EQ(nb.bias, LtBias::none);
  // The matmul part is the plain linear plan's.
  const LtLinearPlan lin = plan_lt_linear(4, 8, 16, kBase, kBase, kBase, kBase);
  EXPECT_EQ(p.a, lin.a);
  EXPECT_EQ(p.b, lin.b);
  EXPECT_EQ(p.m, lin.m);
  EXPECT_EQ(p.k, lin.k);
}

TEST(LtPlan, GeluTakesTheKernelWhereTheEpilogueCannot) {
  auto gelu_of = [](int64_t OC, uintptr_t pre, uintptr_t bias, bool ok = true) {
    return plan_lt_linear_gelu(4, 8, OC, kBase, kBase, pre, kBase, bias, ok).gelu;
  };
  EXPECT_EQ(gelu_of(12, kBase, kBase), LtGelu::kernel);         // aux ld 12 is not a multiple of 8
  EXPECT_EQ(gelu_of(16, kBase, kBase + 4), LtGelu::kernel);     // a kernel bias would come after the GELU
  EXPECT_EQ(gelu_of(16, kBase + 8, kBase), LtGelu::kernel);     // pre below 16-byte alignment
  EXPECT_EQ(gelu_of(16, kBase, kBase, false), LtGelu::kernel);  // the probe found another GELU
  EXPECT_EQ(gelu_of(16, kBase + 16, 0), LtGelu::epilogue);
  // C == 0: no matmul, so the kernel (on zeros plus the bias).
  const LtLinearPlan z = plan_lt_linear_gelu(4, 0, 16, kBase, kBase, kBase, kBase, kBase);
  EXPECT_EQ(z.gelu, LtGelu::kernel);
  EXPECT_TRUE(z.zero_out);
  // Empty outputs: nothing at all.
  EXPECT_EQ(plan_lt_linear_gelu(0, 8, 16, kBase, kBase, kBase, kBase, kBase).gelu, LtGelu::none);
  EXPECT_EQ(plan_lt_linear_gelu(4, 8, 0, kBase, kBase, kBase, kBase, kBase).gelu, LtGelu::none);
}

TEST(LtPlan, AlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(lt_alignment(0), 256u);
  EXPECT_EQ(lt_alignment(kBase), 256u);
  EXPECT_EQ(lt_alignment(kBase + 512), 256u);
  EXPECT_EQ(lt_alignment(kBase + 128), 128u);
  EXPECT_EQ(lt_alignment(kBase + 4), 4u);
  EXPECT_EQ(lt_alignment(kBase + 12), 4u);
  EXPECT_EQ(lt_alignment(kBase + 24), 8u);
  EXPECT_EQ(lt_alignment(kBase + 48), 16u);
  EXPECT_EQ(lt_alignment(3), 1u);
}

TEST(LtPlan, AlignmentPreferencesFollowEachPointer) {
  // inp is B, weight is A, out is C and D.
  const LtLinearPlan p = plan_lt_linear(4, 8, 2, kBase + 4, kBase + 32, kBase + 8, 0);
  EXPECT_EQ(p.align_b, 4u);
  EXPECT_EQ(p.align_a, 32u);
  EXPECT_EQ(p.align_d, 8u);
}

TEST(LtPlan, EmptyShapes) {
  for (auto [N, OC] : {std::pair<int64_t, int64_t>{0, 3}, {3, 0}, {0, 0}}) {
    const LtLinearPlan p = plan_lt_linear(N, 4, OC, kBase, kBase, kBase, kBase);
    EXPECT_FALSE(p.matmul);
    EXPECT_FALSE(p.zero_out);
    EXPECT_EQ(p.bias, LtBias::none);  // out has no elements: nothing to add
  }
  // C == 0: the product is an empty sum, so out = 0, then the bias by kernel.
  const LtLinearPlan p = plan_lt_linear(3, 0, 2, kBase, kBase, kBase, kBase);
  EXPECT_FALSE(p.matmul);
  EXPECT_TRUE(p.zero_out);
  EXPECT_EQ(p.bias, LtBias::kernel);
  EXPECT_EQ(plan_lt_linear(3, 0, 2, kBase, kBase, kBase, 0).bias, LtBias::none);
}

}  // namespace
}  // namespace lattice::cuda
