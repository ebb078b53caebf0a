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
//   - a block bound for S storage (P to att, out, dqkv, the dK and dV sums)
//     is computed into a thread-local fp32 buffer, the row math (softmax,
//     dropout, softmax backward) runs there in fp32, and store() rounds it
//     once into place (Staged);
//   - backward reads the saved 16-bit probabilities widened to fp32.
// The thread-local buffers only grow, so a training step allocates nothing
// after its first call; calls from inside the kernels' OpenMP loop each use
// their own thread's buffers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/dropout.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_half.h"
#include "core/kernels/cpu/vec_math.h"
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

// c (m, n) = alpha op(a) op(b) + beta c, a and b each of S or compute_t<S>:
// cpu::gemm for float and double, gemm_half in S for 16-bit S. beta 0
// overwrites c.
template <typename S, typename A, typename B>
void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, compute_t<S> alpha, const A* a, int64_t lda, const B* b,
             int64_t ldb, compute_t<S>* c, int64_t ldc, compute_t<S> beta = 0) {
  if constexpr (kHalf<S>)
    gemm_half(kMatmulType<S>, ta, tb, m, n, k, alpha, operand(a), lda, operand(b), ldb, beta, c, ldc);
  else
    gemm<S>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Buffer slots: a block's scores or dP; a product bound for out or dqkv;
// the dropped probabilities; backward's block of P (widened or recomputed);
// the dK and dV sums of a 16-bit head.
enum Slot : int { kRowsSlot, kProductSlot, kDroppedSlot, kWidenedSlot, kDkSlot, kDvSlot, kSlots };

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

// ---- the per-head engine both kernels run ----------------------------------
// Rows go in blocks of kBlk; a block reads the key columns [0, cols) its mask
// policy names (causal: up to the block's end; key mask: every key), so the
// scores, probabilities and dP of one block, kBlk x T at most, are all that is
// ever live of the (T, T) matrices. Forward saves either P itself (the full
// state) or each row's softmax statistics (the compact state); backward
// takes P's block from the first or computes it again from the second with
// the same product and the same row arithmetic, so the two states give the
// same bits. dK and dV are summed over the row blocks in order, in a (T, HS)
// buffer per head (dqkv itself for float and double), so backward needs no
// (T, T) matrix either.
constexpr int64_t kBlk = 128;

// One row's softmax statistics: P_ij = exp(S_ij - max) * inv over the valid
// keys; max = -inf for a row with no valid key (all zeros).
template <typename Real>
struct RowStats {
  Real max, inv;
};

// Where forward leaves what backward needs, for one head: P (T, T) before
// dropout, zero where masked (full), or the rows' statistics (T) (compact).
template <typename S>
struct HeadState {
  S* probs = nullptr;
  RowStats<compute_t<S>>* stats = nullptr;
};

// The state of head bh inside att: (B, NH, T, T) of S, or (B, NH, T) row
// statistics in compute_t<S> (compact_state_elems<S> elements of S).
template <typename S>
HeadState<S> head_state(S* att, const AttentionDims& d, int64_t bh) {
  if (d.compact_state) return {nullptr, reinterpret_cast<RowStats<compute_t<S>>*>(att) + bh * d.T};
  return {att + bh * d.T * d.T, nullptr};
}

// Max of the scores of the valid keys.
template <typename Real>
Real masked_max(const Real* s, const int32_t* m, int64_t n) {
  Real mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; ++j) mx = m[j] && s[j] > mx ? s[j] : mx;
  return mx;
}

// exp(s - max) in place over the n keys a row sees, 0 where the mask (null:
// none) hides a key; returns their sum.
template <typename Real>
Real exp_row(Real* s, const int32_t* m, int64_t n, Real max) {
  if (!m) return exp_minus(s, s, n, max);
  Real sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    s[j] = m[j] ? exp_of(s[j] - max) : Real(0);
    sum += s[j];
  }
  return sum;
}

// s[:n] *= inv, zeros from n to width.
template <typename Real>
void scale_row(Real* s, int64_t n, int64_t width, Real inv) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  std::fill(s + n, s + width, Real(0));
}

