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
// Linear backward (CudaBackend::linear_backward), two more matmuls:
//   dinp (N, C) = dout (N, OC) @ weight (OC, C)   (plan_lt_linear_dinp)
//     D (C, N) = A (C, OC) * B (OC, N): A = weight stored (C, OC) ld C, op N;
//     B = dout stored (OC, N) ld OC, op N; D = dinp ld C; overwritten.
//   dweight (OC, C) += dout^T @ inp              (plan_lt_linear_dweight)
//     D (C, OC) += A (C, N) * B (N, OC): A = inp stored (C, N) ld C, op N;
//     B = dout stored (OC, N) ld OC, op T; C = D = dweight ld C, beta 1.
// dbias (OC) += column sums of dout goes with the dweight matmul (LtBgrad):
//  - epilogue: CUBLASLT_EPILOGUE_BGRADB, the bias gradient "based on the
//    input matrix B": one value per column of D (OC), reduced over the GEMM's
//    k (N), so sum_t op(B)[t, o] = sum_t dout[t, o]. The epilogue WRITES the
//    vector while Lattice's dbias accumulates, so it writes into a scratch
//    vector of the backend's (one buffer, so the heuristic sees one
//    alignment) and the add kernel adds that into dbias: one extra pass over
//    OC floats instead of the column-sum kernel's pass over N * OC.
//  - kernel: the column-sum kernel (launch_bias_backward), when the heuristic
//    offers no algorithm with BGRADB, or C == 0 (no matmul to fuse into).
// The GELU backward (CUBLASLT_EPILOGUE_DGELU_BGRAD on the dinp matmul of the
// MLP's down-projection) is not used: see docs/gpu.md.
//
// Alignment: cuBLASLt's heuristic assumes A, B, C and D 256-byte aligned
// unless CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES says less (default
// 256). Tensors may be views into flat buffers at any float offset, so the
// plan carries each pointer's real alignment (lt_alignment). The heuristic
// also reads the bias and aux pointers, which it does not dereference, for
// their alignment (cublasLt.h on CUBLASLT_MATMUL_DESC_BIAS_POINTER), so
// those alignments are in the plan too.
//
// Cache (LtKey, LtCache): the descriptors, layouts and the heuristic's
// algorithm of a plan depend only on the plan's key (device, shapes,
// transposes, epilogue, accumulation, dtypes and every alignment), not on
// the addresses, so the backend builds them once per key and afterwards only
// sets the bias and aux pointers of the cached descriptor. A plan the
// heuristic has no algorithm for is cached as such too.
//
// Empty shapes: N == 0 or OC == 0 does nothing; C == 0 makes the product an
// empty sum, so out is zeroed and the bias (if any) added by the kernel,
// without a matmul.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

