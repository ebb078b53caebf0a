#include "core/kernels/cpu/attention_masked.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/cpu/attention_common.h"
#include "core/kernels/cpu/dropout.h"
#include "core/kernels/cpu/vec_math.h"

namespace lattice::cpu {

namespace {

using namespace attention_detail;

// Row of P (T wide): softmax of the scores over the valid keys, zeros elsewhere.
template <typename Real>
void masked_softmax_row(Real* s, const int32_t* mask, int64_t T) {
  if (!mask) {
    const Real mx = max_of(s, T);
    if (mx == -INFINITY) return std::fill(s, s + T, Real(0));  // every score -inf: attend to nothing
    return softmax_row_inplace(s, T);
  }
  Real mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < T; ++j) mx = mask[j] && s[j] > mx ? s[j] : mx;
  if (mx == -INFINITY) return std::fill(s, s + T, Real(0));  // no valid key (or every score -inf)
  Real sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < T; ++j) {
    s[j] = mask[j] ? exp_of(s[j] - mx) : Real(0);
    sum += s[j];
  }
  const Real inv = Real(1) / sum;
#pragma omp simd
  for (int64_t j = 0; j < T; ++j) s[j] *= inv;
}

template <typename S>
void head_forward(S* out, S* att, const S* q, const int32_t* mask, const HeadView<compute_t<S>>& v, const RngKey& key,
                  float p) {
  using Real = compute_t<S>;
  const S* k = q + v.C;
  const S* val = q + 2 * v.C;
  const Staged<S> P = staged(att, v.T, v.T, v.T, kRowsSlot);
  product<S>(false, true, v.T, v.T, v.HS, v.scale, q, v.C3, k, v.C3, P.c, P.ldc);
  for (int64_t i = 0; i < v.T; ++i) masked_softmax_row(P.row(i), mask, v.T);
  P.store();
  const Real* A = P.c;  // the fp32 P: a 16-bit product rounds it to the stored values
  if (p > 0.0f) {
    Real* Pd = buffer<Real>(kDroppedSlot, v.T * v.T);
    dropout_row(Pd, P.c, key, v.sample, v.elem0, v.T * v.T, p);
    A = Pd;
  }
  const Staged<S> O = staged(out, v.C, v.T, v.HS, kProductSlot);
  product<S>(false, false, v.T, v.HS, v.T, Real(1), A, v.T, val, v.C3, O.c, O.ldc);
  O.store();
}

template <typename S>
void head_backward(S* dq, S* dS, const S* dO, const S* q, const S* att, const HeadView<compute_t<S>>& v,
                   const RngKey& key, float p) {
  using Real = compute_t<S>;
  const KvGrads<S> x = kv_grads(q, dq, v.C);
  const auto [P, A] = saved_probs(
      att, v.T * v.T, p, [&](Real* Pd, const Real* P0) { dropout_row(Pd, P0, key, v.sample, v.elem0, v.T * v.T, p); });
  // dP = dO v^T, then the dropout map and the softmax backward, row by row.
  const Staged<S> D = staged(dS, v.T, v.T, v.T, kRowsSlot);
  product<S>(false, true, v.T, v.T, v.HS, Real(1), dO, v.C, x.v, v.C3, D.c, D.ldc);
  if (p > 0.0f) dropout_row(D.c, D.c, key, v.sample, v.elem0, v.T * v.T, p);
  for (int64_t i = 0; i < v.T; ++i) softmax_row_backward(D.row(i), D.row(i), P + i * v.T, v.T);
  D.store();
  const Staged<S> Q = staged(dq, v.C3, v.T, v.HS, kProductSlot);
  product<S>(false, false, v.T, v.HS, v.T, v.scale, D.c, v.T, x.k, v.C3, Q.c, Q.ldc);
  Q.store();
  const Staged<S> K = staged(x.dk, v.C3, v.T, v.HS, kProductSlot);
  product<S>(true, false, v.T, v.HS, v.T, v.scale, D.c, v.T, q, v.C3, K.c, K.ldc);
  K.store();
  const Staged<S> V = staged(x.dv, v.C3, v.T, v.HS, kProductSlot);
  product<S>(true, false, v.T, v.HS, v.T, Real(1), A, v.T, dO, v.C, V.c, V.ldc);
  V.store();
}

}  // namespace

template <typename S>
void attention_masked_forward(S* out, S* att, const S* qkv, const int32_t* key_mask, const RngKey& key, int64_t sample0,
                              float p, const AttentionDims& d) {
  const int64_t C = d.NH * d.HS, TT = d.T * d.T;
  for_each_head(d, [&](int64_t b, int64_t h, int64_t bh) {
    head_forward(out + b * d.T * C + h * d.HS, att + bh * TT, qkv + b * d.T * 3 * C + h * d.HS,
                 key_mask ? key_mask + b * d.T : nullptr, head_view<compute_t<S>>(d, sample0, b, h), key, p);
  });
}

template <typename S>
void attention_masked_backward(S* dqkv, S* scratch, const S* dout, const S* qkv, const S* att, const RngKey& key,
                               int64_t sample0, float p, const AttentionDims& d) {
  const int64_t C = d.NH * d.HS, TT = d.T * d.T;
  for_each_head(d, [&](int64_t b, int64_t h, int64_t bh) {
    const int64_t qoff = b * d.T * 3 * C + h * d.HS;
    head_backward(dqkv + qoff, scratch + bh * TT, dout + b * d.T * C + h * d.HS, qkv + qoff, att + bh * TT,
                  head_view<compute_t<S>>(d, sample0, b, h), key, p);
  });
}

#define LATTICE_INSTANTIATE(S)                                                                                    \
  template void attention_masked_forward<S>(S*, S*, const S*, const int32_t*, const RngKey&, int64_t, float,      \
                                            const AttentionDims&);                                                \
  template void attention_masked_backward<S>(S*, S*, const S*, const S*, const S*, const RngKey&, int64_t, float, \
                                             const AttentionDims&);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