// Row i of a block: softmax of the scores over the keys row i sees, in place,
// zeros from there to `width`; returns the statistics.
template <typename Real, typename Rows>
RowStats<Real> softmax_row(const Rows& rows, Real* s, int64_t i, int64_t width) {
  const int64_t n = rows.valid(i);
  const int32_t* m = rows.mask;
  RowStats<Real> st{m ? masked_max(s, m, n) : max_of(s, n), Real(0)};
  if (st.max == -INFINITY) {  // no valid key (or every score -inf): attend to nothing
    std::fill(s, s + width, Real(0));
    return st;
  }
  st.inv = Real(1) / exp_row(s, m, n, st.max);
  scale_row(s, n, width, st.inv);
  return st;
}

// The same row from its scores and saved statistics: the same elements,
// bit for bit (the same exp_row and scale_row).
template <typename Real, typename Rows>
void softmax_row_again(const Rows& rows, Real* s, int64_t i, int64_t width, const RowStats<Real>& st) {
  if (st.max == -INFINITY) return std::fill(s, s + width, Real(0));
  const int64_t n = rows.valid(i);
  exp_row(s, rows.mask, n, st.max);
  scale_row(s, n, width, st.inv);
}

// dst = dropout(src) for rows [i0, i1) of a block (row stride T), zeros
// from each row's valid keys to `cols`.
template <typename Real, typename Rows>
void drop_rows(const Rows& rows, Real* dst, const Real* src, int64_t i0, int64_t i1, int64_t cols,
               const HeadView<Real>& v, const RngKey& key, float p) {
  for (int64_t i = i0; i < i1; ++i) {
    Real* row = dst + (i - i0) * v.T;
    const int64_t n = rows.valid(i);
    dropout_row(row, src + (i - i0) * v.T, key, v.sample, v.elem0 + uint64_t(i * v.T), n, p);
    std::fill(row + n, row + cols, Real(0));
  }
}

// Rows: the mask policy, with mask (null: none), cols(i1) (the key columns
// rows up to i1 read) and valid(i) (row i sees keys [0, valid(i)) where
// mask allows). out null: the state alone (P or the statistics), without
// the dropout and the product (the probabilities computed again for
// backward).
template <typename S, typename Rows>
void head_forward(const Rows& rows_of, S* out, HeadState<S> st, const S* q, const HeadView<compute_t<S>>& v,
                  const RngKey& key, float p) {
  using Real = compute_t<S>;
  const S* k = q + v.C;
  const S* val = q + 2 * v.C;
  for (int64_t i0 = 0; i0 < v.T; i0 += kBlk) {
    const int64_t i1 = std::min(v.T, i0 + kBlk), rows = i1 - i0, cols = rows_of.cols(i1);
    // Full: the block of att (staged for 16-bit), zero to T; compact: this thread's buffer.
    const Staged<S> P = st.probs ? staged(st.probs + i0 * v.T, v.T, rows, v.T, kRowsSlot)
                                 : Staged<S>{nullptr, v.T, buffer<Real>(kRowsSlot, rows * v.T), v.T, rows, v.T};
    product<S>(false, true, rows, cols, v.HS, v.scale, q + i0 * v.C3, v.C3, k, v.C3, P.c, P.ldc);
    for (int64_t i = i0; i < i1; ++i) {
      const RowStats<Real> rs = softmax_row(rows_of, P.row(i - i0), i, st.probs ? v.T : cols);
      if (st.stats) st.stats[i] = rs;
    }
    if (st.probs) P.store();
    if (!out) continue;
    const Real* A = P.c;  // the fp32 P: a 16-bit product rounds it to the stored values
    int64_t lda = P.ldc;
    if (p > 0.0f) {
      Real* Pd = buffer<Real>(kDroppedSlot, rows * v.T);  // this block's dropped probabilities
      drop_rows(rows_of, Pd, P.c, i0, i1, cols, v, key, p);
      A = Pd, lda = v.T;
    }
    const Staged<S> O = staged(out + i0 * v.C, v.C, rows, v.HS, kProductSlot);
    product<S>(false, false, rows, v.HS, cols, Real(1), A, lda, val, v.C3, O.c, O.ldc);
    O.store();
  }
}