namespace lattice::cuda {

constexpr uint32_t kLtMaxAlign = 256;     // cuBLASLt's default minimum alignment
constexpr uint32_t kLtBiasAlign = 16;     // bias addresses below this take the kernel
constexpr uint32_t kLtBgradAlign = 256;   // the backend's bias-gradient scratch
constexpr size_t kLtCacheCapacity = 256;  // cached plans (LtCache) before it starts over

enum class LtOp { n, t };                       // CUBLAS_OP_N, CUBLAS_OP_T
enum class LtBias { none, epilogue, kernel };   // see the header comment
enum class LtGelu { none, epilogue, kernel };   // see the header comment
enum class LtBgrad { none, epilogue, kernel };  // see the header comment
// The cublasLtEpilogue_t of a plan (lt_epilogue).
enum class LtEpilogue { none, bias, gelu_aux, gelu_aux_bias, bgradb };

// A column-major matrix as stored: rows x cols, leading dimension ld.
struct LtLayout {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 1;
  auto operator<=>(const LtLayout&) const = default;
};

struct LtLinearPlan {
  bool matmul = false;      // run cublasLtMatmul
  bool zero_out = false;    // the inner size is 0: D = 0 (before the bias, if any)
  bool accumulate = false;  // beta 1: D += op(A) op(B), C is D
  LtOp op_a = LtOp::t, op_b = LtOp::n;
  int64_t m = 0, n = 0, k = 0;  // D (m, n) = op(A) (m, k) op(B) (k, n)
  LtLayout a, b, d;             // C shares D's layout
  LtBias bias = LtBias::none;
  uint32_t align_a = kLtMaxAlign, align_b = kLtMaxAlign, align_d = kLtMaxAlign;  // bytes
  uint32_t align_bias = kLtMaxAlign, align_aux = kLtMaxAlign;  // the epilogue's vector and aux, when it has them
  // Linear + GELU only: D is act (epilogue) or pre (kernel); aux is pre.
  LtGelu gelu = LtGelu::none;
  int64_t aux_ld = 0;
  // dweight only: where dbias goes.
  LtBgrad bgrad = LtBgrad::none;
};

inline LtEpilogue lt_epilogue(const LtLinearPlan& p) {
  if (p.bgrad == LtBgrad::epilogue) return LtEpilogue::bgradb;
  const bool bias = p.bias == LtBias::epilogue;
  if (p.gelu == LtGelu::epilogue) return bias ? LtEpilogue::gelu_aux_bias : LtEpilogue::gelu_aux;
  return bias ? LtEpilogue::bias : LtEpilogue::none;
}

// The largest power of two dividing addr, at most kLtMaxAlign (null: the most).
inline uint32_t lt_alignment(uintptr_t addr) {
  uint32_t a = 1;
  while (a < kLtMaxAlign && addr % (2 * uintptr_t(a)) == 0) a *= 2;
  return a;
}

namespace lt_detail {

// A contiguous column-major operand of op(X) (rows, cols), as stored: op t
// stores it transposed. ld is the stored row count.
inline LtLayout stored(LtOp op, int64_t rows, int64_t cols) {
  return op == LtOp::n ? LtLayout{uint64_t(rows), uint64_t(cols), rows}
                       : LtLayout{uint64_t(cols), uint64_t(rows), cols};
}

// Completes a plan whose m, n, k and ops are set into a matmul over
// contiguous operands at these addresses.
inline void set_matmul(LtLinearPlan& p, uintptr_t a, uintptr_t b, uintptr_t d) {
  p.matmul = true;
  p.a = stored(p.op_a, p.m, p.k);
  p.b = stored(p.op_b, p.k, p.n);
  p.d = stored(LtOp::n, p.m, p.n);
  p.align_a = lt_alignment(a);
  p.align_b = lt_alignment(b);
  p.align_d = lt_alignment(d);
}

}  // namespace lt_detail

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
  lt_detail::set_matmul(p, weight, inp, out);
  if (p.bias == LtBias::epilogue) p.align_bias = lt_alignment(bias);
  return p;
}

// The same plan with the bias (or its gradient) moved from the epilogue to the kernel.
inline LtLinearPlan without_bias_epilogue(LtLinearPlan p) {
  if (p.bias == LtBias::epilogue) p.bias = LtBias::kernel;
  if (p.bgrad == LtBgrad::epilogue) p.bgrad = LtBgrad::kernel;
  p.align_bias = kLtMaxAlign;
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
  p.align_aux = lt_alignment(pre);
  return p;
}

// The plan for dinp (N, C) = dout (N, OC) @ weight (OC, C), overwritten.
inline LtLinearPlan plan_lt_linear_dinp(int64_t N, int64_t C, int64_t OC, uintptr_t dout, uintptr_t weight,
                                        uintptr_t dinp) {
  LtLinearPlan p;
  p.op_a = LtOp::n;
  p.op_b = LtOp::n;
  if (N == 0 || C == 0) return p;
  p.m = C;
  p.n = N;
  p.k = OC;
  if (OC == 0) {
    p.zero_out = true;
    return p;
  }
  lt_detail::set_matmul(p, weight, dout, dinp);
  return p;
}

