#include "core/kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/storage.h"

namespace lattice::cpu {

namespace {
// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;
// Reduction chunk: partial sums per chunk, then a serial sum in chunk order.
constexpr int64_t kChunk = 1 << 14;
}  // namespace

template <typename T, typename A, typename B>
void add(T* out, const A* a, const B* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = narrow<T>(widen(a[i]) + widen(b[i]));
}

template <typename T>
void add_inplace(T* acc, const T* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) acc[i] = narrow<T>(widen(acc[i]) + widen(x[i]));
}

template <typename O, typename I>
void convert(O* out, const I* in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = narrow<O>(widen(in[i]));
}

template <typename T>
void scale_inplace(T* x, double s, int64_t n) {
  const compute_t<T> ts = compute_t<T>(s);
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = narrow<T>(widen(x[i]) * ts);
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(size_t(std::max<int64_t>(chunks, 1)), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const T* p = x + c * kChunk;
    int64_t len = std::min(kChunk, n - c * kChunk);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; ++i) s += double(widen(p[i])) * double(widen(p[i]));
    partial[size_t(c)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

template <typename T>
bool all_finite(const T* x, int64_t n) {
  int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) bad |= int(!std::isfinite(widen(x[i])));
  return bad == 0;
}

#define LATTICE_INSTANTIATE(T)                           \
  template void add<T>(T*, const T*, const T*, int64_t); \
  template void add_inplace<T>(T*, const T*, int64_t);   \
  template void scale_inplace<T>(T*, double, int64_t);   \
  template double sum_squares<T>(const T*, int64_t);     \
  template bool all_finite<T>(const T*, int64_t);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

// Mixed storage: fp32 beside one 16-bit type S.
#define LATTICE_INSTANTIATE(S)                                                 \
  template void add<S, S, float>(S*, const S*, const float*, int64_t);         \
  template void add<S, float, S>(S*, const float*, const S*, int64_t);         \
  template void add<S, float, float>(S*, const float*, const float*, int64_t); \
  template void add<float, S, S>(float*, const S*, const S*, int64_t);         \
  template void add<float, S, float>(float*, const S*, const float*, int64_t); \
  template void add<float, float, S>(float*, const float*, const S*, int64_t); \
  template void convert<S, float>(S*, const float*, int64_t);                  \
  template void convert<float, S>(float*, const S*, int64_t);
LATTICE_INSTANTIATE(Bf16)
LATTICE_INSTANTIATE(F16)
#undef LATTICE_INSTANTIATE
template void convert<Bf16, F16>(Bf16*, const F16*, int64_t);
template void convert<F16, Bf16>(F16*, const Bf16*, int64_t);

}  // namespace lattice::cpu