// P of rows [i0, i1), cols wide (row stride T), as backward reads it: the
// saved values widened, or computed again from the statistics (rounded to
// S and widened for 16-bit S: the values the full state would hold).
template <typename S, typename Rows>
const compute_t<S>* block_probs(const Rows& rows_of, HeadState<S> st, const S* q, const HeadView<compute_t<S>>& v,
                                int64_t i0, int64_t i1, int64_t cols) {
  using Real = compute_t<S>;
  const int64_t rows = i1 - i0;
  if (st.probs) return widened(st.probs + i0 * v.T, rows * v.T, kWidenedSlot);
  Real* P = buffer<Real>(kWidenedSlot, rows * v.T);
  product<S>(false, true, rows, cols, v.HS, v.scale, q + i0 * v.C3, v.C3, q + v.C, v.C3, P, v.T);
  for (int64_t i = i0; i < i1; ++i) {
    Real* row = P + (i - i0) * v.T;
    softmax_row_again(rows_of, row, i, cols, st.stats[i]);
    if constexpr (kHalf<S>) {
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) row[j] = widen(narrow<S>(row[j]));
    }
  }
  return P;
}

template <typename S, typename Rows>
void head_backward(const Rows& rows_of, S* dq, const S* dO, const S* q, HeadState<S> st,
                   const HeadView<compute_t<S>>& v, const RngKey& key, float p) {
  using Real = compute_t<S>;
  const KvGrads<S> x = kv_grads(q, dq, v.C);
  // dK and dV sums: dqkv itself for float and double, fp32 buffers rounded once at the end for 16-bit.
  const Staged<S> dK = staged(x.dk, v.C3, v.T, v.HS, kDkSlot), dV = staged(x.dv, v.C3, v.T, v.HS, kDvSlot);
  for (const Staged<S>* acc : {&dK, &dV})
    for (int64_t j = 0; j < v.T; ++j) std::fill(acc->row(j), acc->row(j) + v.HS, Real(0));
  for (int64_t i0 = 0; i0 < v.T; i0 += kBlk) {
    const int64_t i1 = std::min(v.T, i0 + kBlk), rows = i1 - i0, cols = rows_of.cols(i1);
    const Real* P = block_probs(rows_of, st, q, v, i0, i1, cols);
    const Real* A = P;  // what dV reads: P, dropped for p > 0
    if (p > 0.0f) {
      Real* Pd = buffer<Real>(kDroppedSlot, rows * v.T);
      drop_rows(rows_of, Pd, P, i0, i1, cols, v, key, p);
      A = Pd;
    }
    // dV[:cols] += A^T dO of the block.
    product<S>(true, false, cols, v.HS, rows, Real(1), A, v.T, dO + i0 * v.C, v.C, dV.c, dV.ldc, Real(1));
    // dS = the softmax backward of dP = dropout(dO v^T), row by row.
    Real* D = buffer<Real>(kRowsSlot, rows * v.T);
    product<S>(false, true, rows, cols, v.HS, Real(1), dO + i0 * v.C, v.C, x.v, v.C3, D, v.T);
    for (int64_t i = i0; i < i1; ++i) {
      Real* row = D + (i - i0) * v.T;
      const int64_t n = rows_of.valid(i);
      if (p > 0.0f) dropout_row(row, row, key, v.sample, v.elem0 + uint64_t(i * v.T), n, p);
      softmax_row_backward(row, row, P + (i - i0) * v.T, n);
      std::fill(row + n, row + cols, Real(0));
    }
    // dQ of the block = scale dS k[:cols]; dK[:cols] += scale dS^T q of the block.
    const Staged<S> Q = staged(dq + i0 * v.C3, v.C3, rows, v.HS, kProductSlot);
    product<S>(false, false, rows, v.HS, cols, v.scale, D, v.T, x.k, v.C3, Q.c, Q.ldc);
    Q.store();
    product<S>(true, false, cols, v.HS, rows, v.scale, D, v.T, q + i0 * v.C3, v.C3, dK.c, dK.ldc, Real(1));
  }
  dK.store();
  dV.store();
}

}  // namespace lattice::cpu::attention_detail
