#include "core/kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/math.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kColBlock = 64;  // columns per block of the parameter-gradient sums
bool worth_threads(int64_t N, int64_t C) { return N * C > (1 << 14); }
}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, T eps, int64_t N,
                       int64_t C) {
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    T* y = out + r * C;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c];
    T m = s / T(C);
    T v = 0;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    T rs = math::rstd_of(v / T(C), eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = math::layernorm_out(x[c], m, rs, weight[c], bias[c]);
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    const T* dy = dout + r * C;
    T* dx = dinp + r * C;
    const T m = mean[r], rs = rstd[r];
    T sum_dn = 0, sum_dn_n = 0;
#pragma omp simd reduction(+ : sum_dn, sum_dn_n)
    for (int64_t c = 0; c < C; ++c) {
      T dn = weight[c] * dy[c];
      sum_dn += dn;
      sum_dn_n += dn * (x[c] - m) * rs;
    }
    const T mean_dn = sum_dn / T(C), mean_dn_n = sum_dn_n / T(C);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] = math::layernorm_dinp(x[c], dy[c], weight[c], m, rs, mean_dn, mean_dn_n);
  }
  int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t c0 = blk * kColBlock, width = std::min(kColBlock, C - c0);
    T dw[kColBlock] = {}, db[kColBlock] = {};
    for (int64_t r = 0; r < N; ++r) {
      const T* x = inp + r * C + c0;
      const T* dy = dout + r * C + c0;
      const T m = mean[r], rs = rstd[r];
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) {
        dw[c] += (x[c] - m) * rs * dy[c];
        db[c] += dy[c];
      }
    }
    for (int64_t c = 0; c < width; ++c) {
      dweight[c0 + c] += dw[c];
      dbias[c0 + c] += db[c];
    }
  }
}

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, T eps, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    T* y = out + r * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
    T rs = math::rstd_of(ss / T(C), eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = math::rmsnorm_out(x[c], rs, weight[c]);
    rstd[r] = rs;
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t N,
                      int64_t C) {
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    const T* dy = dout + r * C;
    T* dx = dinp + r * C;
    const T rs = rstd[r];
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c) dot += dy[c] * weight[c] * x[c];
    const T k = math::rmsnorm_k(rs, dot, T(C));
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] = math::rmsnorm_dinp(x[c], dy[c], weight[c], rs, k);
  }
  int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t c0 = blk * kColBlock, width = std::min(kColBlock, C - c0);
    T dw[kColBlock] = {};
    for (int64_t r = 0; r < N; ++r) {
      const T* x = inp + r * C + c0;
      const T* dy = dout + r * C + c0;
      const T rs = rstd[r];
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) dw[c] += x[c] * rs * dy[c];
    }
    for (int64_t c = 0; c < width; ++c) dweight[c0 + c] += dw[c];
  }
}

#define LATTICE_INSTANTIATE(T)                                                                                         \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, T, int64_t, int64_t);                   \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t, int64_t); \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, T, int64_t, int64_t);                                   \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
