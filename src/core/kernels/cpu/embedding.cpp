#include "core/kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>

namespace lattice::cpu {

namespace {
constexpr int64_t kColBlock = 256;
}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* weight, int64_t vocab_start, int64_t N, int64_t V,
                       int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > (1 << 15))
  for (int64_t n = 0; n < N; ++n) {
    int64_t row = int64_t(ids[n]) - vocab_start;
    if (row >= 0 && row < V)
      std::memcpy(out + n * C, weight + row * C, size_t(C) * sizeof(T));
    else
      std::fill(out + n * C, out + (n + 1) * C, T(0));
  }
}

template <typename T>
void embedding_backward(T* dweight, const T* dout, const int32_t* ids, int64_t vocab_start, int64_t N, int64_t V,
                        int64_t C) {
  int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C > (1 << 15))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    int64_t c0 = blk * kColBlock, width = std::min(kColBlock, C - c0);
    for (int64_t n = 0; n < N; ++n) {
      int64_t row = int64_t(ids[n]) - vocab_start;
      if (row < 0 || row >= V) continue;
      T* dw = dweight + row * C + c0;
      const T* dy = dout + n * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) dw[c] += dy[c];
    }
  }
}

#define LATTICE_INSTANTIATE(T)                                                                        \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t, int64_t); \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
LATTICE_INSTANTIATE(float)
LATTICE_INSTANTIATE(double)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
