#include "core/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/cpu/attention_common.h"
#include "core/kernels/cpu/dropout.h"
#include "core/kernels/cpu/vec_math.h"

namespace lattice::cpu {

namespace {

using namespace attention_detail;

// Rows per block: each row block multiplies only the columns j < block end.
constexpr int64_t kBlk = 128;

// Row i of P (T wide): causal softmax of the scores in s[0..i], zeros after.
template <typename Real>
void causal_softmax_row(Real* s, int64_t i, int64_t T) {
  softmax_row_inplace(s, i + 1);
  std::fill(s + i + 1, s + T, Real(0));
}

template <typename S>
void head_forward(S* out, S* att, const S* q, const HeadView<compute_t<S>>& v, const RngKey& key, float p) {
  using Real = compute_t<S>;
  const S* k = q + v.C;
  const S* val = q + 2 * v.C;
  for (int64_t i0 = 0; i0 < v.T; i0 += kBlk) {
    int64_t i1 = std::min(v.T, i0 + kBlk), rows = i1 - i0;
    const Staged<S> P = staged(att + i0 * v.T, v.T, rows, v.T, kRowsSlot);
    product<S>(false, true, rows, i1, v.HS, v.scale, q + i0 * v.C3, v.C3, k, v.C3, P.c, P.ldc);
    for (int64_t i = i0; i < i1; ++i) causal_softmax_row(P.row(i - i0), i, v.T);
    P.store();
    const Real* A = P.c;  // the fp32 P: a 16-bit product rounds it to the stored values
    int64_t lda = P.ldc;
    if (p > 0.0f) {
      Real* Pd = buffer<Real>(kDroppedSlot, rows * v.T);  // this block's dropped probabilities
      for (int64_t i = i0; i < i1; ++i) {
        Real* row = Pd + (i - i0) * v.T;
        dropout_row(row, P.row(i - i0), key, v.sample, v.elem0 + uint64_t(i * v.T), i + 1, p);
        std::fill(row + i + 1, row + i1, Real(0));
      }
      A = Pd, lda = v.T;
    }
    const Staged<S> O = staged(out + i0 * v.C, v.C, rows, v.HS, kProductSlot);
    product<S>(false, false, rows, v.HS, i1, Real(1), A, lda, val, v.C3, O.c, O.ldc);
    O.store();
  }
}

template <typename S>
void head_backward(S* dq, S* dS, const S* dO, const S* q, const S* att, const HeadView<compute_t<S>>& v,
                   const RngKey& key, float p) {
  using Real = compute_t<S>;
  const KvGrads<S> x = kv_grads(q, dq, v.C);
  const auto [P, A] = saved_probs(att, v.T * v.T, p, [&](Real* Pd, const Real* P0) {
    for (int64_t i = 0; i < v.T; ++i) {
      dropout_row(Pd + i * v.T, P0 + i * v.T, key, v.sample, v.elem0 + uint64_t(i * v.T), i + 1, p);
      std::fill(Pd + i * v.T + i + 1, Pd + (i + 1) * v.T, Real(0));
    }
  });
  for (int64_t i0 = 0; i0 < v.T; i0 += kBlk) {
    int64_t i1 = std::min(v.T, i0 + kBlk), rows = i1 - i0;
    // dP[i0:i1, :i1] = dO[i0:i1] v[:i1]^T, then the dropout map and softmax backward.
    const Staged<S> D = staged(dS + i0 * v.T, v.T, rows, v.T, kRowsSlot);
    product<S>(false, true, rows, i1, v.HS, Real(1), dO + i0 * v.C, v.C, x.v, v.C3, D.c, D.ldc);
    for (int64_t i = i0; i < i1; ++i) {
      Real* row = D.row(i - i0);
      if (p > 0.0f) dropout_row(row, row, key, v.sample, v.elem0 + uint64_t(i * v.T), i + 1, p);
      softmax_row_backward(row, row, P + i * v.T, i + 1);
      std::fill(row + i + 1, row + v.T, Real(0));
    }
    D.store();
    const Staged<S> Q = staged(dq + i0 * v.C3, v.C3, rows, v.HS, kProductSlot);
    product<S>(false, false, rows, v.HS, i1, v.scale, D.c, D.ldc, x.k, v.C3, Q.c, Q.ldc);
    Q.store();
  }
  // Column blocks: rows i < j0 of column block [j0, j1) are zero, so start at j0.
  for (int64_t j0 = 0; j0 < v.T; j0 += kBlk) {
    int64_t j1 = std::min(v.T, j0 + kBlk), cols = j1 - j0, depth = v.T - j0;
    const Staged<S> V = staged(x.dv + j0 * v.C3, v.C3, cols, v.HS, kProductSlot);
    product<S>(true, false, cols, v.HS, depth, Real(1), A + j0 * v.T + j0, v.T, dO + j0 * v.C, v.C, V.c, V.ldc);
    V.store();
    const Staged<S> K = staged(x.dk + j0 * v.C3, v.C3, cols, v.HS, kProductSlot);
    product<S>(true, false, cols, v.HS, depth, v.scale, dS + j0 * v.T + j0, v.T, q + j0 * v.C3, v.C3, K.c, K.ldc);
    K.store();
  }
}

}  // namespace

template <typename S>
void attention_forward(S* out, S* att, const S* qkv, const RngKey& key, int64_t sample0, float p,
                       const AttentionDims& d) {
  const int64_t C = d.NH * d.HS, TT = d.T * d.T;
  for_each_head(d, [&](int64_t b, int64_t h, int64_t bh) {
    head_forward(out + b * d.T * C + h * d.HS, att + bh * TT, qkv + b * d.T * 3 * C + h * d.HS,
                 head_view<compute_t<S>>(d, sample0, b, h), key, p);
  });
}

template <typename S>
void attention_backward(S* dqkv, S* scratch, const S* dout, const S* qkv, const S* att, const RngKey& key,
                        int64_t sample0, float p, const AttentionDims& d) {
  const int64_t C = d.NH * d.HS, TT = d.T * d.T;
  for_each_head(d, [&](int64_t b, int64_t h, int64_t bh) {
    const int64_t qoff = b * d.T * 3 * C + h * d.HS;
    head_backward(dqkv + qoff, scratch + bh * TT, dout + b * d.T * C + h * d.HS, qkv + qoff, att + bh * TT,
                  head_view<compute_t<S>>(d, sample0, b, h), key, p);
  });
}

#define LATTICE_INSTANTIATE(S)                                                                               \
  template void attention_forward<S>(S*, S*, const S*, const RngKey&, int64_t, float, const AttentionDims&); \
  template void attention_backward<S>(S*, S*, const S*, const S*, const S*, const RngKey&, int64_t, float,   \
                                      const AttentionDims&);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
