#include "core/kernels/cpu/dropout.h"

#include <algorithm>
#include <cstring>

#include "core/kernels/storage.h"

namespace lattice::cpu {

template <typename T>
void dropout_row(T* out, const T* inp, const RngKey& key, uint64_t sample, uint64_t e0, int64_t n, float p) {
  using P = compute_t<T>;
  const P scale = P(1) / (P(1) - P(p));
  // One Philox call yields the uniforms of four consecutive elements (rng_bits
  // uses lane e & 3 of block e >> 2), so draw once per block, not per element.
  Philox4 bits{};
  for (int64_t i = 0; i < n; ++i) {
    uint64_t e = e0 + uint64_t(i);
    if (i == 0 || (e & 3) == 0) bits = rng_bits(key, sample, e);
    out[i] = narrow<T>(rng_keep_lane(bits, e, p) ? widen(inp[i]) * scale : P(0));
  }
}

template <typename T>
void dropout_forward(T* out, const T* inp, const RngKey& key, int64_t sample0, float p, int64_t B, int64_t S) {
  if (p == 0.0f) {
    if (out != inp) std::memmove(out, inp, size_t(B * S) * sizeof(T));
    return;
  }
  // Split long rows into chunks so a few samples still use every thread.
  constexpr int64_t kChunk = 1 << 12;
  int64_t chunks_per_row = std::max<int64_t>(1, (S + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (B * S > (1 << 14))
  for (int64_t t = 0; t < B * chunks_per_row; ++t) {
    int64_t b = t / chunks_per_row, s0 = (t % chunks_per_row) * kChunk;
    int64_t len = std::min(kChunk, S - s0);
    if (len <= 0) continue;
    dropout_row(out + b * S + s0, inp + b * S + s0, key, uint64_t(sample0 + b), uint64_t(s0), len, p);
  }
}

#define LATTICE_INSTANTIATE(T)                                                                   \
  template void dropout_row<T>(T*, const T*, const RngKey&, uint64_t, uint64_t, int64_t, float); \
  template void dropout_forward<T>(T*, const T*, const RngKey&, int64_t, float, int64_t, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
