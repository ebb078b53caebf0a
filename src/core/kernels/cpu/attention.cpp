#include "core/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/cpu/dropout.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/vec_math.h"

namespace lattice::cpu {

namespace {

// Rows per block: each row block multiplies only the columns j < block end.
constexpr int64_t kBlk = 128;

// Threads pay off only with several heads and enough arithmetic per call.
bool worth_threads(const AttentionDims& d) { return d.B * d.NH > 1 && d.B * d.NH * d.T * d.T * d.HS > (1 << 16); }

// Views of one (b, h) pair inside the strided buffers.
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

// Row i of P (T wide): causal softmax of the scores in s[0..i], zeros after.
template <typename Real>
void causal_softmax_row(Real* s, int64_t i, int64_t T) {
  softmax_row_inplace(s, i + 1);
  std::fill(s + i + 1, s + T, Real(0));
}

template <typename Real>
void head_forward(Real* out, Real* P, Real* Pd, const Real* q, const HeadView<Real>& v, const RngKey& key, float p) {
  const Real* k = q + v.C;
  const Real* val = q + 2 * v.C;
  for (int64_t i0 = 0; i0 < v.T; i0 += kBlk) {
    int64_t i1 = std::min(v.T, i0 + kBlk), rows = i1 - i0;
    gemm<Real>(false, true, rows, i1, v.HS, v.scale, q + i0 * v.C3, v.C3, k, v.C3, Real(0), P + i0 * v.T, v.T);
    for (int64_t i = i0; i < i1; ++i) causal_softmax_row(P + i * v.T, i, v.T);
    const Real* A = P;
    if (p > 0.0f) {
      for (int64_t i = i0; i < i1; ++i) {
        dropout_row(Pd + i * v.T, P + i * v.T, key, v.sample, v.elem0 + uint64_t(i * v.T), i + 1, p);
        std::fill(Pd + i * v.T + i + 1, Pd + i * v.T + i1, Real(0));
      }
      A = Pd;
    }
    gemm<Real>(false, false, rows, v.HS, i1, Real(1), A + i0 * v.T, v.T, val, v.C3, Real(0), out + i0 * v.C, v.C);
  }
}

template <typename Real>
void head_backward(Real* dq, Real* dS, Real* Pd, const Real* dO, const Real* q, const Real* P, const HeadView<Real>& v,
                   const RngKey& key, float p) {
  const Real* k = q + v.C;
  const Real* val = q + 2 * v.C;
  Real* dk = dq + v.C;
  Real* dv = dq + 2 * v.C;
  if (p > 0.0f)
    for (int64_t i = 0; i < v.T; ++i) {
      dropout_row(Pd + i * v.T, P + i * v.T, key, v.sample, v.elem0 + uint64_t(i * v.T), i + 1, p);
      std::fill(Pd + i * v.T + i + 1, Pd + (i + 1) * v.T, Real(0));
    }
  const Real* A = p > 0.0f ? Pd : P;
  for (int64_t i0 = 0; i0 < v.T; i0 += kBlk) {
    int64_t i1 = std::min(v.T, i0 + kBlk), rows = i1 - i0;
    // dP[i0:i1, :i1] = dO[i0:i1] v[:i1]^T, then the dropout map and softmax backward.
    gemm<Real>(false, true, rows, i1, v.HS, Real(1), dO + i0 * v.C, v.C, val, v.C3, Real(0), dS + i0 * v.T, v.T);
    for (int64_t i = i0; i < i1; ++i) {
      Real* row = dS + i * v.T;
      const Real* prow = P + i * v.T;
      if (p > 0.0f) dropout_row(row, row, key, v.sample, v.elem0 + uint64_t(i * v.T), i + 1, p);
      softmax_row_backward(row, row, prow, i + 1);
      std::fill(row + i + 1, row + v.T, Real(0));
    }
    gemm<Real>(false, false, rows, v.HS, i1, v.scale, dS + i0 * v.T, v.T, k, v.C3, Real(0), dq + i0 * v.C3, v.C3);
  }
  // Column blocks: rows i < j0 of column block [j0, j1) are zero, so start at j0.
  for (int64_t j0 = 0; j0 < v.T; j0 += kBlk) {
    int64_t j1 = std::min(v.T, j0 + kBlk), cols = j1 - j0, depth = v.T - j0;
    gemm<Real>(true, false, cols, v.HS, depth, Real(1), A + j0 * v.T + j0, v.T, dO + j0 * v.C, v.C, Real(0),
               dv + j0 * v.C3, v.C3);
    gemm<Real>(true, false, cols, v.HS, depth, v.scale, dS + j0 * v.T + j0, v.T, q + j0 * v.C3, v.C3, Real(0),
               dk + j0 * v.C3, v.C3);
  }
}

}  // namespace

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, const RngKey& key, int64_t sample0, float p,
                       const AttentionDims& d) {
  const int64_t C = d.NH * d.HS, TT = d.T * d.T;
#pragma omp parallel if (worth_threads(d))
  {
    std::vector<Real> pd(p > 0.0f ? size_t(TT) : 0);  // this thread's dropped probabilities
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      int64_t b = bh / d.NH, h = bh % d.NH;
      HeadView<Real> v = head_view<Real>(d, sample0, b, h);
      head_forward(out + b * d.T * C + h * d.HS, att + bh * TT, pd.data(), qkv + b * d.T * 3 * C + h * d.HS, v, key, p);
    }
  }
}

template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv, const Real* att,
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

#define LATTICE_INSTANTIATE(R)                                                                               \
  template void attention_forward<R>(R*, R*, const R*, const RngKey&, int64_t, float, const AttentionDims&); \
  template void attention_backward<R>(R*, R*, const R*, const R*, const R*, const RngKey&, int64_t, float,   \
                                      const AttentionDims&);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
