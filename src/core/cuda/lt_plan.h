// The host-side choice of the cuBLASLt matmul behind a CUDA linear layer
// (CudaBackend::linear_forward), as plain C++ with no CUDA header, so the CPU
// tests check it (tests/core/cuda/test_lt_plan.cpp). lt_linear.cpp turns a
// plan into cuBLASLt descriptors and runs it.
//
// The layer: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), all
// row-major and contiguous. cuBLASLt is column-major, and a row-major (r, c)
// matrix is a column-major (c, r) one with leading dimension c, so the plan
// computes
//   D (OC, N) = op(A) (OC, C) * op(B) (C, N)  [+ bias (OC) on every column]
//   A = weight, stored (C, OC) ld C, op T
//   B = inp,    stored (C, N)  ld C, op N
//   C = D = out, stored (OC, N) ld OC, beta 0 (C is not read).
// Layouts describe A and B as stored, before their op, as
// cublasLtMatrixLayoutCreate takes them. CUBLASLT_EPILOGUE_BIAS adds a packed
// vector whose length is D's row count (OC) to every column of D, which is
// the row-major bias per output feature.
//
// Where the bias goes (LtBias):
//  - epilogue: CUBLASLT_EPILOGUE_BIAS with CUBLASLT_MATMUL_DESC_BIAS_POINTER.
//  - kernel: a plain matmul (CUBLASLT_EPILOGUE_DEFAULT), then the add_bias
//    kernel. Chosen when the bias address is not a multiple of kLtBiasAlign
//    bytes: cuBLASLt documents no alignment for the bias vector but reads its
//    address to pick algorithms, and vectorised epilogues are reported to
//    fail below 16 bytes (Marian NMT's cuBLASLt path falls back the same
//    way), so a view at an odd float offset takes the kernel. Also chosen
//    at run time when the heuristic offers no algorithm with the epilogue
//    (without_bias_epilogue).
//
// Linear + GELU (CudaBackend::linear_gelu_forward, GPT-2's MLP up-projection):
// pre = inp weight^T + bias is kept for backward and act = gelu(pre) goes on.
// Where the GELU goes (LtGelu):
//  - epilogue: CUBLASLT_EPILOGUE_GELU_AUX_BIAS (GELU_AUX without a bias): D is
//    act, and the GELU input (pre) is written to the aux buffer
//    (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, EPILOGUE_AUX_LD). cuBLASLt
//    requires that ld to be divisible by 8 and at least D's rows, so OC % 8
//    == 0; the bias must be in the epilogue too (the kernel bias would come
//    after the GELU), and pre must be kLtBiasAlign-aligned as the bias is.
//  - kernel: the plain linear plan into pre, then the GELU kernel pre -> act.
//    Also taken when the heuristic offers no algorithm with the GELU
//    epilogue (lt_linear_gelu_forward then runs plan_lt_linear into pre and
//    the kernel), and whenever the backend's first-use
//    check finds that cuBLASLt's GELU is not Lattice's (tanh form): its
//    documentation does not say which GELU it computes.
//
// Alignment: cuBLASLt's heuristic assumes A, B, C and D 256-byte aligned
// unless CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES says less (default
// 256). Tensors may be views into flat buffers at any float offset, so the
// plan carries each pointer's real alignment (lt_alignment).
//
// Empty shapes: N == 0 or OC == 0 does nothing; C == 0 makes the product an
// empty sum, so out is zeroed and the bias (if any) added by the kernel,
// without a matmul.
#pragma once

#include <cstdint>

namespace lattice::cuda {

constexpr uint32_t kLtMaxAlign = 256;  // cuBLASLt's default minimum alignment
constexpr uint32_t kLtBiasAlign = 16;  // bias addresses below this take the kernel

enum class LtOp { n, t };                      // CUBLAS_OP_N, CUBLAS_OP_T
enum class LtBias { none, epilogue, kernel };  // see the header comment
enum class LtGelu { none, epilogue, kernel };  // see the header comment

// A column-major matrix as stored: rows x cols, leading dimension ld.
struct LtLayout {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 1;
  bool operator==(const LtLayout&) const = default;
};

struct LtLinearPlan {
  bool matmul = false;    // run cublasLtMatmul
  bool zero_out = false;  // C == 0: out = 0 before the bias
  LtOp op_a = LtOp::t, op_b = LtOp::n;
  int64_t m = 0, n = 0, k = 0;  // D (m, n) = op(A) (m, k) op(B) (k, n)
  LtLayout a, b, d;             // C shares D's layout
  LtBias bias = LtBias::none;
  uint32_t align_a = kLtMaxAlign, align_b = kLtMaxAlign, align_d = kLtMaxAlign;  // bytes
  // Linear + GELU only: D is act (epilogue) or pre (kernel); aux is pre.
  LtGelu gelu = LtGelu::none;
  int64_t aux_ld = 0;
};

// The largest power of two dividing addr, at most kLtMaxAlign (null: the most).
inline uint32_t lt_alignment(uintptr_t addr) {
  uint32_t a = 1;
  while (a < kLtMaxAlign && addr % (2 * uintptr_t(a)) == 0) a *= 2;
  return a;
}

// The plan for out (N, OC) = inp (N, C) weight^T + bias at these addresses;
// bias 0 means no bias. Sizes are non-negative (core/ops.h checks them).
inline LtLinearPlan plan_lt_linear(int64_t N, int64_t C, int64_t OC, uintptr_t inp, uintptr_t weight, uintptr_t out,
                                   uintptr_t bias) {
  LtLinearPlan p;
  if (N == 0 || OC == 0) return p;
  p.m = OC;
  p.n = N;
  p.k = C;
  if (bias) p.bias = (C > 0 && bias % kLtBiasAlign == 0) ? LtBias::epilogue : LtBias::kernel;
  if (C == 0) {
    p.zero_out = true;
    return p;
  }
  p.matmul = true;
  p.a = {uint64_t(C), uint64_t(OC), C};
  p.b = {uint64_t(C), uint64_t(N), C};
  p.d = {uint64_t(OC), uint64_t(N), OC};
  p.align_a = lt_alignment(weight);
  p.align_b = lt_alignment(inp);
  p.align_d = lt_alignment(out);
  return p;
}

// The same plan with the bias moved from the epilogue to the kernel.
inline LtLinearPlan without_bias_epilogue(LtLinearPlan p) {
  if (p.bias == LtBias::epilogue) p.bias = LtBias::kernel;
  return p;
}

// The plan for pre (N, OC) = inp weight^T + bias and act = gelu(pre); bias 0
// means no bias. `epilogue_ok` false (the backend found cuBLASLt's GELU to be
// another formula) always takes the kernel.
inline LtLinearPlan plan_lt_linear_gelu(int64_t N, int64_t C, int64_t OC, uintptr_t inp, uintptr_t weight,
                                        uintptr_t pre, uintptr_t act, uintptr_t bias, bool epilogue_ok = true) {
  LtLinearPlan p = plan_lt_linear(N, C, OC, inp, weight, pre, bias);
  if (N == 0 || OC == 0) return p;
  const bool fuse = epilogue_ok && p.matmul && OC % 8 == 0 && p.bias != LtBias::kernel && pre % kLtBiasAlign == 0;
  if (!fuse) {
    p.gelu = LtGelu::kernel;
    return p;
  }
  p.gelu = LtGelu::epilogue;
  p.aux_ld = OC;
  p.align_d = lt_alignment(act);
  return p;
}

}  // namespace lattice::cuda