// The plan for dweight (OC, C) += dout^T (OC, N) @ inp (N, C) and, when
// `dbias`, dbias (OC) += column sums of dout. `bgrad_scratch` is where the
// BGRADB epilogue writes the gradient before the add (its alignment is the
// heuristic's business; the backend's sits kLtBgradAlign-aligned in its buffer).
inline LtLinearPlan plan_lt_linear_dweight(int64_t N, int64_t C, int64_t OC, uintptr_t inp, uintptr_t dout,
                                           uintptr_t dweight, bool dbias, uintptr_t bgrad_scratch) {
  LtLinearPlan p;
  p.op_a = LtOp::n;
  p.op_b = LtOp::t;
  p.accumulate = true;
  if (N == 0 || OC == 0) return p;  // adds nothing to either gradient
  p.m = C;
  p.n = OC;
  p.k = N;
  if (C == 0) {  // dweight is empty; dbias still gets its sums
    if (dbias) p.bgrad = LtBgrad::kernel;
    return p;
  }
  lt_detail::set_matmul(p, inp, dout, dweight);
  if (dbias) {
    p.bgrad = LtBgrad::epilogue;
    p.align_bias = lt_alignment(bgrad_scratch);
  }
  return p;
}

// ---- cache --------------------------------------------------------------

// Everything the descriptors, layouts and heuristic result of a plan depend
// on. Operands, output and compute are f32 (CUBLAS_COMPUTE_32F, no TF32)
// for every plan here; `dtype` names that, so 16-bit plans get keys of their own.
enum class LtDType { f32 };
struct LtKey {
  int dev = 0;
  LtDType dtype = LtDType::f32;
  LtOp op_a = LtOp::n, op_b = LtOp::n;
  int64_t m = 0, n = 0, k = 0;
  LtLayout a, b, d;
  LtEpilogue epilogue = LtEpilogue::none;
  bool accumulate = false;
  int64_t aux_ld = 0;
  uint32_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_aux = 0;
  auto operator<=>(const LtKey&) const = default;
};

// The key of a plan that runs a matmul, on device `dev`. Alignments of
// vectors the epilogue does not have are left out (0), so they do not split
// one plan into several entries.
inline LtKey lt_key(int dev, const LtLinearPlan& p) {
  const LtEpilogue e = lt_epilogue(p);
  const bool has_bias = e == LtEpilogue::bias || e == LtEpilogue::gelu_aux_bias || e == LtEpilogue::bgradb;
  const bool has_aux = e == LtEpilogue::gelu_aux || e == LtEpilogue::gelu_aux_bias;
  return LtKey{.dev = dev,
               .op_a = p.op_a,
               .op_b = p.op_b,
               .m = p.m,
               .n = p.n,
               .k = p.k,
               .a = p.a,
               .b = p.b,
               .d = p.d,
               .epilogue = e,
               .accumulate = p.accumulate,
               .aux_ld = has_aux ? p.aux_ld : 0,
               .align_a = p.align_a,
               .align_b = p.align_b,
               .align_d = p.align_d,
               .align_bias = has_bias ? p.align_bias : 0,
               .align_aux = has_aux ? p.align_aux : 0};
}

// A map from LtKey to what the backend built for it (the cuBLASLt objects,
// lt_linear.cpp), holding at most `capacity` entries: a key beyond that
// empties it first (a training loop has a few dozen shapes; a workload whose
// shapes never repeat must not grow it without bound). Entries are built in
// place by make(Entry&); one that throws is not kept. Not thread-safe: the
// backend calls it under its workspace lock, as every cuBLASLt call.
template <typename Entry>
class LtCache {
 public:
  explicit LtCache(size_t capacity = kLtCacheCapacity) : capacity_(capacity) {}

  template <typename Make>
  Entry& get(const LtKey& key, Make&& make) {
    auto it = entries_.find(key);
    if (it != entries_.end()) return *it->second;
    if (entries_.size() >= capacity_) entries_.clear();
    auto entry = std::make_unique<Entry>();
    make(*entry);
    ++builds_;
    return *entries_.emplace(key, std::move(entry)).first->second;
  }
  size_t size() const { return entries_.size(); }
  size_t builds() const { return builds_; }  // entries made so far: misses

 private:
  size_t capacity_;
  size_t builds_ = 0;
  std::map<LtKey, std::unique_ptr<Entry>> entries_;
};

}  // namespace lattice::cuda
