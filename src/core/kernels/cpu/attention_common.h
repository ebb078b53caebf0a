// What the two CPU attention kernels share (attention.cpp, causal;
// attention_masked.cpp, key-padding mask); not a public header.
//
// Both kernels are templated on the storage type S of their activations
// (float, double, Bf16, F16; core/kernels/storage.h) and compute in
// compute_t<S>. For float and double every helper here is the identity or
// the plain cpu::gemm, so those kernels do exactly what they did before
// 16-bit storage existed. For 16-bit S:
//   - every product runs through gemm_half in S (ops:: checks that the
//     matmuls run in S), reading a 16-bit operand as it is and rounding an
//     fp32 one, with an fp32 result;
//   - a block bound for S storage (scores to att, dP to scratch, out, dqkv)
//     is computed into a thread-local fp32 buffer, the row math (softmax,
//     dropout, softmax backward) runs there in fp32, and store() rounds it
//     once into place (Staged);
//   - backward reads the saved 16-bit probabilities widened to fp32.
// The thread-local buffers only grow, so a training step allocates nothing
// after its first call; calls from inside the kernels' OpenMP loop each use
// their own thread's buffers.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_half.h"
#include "core/kernels/storage.h"

namespace lattice::cpu::attention_detail {

template <typename S>
inline constexpr bool kHalf = !std::is_same_v<S, compute_t<S>>;

// Threads pay off only with several heads and enough arithmetic per call.
inline bool worth_threads(const AttentionDims& d) {
  return d.B * d.NH > 1 && d.B * d.NH * d.T * d.T * d.HS > (1 << 16);
}

// f(b, h, bh) for every (sample b, head h) pair, bh = b NH + h: over the
// OpenMP threads (static schedule) when worth it.
template <typename F>
void for_each_head(const AttentionDims& d, F&& f) {
#pragma omp parallel for schedule(static) if (worth_threads(d))
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) f(bh / d.NH, bh % d.NH, bh);
}

// Strides and dropout coordinates of one (b, h) pair inside the strided buffers.
template <typename Real>
struct HeadView {
  int64_t T, HS, C, C3;    // C: row stride of out/dout, C3: of qkv/dqkv
  uint64_t sample, elem0;  // dropout coordinates of element (0, 0) of this head
  Real scale;
};

template <typename Real>
HeadView<Real> head_view(const AttentionDims& d, int64_t sample0, int64_t b, int64_t h) {
  int64_t C = d.NH * d.HS;
  return {d.T,
          d.HS,
          C,
          3 * C,
          uint64_t(sample0 + b),
          uint64_t((d.head_offset + h) * d.T) * uint64_t(d.T),
          Real(1) / std::sqrt(Real(d.HS))};
}

// One head's k and v inside qkv and its dk and dv inside dqkv (q and dq are
// the head's own pointers; row stride C3, parts C apart).
template <typename S>
struct KvGrads {
  const S *k, *v;
  S *dk, *dv;
};
template <typename S>
KvGrads<S> kv_grads(const S* q, S* dq, int64_t C) {
  return {q + C, q + 2 * C, dq + C, dq + 2 * C};
}

// The matmul operand of a pointer: fp32 (rounded by gemm_half) or 16-bit
// storage (read as it is).
inline MatmulOperand operand(const float* x) { return MatmulOperand(x); }
inline MatmulOperand operand(const Bf16* x) { return {x, DType::bf16}; }
inline MatmulOperand operand(const F16* x) { return {x, DType::f16}; }
template <typename S>
inline constexpr DType kMatmulType = std::is_same_v<S, Bf16> ? DType::bf16 : DType::f16;

// c (m, n) = alpha op(a) op(b) (overwrite), a and b each of S or
// compute_t<S>: cpu::gemm for float and double, gemm_half in S for 16-bit S.
template <typename S, typename A, typename B>
void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, compute_t<S> alpha, const A* a, int64_t lda, const B* b,
             int64_t ldb, compute_t<S>* c, int64_t ldc) {
  if constexpr (kHalf<S>)
    gemm_half(kMatmulType<S>, ta, tb, m, n, k, alpha, operand(a), lda, operand(b), ldb, 0.0f, c, ldc);
  else
    gemm<S>(ta, tb, m, n, k, alpha, a, lda, b, ldb, S(0), c, ldc);
}

// Buffer slots: a block's scores or dP; a product bound for out or dqkv;
// the dropped probabilities; the widened saved probabilities.
enum Slot : int { kRowsSlot, kProductSlot, kDroppedSlot, kWidenedSlot, kSlots };

// This thread's buffer `slot`, at least n elements.
template <typename Real>
Real* buffer(Slot slot, int64_t n) {
  thread_local std::vector<Real> bufs[kSlots];
  std::vector<Real>& b = bufs[slot];
  if (b.size() < size_t(n)) b.resize(size_t(n));
  return b.data();
}

// A (rows, cols) block bound for S storage at dst (row stride ld). The math
// writes c (row stride ldc): dst itself for float and double; for 16-bit S
// an fp32 buffer, which store() rounds into dst.
template <typename S>
struct Staged {
  S* dst;
  int64_t ld;
  compute_t<S>* c;
  int64_t ldc, rows, cols;
  compute_t<S>* row(int64_t r) const { return c + r * ldc; }
  void store() const {
    if constexpr (kHalf<S>)
      for (int64_t r = 0; r < rows; ++r) {
        S* d = dst + r * ld;
        const float* s = c + r * ldc;
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) d[j] = narrow<S>(s[j]);
      }
  }
};

template <typename S>
Staged<S> staged(S* dst, int64_t ld, int64_t rows, int64_t cols, Slot slot) {
  if constexpr (kHalf<S>)
    return {dst, ld, buffer<float>(slot, rows * cols), cols, rows, cols};
  else
    return {dst, ld, dst, ld, rows, cols};
}

// x (n) as compute values: x itself for float and double, else widened into
// this thread's buffer `slot`.
template <typename S>
const compute_t<S>* widened(const S* x, int64_t n, Slot slot) {
  if constexpr (kHalf<S>) {
    float* w = buffer<float>(slot, n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) w[i] = widen(x[i]);
    return w;
  } else {
    return x;
  }
}

// Backward's view of one head's saved probabilities att (T * T = n): P,
// widened, and what dV reads: P, or for p > 0 P dropped by drop(Pd, P)
// into this thread's buffer Pd.
template <typename S>
struct SavedProbs {
  const compute_t<S>*P, *A;
};
template <typename S, typename Drop>
SavedProbs<S> saved_probs(const S* att, int64_t n, float p, Drop&& drop) {
  const compute_t<S>* P = widened(att, n, kWidenedSlot);
  if (p == 0.0f) return {P, P};
  compute_t<S>* Pd = buffer<compute_t<S>>(kDroppedSlot, n);
  drop(Pd, P);
  return {P, Pd};
}

}  // namespace lattice::cpu::attention_detail
