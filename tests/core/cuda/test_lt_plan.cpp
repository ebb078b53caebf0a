// Tests src/core/cuda/lt_plan.h, the host-side choice of the cuBLASLt matmuls
// behind a CUDA linear layer, on the CPU: the row-major to column-major
// mapping, transposes and leading dimensions, where the bias and the bias
// gradient go (epilogue or kernel), the alignment preferences, the empty
// shapes, the cache key and the bounded cache. Each plan is also run through
// a host emulation of what cublasLtMatmul computes for it (column-major
// storage, the ops, beta, and the epilogues as cublasLt.h describes them) on
// the row-major buffers, and compared with the CPU linear in f64. Runs
// without a device. That cuBLASLt agrees with that reading is checked on a
// GPU by test_cuda_linear.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/cuda/lt_plan.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/math.h"

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

// ---- the plans' math, emulated -------------------------------------------

using Buf = std::vector<double>;

Buf filled(int64_t n, double seed) {
  Buf v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.7 * double(i)) * (1.0 + double(i % 5) / 4.0);
  return v;
}

// Element (r, c) of a column-major matrix stored as `l` in `m`.
double& at(Buf& m, const LtLayout& l, uint64_t r, uint64_t c) {
  EXPECT_LT(r, l.rows);
  EXPECT_LT(c, l.cols);
  return m.at(size_t(c * uint64_t(l.ld) + r));
}
double op_at(Buf& m, const LtLayout& l, LtOp op, int64_t i, int64_t j) {
  return op == LtOp::n ? at(m, l, uint64_t(i), uint64_t(j)) : at(m, l, uint64_t(j), uint64_t(i));
}

// What cublasLtMatmul computes for plan `p` on these buffers (cublasLt.h):
// D = op(A) op(B) (+ C = D when it accumulates); BIAS adds the vector (one
// value per row of D) to every column; GELU_AUX writes the GELU input to aux
// (ld aux_ld) and D = gelu of it; BGRADB writes, per column j of D, the sum
// of op(B)(k, j) over the GEMM's k into the bias vector.
void emulate(const LtLinearPlan& p, Buf& a, Buf& b, Buf& d, Buf* bias, Buf* aux) {
  ASSERT_TRUE(p.matmul);
  const LtEpilogue e = lt_epilogue(p);
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      double acc = p.accumulate ? at(d, p.d, uint64_t(i), uint64_t(j)) : 0.0;
      for (int64_t k = 0; k < p.k; ++k) acc += op_at(a, p.a, p.op_a, i, k) * op_at(b, p.b, p.op_b, k, j);
      if (e == LtEpilogue::bias || e == LtEpilogue::gelu_aux_bias) acc += bias->at(size_t(i));
      if (e == LtEpilogue::gelu_aux || e == LtEpilogue::gelu_aux_bias) {
        aux->at(size_t(j * p.aux_ld + i)) = acc;
        acc = math::gelu(acc);
      }
      at(d, p.d, uint64_t(i), uint64_t(j)) = acc;
    }
  if (e != LtEpilogue::bgradb) return;
  for (int64_t j = 0; j < p.n; ++j) {
    double sum = 0;
    for (int64_t k = 0; k < p.k; ++k) sum += op_at(b, p.b, p.op_b, k, j);
    bias->at(size_t(j)) = sum;
  }
}

void expect_near(const Buf& got, const Buf& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << i;
}

constexpr int64_t kShapes[][3] = {{6, 5, 3}, {1, 1, 1}, {7, 16, 24}, {33, 8, 9}};  // N, C, OC

TEST(LtPlan, ForwardPlansComputeTheLinear) {
  for (const auto& [N, C, OC] : kShapes) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C << " OC " << OC);
    Buf inp = filled(N * C, 1), weight = filled(OC * C, 2), bias = filled(OC, 3), want(size_t(N * OC));
    cpu::linear_forward<double>(want.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    Buf out(size_t(N * OC), 99.0);
    emulate(plan_lt_linear(N, C, OC, kBase, kBase, kBase, kBase), weight, inp, out, &bias, nullptr);
    expect_near(out, want);
    // GELU_AUX_BIAS: aux is pre, D is gelu(pre), where the plan fuses (OC % 8 == 0).
    const LtLinearPlan g = plan_lt_linear_gelu(N, C, OC, kBase, kBase, kBase, kBase, kBase);
    if (g.gelu != LtGelu::epilogue) continue;
    Buf act(size_t(N * OC), 99.0), pre(size_t(N * OC), 99.0), want_act(want.size());
    emulate(g, weight, inp, act, &bias, &pre);
    expect_near(pre, want);
    for (size_t i = 0; i < want.size(); ++i) want_act[i] = math::gelu(want[i]);
    expect_near(act, want_act);
  }
}

