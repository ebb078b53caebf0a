#include "core/kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace lattice::cpu {

namespace {
constexpr int64_t kColBlock = 256;
}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const compute_t<T>* weight, int64_t vocab_start, int64_t N,
                       int64_t V, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > (1 << 15))
  for (int64_t n = 0; n < N; ++n) {
    int64_t row = int64_t(ids[n]) - vocab_start;
    T* y = out + n * C;
    if (row < 0 || row >= V) {
      std::fill(y, y + C, narrow<T>(0));
      continue;
    }
    const compute_t<T>* w = weight + row * C;
    if constexpr (std::is_same_v<T, compute_t<T>>)
      std::memcpy(y, w, size_t(C) * sizeof(T));
    else
      for (int64_t c = 0; c < C; ++c) y[c] = narrow<T>(w[c]);
  }
}

template <typename T>
void embedding_backward(compute_t<T>* dweight, const T* dout, const int32_t* ids, int64_t vocab_start, int64_t N,
                        int64_t V, int64_t C) {
  int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C > (1 << 15))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t c0 = blk * kColBlock, width = std::min(kColBlock, C - c0);
    for (int64_t n = 0; n < N; ++n) {
      int64_t row = int64_t(ids[n]) - vocab_start;
      if (row < 0 || row >= V) continue;
      compute_t<T>* dw = dweight + row * C + c0;
      const T* dy = dout + n * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) dw[c] += widen(dy[c]);
    }
  }
}

#define LATTICE_INSTANTIATE(T)                                                                                     \
  template void embedding_forward<T>(T*, const int32_t*, const compute_t<T>*, int64_t, int64_t, int64_t, int64_t); \
  template void embedding_backward<T>(compute_t<T>*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
