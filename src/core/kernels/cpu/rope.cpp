#include "core/kernels/cpu/rope.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "core/kernels/math.h"
#include "core/kernels/storage.h"

namespace lattice::cpu {

namespace {

// cos and sin of a_i = (pos0 + t) * theta^(-2i / HS) for t < T, i < HS/2,
// computed in double: (T, HS/2) each.
void rope_tables(std::vector<double>& cs, std::vector<double>& sn, const RopeDims& d) {
  const int64_t H = d.HS / 2;
  cs.resize(size_t(d.T * H));
  sn.resize(size_t(d.T * H));
  for (int64_t i = 0; i < H; ++i) {
    for (int64_t t = 0; t < d.T; ++t) {
      const double a = math::rope_angle(d.pos0 + t, i, d.HS, d.theta);
      cs[size_t(t * H + i)] = std::cos(a);
      sn[size_t(t * H + i)] = std::sin(a);
    }
  }
}

// sign = +1: rotate by a (forward); -1: by -a (backward).
template <typename T>
void rope_apply(T* out, const T* inp, const RopeDims& d, double sign) {
  std::vector<double> cs, sn;
  rope_tables(cs, sn, d);
  const int64_t H = d.HS / 2, rot = d.n_rot * d.HS;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < d.B * d.T; ++row) {
    const int64_t t = row % d.T;
    const double* c = cs.data() + t * H;
    const double* s = sn.data() + t * H;
    const T* x = inp + row * d.W;
    T* y = out + row * d.W;
    for (int64_t h = 0; h < d.n_rot; ++h) {
      const T* x1 = x + h * d.HS;
      T* y1 = y + h * d.HS;
      for (int64_t i = 0; i < H; ++i) {
        // Rotated in double, rounded to compute_t<T> as the f32 kernel does,
        // then once more to the storage type.
        compute_t<T> a, b;
        math::rope_rotate(a, b, widen(x1[i]), widen(x1[i + H]), c[i], sign * s[i]);
        y1[i] = narrow<T>(a);
        y1[i + H] = narrow<T>(b);
      }
    }
    if (y != x)
      for (int64_t j = rot; j < d.W; ++j) y[j] = x[j];
  }
}

}  // namespace

template <typename T>
void rope_forward(T* out, const T* inp, const RopeDims& d) {
  rope_apply(out, inp, d, 1.0);
}

template <typename T>
void rope_backward(T* dinp, const T* dout, const RopeDims& d) {
  rope_apply(dinp, dout, d, -1.0);
}

template <typename T>
void repeat_kv_forward(T* out, const T* inp, int64_t N, int64_t NH, int64_t KV, int64_t HS) {
  const int64_t C = NH * HS, W = (NH + 2 * KV) * HS;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * W;
    T* y = out + n * 3 * C;
    for (int64_t j = 0; j < C; ++j) y[j] = x[j];
    for (int64_t part = 0; part < 2; ++part)  // k, then v
      for (int64_t h = 0; h < NH; ++h) {
        const T* src = x + math::repeat_kv_src_col(part, h, NH, KV, HS);
        T* dst = y + (1 + part) * C + h * HS;
        for (int64_t j = 0; j < HS; ++j) dst[j] = src[j];
      }
  }
}

// The k/v gradients are summed in compute_t<T>: in place in dinp for float
// and double, in a per-thread buffer for 16-bit storage (rounded once at the
// end). Either way each element is 0 + its group's heads in head order.
template <typename T>
void repeat_kv_backward(T* dinp, const T* dout, int64_t N, int64_t NH, int64_t KV, int64_t HS) {
  using F = compute_t<T>;
  constexpr bool kInPlace = std::is_same_v<T, F>;
  const int64_t C = NH * HS, W = (NH + 2 * KV) * HS;
#pragma omp parallel
  {
    std::vector<F> buf(kInPlace ? 0 : size_t(W - C));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* dy = dout + n * 3 * C;
      T* dx = dinp + n * W;
      F* acc = nullptr;  // the k/v columns [C, W) of the row
      if constexpr (kInPlace)
        acc = dx + C;
      else
        acc = buf.data();
      for (int64_t j = 0; j < C; ++j) dx[j] = dy[j];
      for (int64_t j = 0; j < W - C; ++j) acc[j] = F(0);
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t h = 0; h < NH; ++h) {
          F* dst = acc + math::repeat_kv_src_col(part, h, NH, KV, HS) - C;
          const T* src = dy + (1 + part) * C + h * HS;
          for (int64_t j = 0; j < HS; ++j) dst[j] += widen(src[j]);
        }
      if constexpr (!kInPlace)
        for (int64_t j = 0; j < W - C; ++j) dx[C + j] = narrow<T>(acc[j]);
    }
  }
}

#define LATTICE_INSTANTIATE(T)                                                          \
  template void rope_forward<T>(T*, const T*, const RopeDims&);                         \
  template void rope_backward<T>(T*, const T*, const RopeDims&);                        \
  template void repeat_kv_forward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t); \
  template void repeat_kv_backward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