TEST(LtPlan, BackwardPlansComputeTheGradients) {
  for (const auto& [N, C, OC] : kShapes) {
    SCOPED_TRACE(testing::Message() << "N " << N << " C " << C << " OC " << OC);
    Buf inp = filled(N * C, 1), weight = filled(OC * C, 2), dout = filled(N * OC, 4);
    Buf want_dinp(size_t(N * C)), want_dweight = filled(OC * C, 5), want_dbias(size_t(OC), 0.0);
    Buf dweight = want_dweight;  // dweight accumulates
    cpu::linear_backward<double>(want_dinp.data(), want_dweight.data(), want_dbias.data(), dout.data(), inp.data(),
                                 weight.data(), N, C, OC);

    const LtLinearPlan pi = plan_lt_linear_dinp(N, C, OC, kBase, kBase, kBase);
    EXPECT_FALSE(pi.accumulate);
    Buf dinp(size_t(N * C), 99.0);
    emulate(pi, weight, dout, dinp, nullptr, nullptr);
    expect_near(dinp, want_dinp);

    const LtLinearPlan pw = plan_lt_linear_dweight(N, C, OC, kBase, kBase, kBase, true, kBase);
    EXPECT_TRUE(pw.accumulate);
    EXPECT_EQ(pw.bgrad, LtBgrad::epilogue);
    EXPECT_EQ(lt_epilogue(pw), LtEpilogue::bgradb);
    Buf scratch(size_t(OC), 99.0);  // written by the epilogue, then added to dbias (zero here)
    emulate(pw, inp, dout, dweight, &scratch, nullptr);
    expect_near(dweight, want_dweight);
    expect_near(scratch, want_dbias);
  }
}

// The matmul of a plan: ops, stored layouts and alignments (A, B, D).
void expect_matmul(const LtLinearPlan& p, LtOp op_a, LtOp op_b, const LtLayout& a, const LtLayout& b, const LtLayout& d,
                   std::array<uint32_t, 3> align) {
  EXPECT_TRUE(p.matmul);
  EXPECT_EQ(p.op_a, op_a);
  EXPECT_EQ(p.op_b, op_b);
  EXPECT_EQ(p.a, a);
  EXPECT_EQ(p.b, b);
  EXPECT_EQ(p.d, d);
  EXPECT_EQ((std::array<uint32_t, 3>{p.align_a, p.align_b, p.align_d}), align);
}

TEST(LtPlan, BackwardPlansLayouts) {
  const uint64_t N = 6, C = 5, OC = 3;
  // dinp (N, C) = dout (N, OC) weight (OC, C): D (C, N) = weight (C, OC) dout (OC, N).
  const LtLinearPlan pi = plan_lt_linear_dinp(N, C, OC, kBase + 4, kBase + 8, kBase + 16);
  expect_matmul(pi, LtOp::n, LtOp::n, {C, OC, C}, {OC, N, OC}, {C, N, C}, {8, 4, 16});  // weight, dout, dinp
  EXPECT_EQ(lt_epilogue(pi), LtEpilogue::none);
  // dweight (OC, C) += dout^T inp: D (C, OC) = inp (C, N) dout^T (N, OC).
  const LtLinearPlan pw = plan_lt_linear_dweight(N, C, OC, kBase + 4, kBase + 8, kBase + 32, true, kBase + 64);
  expect_matmul(pw, LtOp::n, LtOp::t, {C, N, C}, {OC, N, OC}, {C, OC, C}, {4, 8, 32});  // inp, dout, dweight
  EXPECT_EQ(pw.align_bias, 64u);
  // Without dbias: no epilogue. When the heuristic has no BGRADB algorithm: the kernel.
  EXPECT_EQ(plan_lt_linear_dweight(N, C, OC, kBase, kBase, kBase, false, kBase).bgrad, LtBgrad::none);
  const LtLinearPlan fallback = without_bias_epilogue(pw);
  EXPECT_EQ(fallback.bgrad, LtBgrad::kernel);
  EXPECT_EQ(lt_epilogue(fallback), LtEpilogue::none);
  EXPECT_TRUE(fallback.accumulate);
}

TEST(LtPlan, BackwardEmptyShapes) {
  // No rows: dinp has no elements, dweight and dbias get nothing added.
  EXPECT_FALSE(plan_lt_linear_dinp(0, 4, 3, kBase, kBase, kBase).matmul);
  EXPECT_FALSE(plan_lt_linear_dinp(0, 4, 3, kBase, kBase, kBase).zero_out);
  const LtLinearPlan no_rows = plan_lt_linear_dweight(0, 4, 3, kBase, kBase, kBase, true, kBase);
  EXPECT_FALSE(no_rows.matmul);
  EXPECT_EQ(no_rows.bgrad, LtBgrad::none);
  // OC == 0: dinp is an empty sum, zeroed; no dweight, no dbias.
  EXPECT_TRUE(plan_lt_linear_dinp(5, 4, 0, kBase, kBase, kBase).zero_out);
  EXPECT_FALSE(plan_lt_linear_dweight(5, 4, 0, kBase, kBase, kBase, true, kBase).matmul);
  // C == 0: dinp and dweight have no elements; dbias still sums dout, by kernel.
  EXPECT_FALSE(plan_lt_linear_dinp(5, 0, 3, kBase, kBase, kBase).zero_out);
  const LtLinearPlan no_cols = plan_lt_linear_dweight(5, 0, 3, kBase, kBase, kBase, true, kBase);
  EXPECT_FALSE(no_cols.matmul);
  EXPECT_EQ(no_cols.bgrad, LtBgrad::kernel);
}

