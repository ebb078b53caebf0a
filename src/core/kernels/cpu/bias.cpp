#include "core/kernels/cpu/bias.h"

#include <algorithm>

namespace lattice::cpu {

namespace {
// Columns per block in the column-sum kernel: wide enough to vectorise,
// narrow enough that a block's accumulators stay in registers / L1.
constexpr int64_t kColBlock = 64;
bool worth_threads(int64_t N, int64_t OC) { return N * OC > (1 << 15); }
}  // namespace

template <typename S>
void add_bias(S* out, const compute_t<S>* bias, int64_t N, int64_t OC) {
#pragma omp parallel for schedule(static) if (worth_threads(N, OC))
  for (int64_t r = 0; r < N; ++r) {
    S* row = out + r * OC;
#pragma omp simd
    for (int64_t o = 0; o < OC; ++o) row[o] = narrow<S>(widen(row[o]) + bias[o]);
  }
}

template <typename S>
void bias_backward(compute_t<S>* dbias, const S* dout, int64_t N, int64_t OC) {
  const int64_t blocks = (OC + kColBlock - 1) / kColBlock;
  // One thread per block of columns, rows in order: independent of the
  // thread count.
#pragma omp parallel for schedule(static) if (worth_threads(N, OC))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t o0 = blk * kColBlock, width = std::min(kColBlock, OC - o0);
    compute_t<S> acc[kColBlock] = {};
    for (int64_t r = 0; r < N; ++r) {
      const S* row = dout + r * OC + o0;
#pragma omp simd
      for (int64_t o = 0; o < width; ++o) acc[o] += widen(row[o]);
    }
    for (int64_t o = 0; o < width; ++o) dbias[o0 + o] += acc[o];
  }
}

#define LATTICE_INSTANTIATE(S)                                          \
  template void add_bias<S>(S*, const compute_t<S>*, int64_t, int64_t); \
  template void bias_backward<S>(compute_t<S>*, const S*, int64_t, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
