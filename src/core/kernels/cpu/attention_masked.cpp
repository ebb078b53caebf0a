#include "core/kernels/cpu/attention_masked.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/cpu/dropout.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/vec_math.h"

namespace lattice::cpu {

namespace {

bool worth_threads(const AttentionDims& d) { return d.B * d.NH > 1 && d.B * d.NH * d.T * d.T * d.HS > (1 << 16); }

// Strides and dropout coordinates of one (b, h) pair.
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

template <typename Real>
void head_forward(Real* out, Real* P, Real* Pd, const Real* q, const int32_t* mask, const HeadView<Real>& v,
                  const RngKey& key, float p) {
  const Real* k = q + v.C;
  const Real* val = q + 2 * v.C;
  gemm<Real>(false, true, v.T, v.T, v.HS, v.scale, q, v.C3, k, v.C3, Real(0), P, v.T);
  for (int64_t i = 0; i < v.T; ++i) masked_softmax_row(P + i * v.T, mask, v.T);
  const Real* A = P;
  if (p > 0.0f) {
    dropout_row(Pd, P, key, v.sample, v.elem0, v.T * v.T, p);
    A = Pd;
  }
  gemm<Real>(false, false, v.T, v.HS, v.T, Real(1), A, v.T, val, v.C3, Real(0), out, v.C);
}

template <typename Real>
void head_backward(Real* dq, Real* dS, Real* Pd, const Real* dO, const Real* q, const Real* P, const HeadView<Real>& v,
                   const RngKey& key, float p) {
  const Real* k = q + v.C;
  const Real* val = q + 2 * v.C;
  Real* dk = dq + v.C;
  Real* dv = dq + 2 * v.C;
  const Real* A = P;
  if (p > 0.0f) {
    dropout_row(Pd, P, key, v.sample, v.elem0, v.T * v.T, p);
    A = Pd;
  }
  // dP = dO v^T, then the dropout map and the softmax backward, row by row.
  gemm<Real>(false, true, v.T, v.T, v.HS, Real(1), dO, v.C, val, v.C3, Real(0), dS, v.T);
  if (p > 0.0f) dropout_row(dS, dS, key, v.sample, v.elem0, v.T * v.T, p);
  for (int64_t i = 0; i < v.T; ++i) softmax_row_backward(dS + i * v.T, dS + i * v.T, P + i * v.T, v.T);
  gemm<Real>(false, false, v.T, v.HS, v.T, v.scale, dS, v.T, k, v.C3, Real(0), dq, v.C3);
  gemm<Real>(true, false, v.T, v.HS, v.T, v.scale, dS, v.T, q, v.C3, Real(0), dk, v.C3);
  gemm<Real>(true, false, v.T, v.HS, v.T, Real(1), A, v.T, dO, v.C, Real(0), dv, v.C3);
}

}  // namespace

template <typename Real>
void attention_masked_forward(Real* out, Real* att, const Real* qkv, const int32_t* key_mask, const RngKey& key,
                              int64_t sample0, float p, const AttentionDims& d) {
  const int64_t C = d.NH * d.HS, TT = d.T * d.T;
#pragma omp parallel if (worth_threads(d))
  {
    std::vector<Real> pd(p > 0.0f ? size_t(TT) : 0);  // this thread's dropped probabilities
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      int64_t b = bh / d.NH, h = bh % d.NH;
      HeadView<Real> v = head_view<Real>(d, sample0, b, h);
      head_forward(out + b * d.T * C + h * d.HS, att + bh * TT, pd.data(), qkv + b * d.T * 3 * C + h * d.HS,
                   key_mask ? key_mask + b * d.T : nullptr, v, key, p);
    }
  }
}

template <typename Real>
void attention_masked_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv, const Real* att,
                               const RngKey& key, int64_t sample0, float p, const AttentionDims& d) {
  const int64_t C = d.NH * d.HS, TT = d.T * d.T;
#pragma omp parallel if (worth_threads(d))
  {
    std::vector<Real> pd(p > 0.0f ? size_t(TT) : 0);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      int64_t b = bh / d.NH, h = bh % d.NH;
      HeadView<Real> v = head_view<Real>(d, sample0, b, h);
      int64_t qoff = b * d.T * 3 * C + h * d.HS;
      head_backward(dqkv + qoff, scratch + bh * TT, pd.data(), dout + b * d.T * C + h * d.HS, qkv + qoff, att + bh * TT,
                    v, key, p);
    }
  }
}

#define LATTICE_INSTANTIATE(R)                                                                                    \
  template void attention_masked_forward<R>(R*, R*, const R*, const int32_t*, const RngKey&, int64_t, float,      \
                                            const AttentionDims&);                                                \
  template void attention_masked_backward<R>(R*, R*, const R*, const R*, const R*, const RngKey&, int64_t, float, \
                                             const AttentionDims&);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
