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
void layernorm_forward(T* out, param_t<T>* mean, param_t<T>* rstd, const T* inp, const param_t<T>* weight,
                       const param_t<T>* bias, param_t<T> eps, int64_t N, int64_t C) {
  using F = param_t<T>;
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    T* y = out + r * C;
    F s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += widen(x[c]);
    F m = s / F(C);
    F v = 0;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) v += (widen(x[c]) - m) * (widen(x[c]) - m);
    F rs = math::rstd_of(v / F(C), eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = narrow<T>(math::layernorm_out(widen(x[c]), m, rs, weight[c], bias[c]));
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <typename T>
void layernorm_backward(T* dinp, param_t<T>* dweight, param_t<T>* dbias, const T* dout, const T* inp,
                        const param_t<T>* weight, const param_t<T>* mean, const param_t<T>* rstd, int64_t N,
                        int64_t C) {
  using F = param_t<T>;
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    const T* dy = dout + r * C;
    T* dx = dinp + r * C;
    const F m = mean[r], rs = rstd[r];
    F sum_dn = 0, sum_dn_n = 0;
#pragma omp simd reduction(+ : sum_dn, sum_dn_n)
    for (int64_t c = 0; c < C; ++c) {
      F dn = weight[c] * widen(dy[c]);
      sum_dn += dn;
      sum_dn_n += dn * (widen(x[c]) - m) * rs;
    }
    const F mean_dn = sum_dn / F(C), mean_dn_n = sum_dn_n / F(C);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c)
      dx[c] = narrow<T>(math::layernorm_dinp(widen(x[c]), widen(dy[c]), weight[c], m, rs, mean_dn, mean_dn_n));
  }
  int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t c0 = blk * kColBlock, width = std::min(kColBlock, C - c0);
    F dw[kColBlock] = {}, db[kColBlock] = {};
    for (int64_t r = 0; r < N; ++r) {
      const T* x = inp + r * C + c0;
      const T* dy = dout + r * C + c0;
      const F m = mean[r], rs = rstd[r];
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) {
        dw[c] += (widen(x[c]) - m) * rs * widen(dy[c]);
        db[c] += widen(dy[c]);
      }
    }
    for (int64_t c = 0; c < width; ++c) {
      dweight[c0 + c] += dw[c];
      dbias[c0 + c] += db[c];
    }
  }
}

template <typename T>
void rmsnorm_forward(T* out, param_t<T>* rstd, const T* inp, const param_t<T>* weight, param_t<T> eps, int64_t N,
                     int64_t C) {
  using F = param_t<T>;
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    T* y = out + r * C;
    F ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += widen(x[c]) * widen(x[c]);
    F rs = math::rstd_of(ss / F(C), eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = narrow<T>(math::rmsnorm_out(widen(x[c]), rs, weight[c]));
    rstd[r] = rs;
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, param_t<T>* dweight, const T* dout, const T* inp, const param_t<T>* weight,
                      const param_t<T>* rstd, int64_t N, int64_t C) {
  using F = param_t<T>;
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    const T* dy = dout + r * C;
    T* dx = dinp + r * C;
    const F rs = rstd[r];
    F dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c) dot += widen(dy[c]) * weight[c] * widen(x[c]);
    const F k = math::rmsnorm_k(rs, dot, F(C));
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] = narrow<T>(math::rmsnorm_dinp(widen(x[c]), widen(dy[c]), weight[c], rs, k));
  }
  int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (worth_threads(N, C))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t c0 = blk * kColBlock, width = std::min(kColBlock, C - c0);
    F dw[kColBlock] = {};
    for (int64_t r = 0; r < N; ++r) {
      const T* x = inp + r * C + c0;
      const T* dy = dout + r * C + c0;
      const F rs = rstd[r];
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) dw[c] += widen(x[c]) * rs * widen(dy[c]);
    }
    for (int64_t c = 0; c < width; ++c) dweight[c0 + c] += dw[c];
  }
}

#define LATTICE_INSTANTIATE(T)                                                                                     \
  template void layernorm_forward<T>(T*, param_t<T>*, param_t<T>*, const T*, const param_t<T>*, const param_t<T>*, \
                                     param_t<T>, int64_t, int64_t);                                                \
  template void layernorm_backward<T>(T*, param_t<T>*, param_t<T>*, const T*, const T*, const param_t<T>*,         \
                                      const param_t<T>*, const param_t<T>*, int64_t, int64_t);                     \
  template void rmsnorm_forward<T>(T*, param_t<T>*, const T*, const param_t<T>*, param_t<T>, int64_t, int64_t);    \
  template void rmsnorm_backward<T>(T*, param_t<T>*, const T*, const T*, const param_t<T>*, const param_t<T>*,     \
                                    int64_t, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