// ---- cache ----------------------------------------------------------------

TEST(LtPlan, KeyIgnoresAddressesButNotAlignments) {
  const LtLinearPlan p = plan_lt_linear(4, 8, 16, kBase, 2 * kBase, 3 * kBase, 4 * kBase);
  // Other buffers at the same alignments: the same key, so one cached entry.
  EXPECT_EQ(lt_key(0, p), lt_key(0, plan_lt_linear(4, 8, 16, 5 * kBase, 6 * kBase, 7 * kBase, 8 * kBase)));
  std::set<LtKey> keys{lt_key(0, p), lt_key(1, p)};  // another device
  for (const LtLinearPlan& q : {
           plan_lt_linear(4, 8, 16, kBase + 4, kBase, kBase, kBase),          // inp alignment
           plan_lt_linear(4, 8, 16, kBase, kBase + 8, kBase, kBase),          // weight alignment
           plan_lt_linear(4, 8, 16, kBase, kBase, kBase + 16, kBase),         // out alignment
           plan_lt_linear(4, 8, 16, kBase, kBase, kBase, kBase + 32),         // bias alignment (the heuristic reads it)
           plan_lt_linear(4, 8, 16, kBase, kBase, kBase, 0),                  // no bias: another epilogue
           plan_lt_linear(5, 8, 16, kBase, kBase, kBase, kBase),              // N
           plan_lt_linear(4, 9, 16, kBase, kBase, kBase, kBase),              // C
           plan_lt_linear(4, 8, 17, kBase, kBase, kBase, kBase),              // OC
           plan_lt_linear_gelu(4, 8, 16, kBase, kBase, kBase, kBase, kBase),  // GELU_AUX_BIAS
           plan_lt_linear_gelu(4, 8, 16, kBase, kBase, kBase + 16, kBase, kBase),  // its aux alignment
           plan_lt_linear_dinp(4, 8, 16, kBase, kBase, kBase),
           plan_lt_linear_dweight(4, 8, 16, kBase, kBase, kBase, false, 0),
           plan_lt_linear_dweight(4, 8, 16, kBase, kBase, kBase, true, kBase),
       })
    keys.insert(lt_key(0, q));
  EXPECT_EQ(keys.size(), 15u);
  // A vector the epilogue does not have does not split keys.
  const LtLinearPlan no_bias = plan_lt_linear_dweight(4, 8, 16, kBase, kBase, kBase, false, kBase);
  EXPECT_EQ(lt_key(0, no_bias), lt_key(0, plan_lt_linear_dweight(4, 8, 16, kBase, kBase, kBase, false, kBase + 4)));
  EXPECT_EQ(lt_key(0, without_bias_epilogue(p)),
            lt_key(0, without_bias_epilogue(plan_lt_linear(4, 8, 16, kBase, 2 * kBase, 3 * kBase, kBase + 16))));
}

TEST(LtPlan, CacheBuildsOncePerKeyAndStaysBounded) {
  struct Built {
    int id = 0;
  };
  LtCache<Built> cache(3);
  int made = 0;
  auto make = [&](Built& b) { b.id = ++made; };
  auto key = [](int64_t N) { return lt_key(0, plan_lt_linear(N, 8, 16, kBase, kBase, kBase, kBase)); };
  EXPECT_EQ(cache.get(key(1), make).id, 1);
  EXPECT_EQ(cache.get(key(1), make).id, 1);  // a hit: not built again
  EXPECT_EQ(cache.get(key(2), make).id, 2);
  EXPECT_EQ(cache.get(key(3), make).id, 3);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.builds(), 3u);
  Built& fourth = cache.get(key(4), make);  // full: starts over
  EXPECT_EQ(fourth.id, 4);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.get(key(1), make).id, 5);  // built again
  EXPECT_EQ(&cache.get(key(4), make), &fourth) << "entries move while cached";
  // A build that throws leaves nothing behind; the next call builds again.
  EXPECT_THROW(cache.get(key(9), [](Built&) { throw std::runtime_error("cublasLtMatmulDescCreate failed"); }),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.get(key(9), make).id, 6);
}

}  // namespace
}  // namespace lattice::cuda
