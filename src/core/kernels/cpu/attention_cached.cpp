#include "core/kernels/cpu/attention_cached.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/vec_math.h"

namespace lattice::cpu {

namespace {
constexpr int64_t kRowBlock = 64;
}  // namespace

template <typename T>
void attention_cached(T* out, T* cache, const T* qkv, const CachedAttentionDims& d) {
  const int64_t C = d.NH * d.HS, C3 = 3 * C, KVC = d.KV * d.HS, C2 = 2 * KVC, group = d.NH / d.KV;
  // The new positions' keys and values into the cache: the first head of each group.
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.Tn; ++t) {
      const T* src = qkv + (b * d.Tn + t) * C3 + C;
      T* dst = cache + (b * d.capacity + d.pos0 + t) * C2;
      for (int64_t part = 0; part < 2; ++part)  // k, then v
        for (int64_t g = 0; g < d.KV; ++g)
          std::copy_n(src + part * C + g * group * d.HS, d.HS, dst + part * KVC + g * d.HS);
    }
  const T scale = T(1) / std::sqrt(T(d.HS));
  const int64_t keys = d.pos0 + d.Tn;
  const bool threads = d.B * d.NH > 1 && d.B * d.NH * d.Tn * keys * d.HS > (1 << 16);
#pragma omp parallel for schedule(static) if (threads)
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    thread_local std::vector<T> scores;
    const T* k = cache + b * d.capacity * C2 + h / group * d.HS;  // row stride C2
    const T* v = k + KVC;
    for (int64_t r0 = 0; r0 < d.Tn; r0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, d.Tn - r0), n = d.pos0 + r0 + rows;  // keys the block's last row sees
      if (scores.size() < size_t(rows * n)) scores.resize(size_t(rows * n));
      const T* q = qkv + (b * d.Tn + r0) * C3 + h * d.HS;
      gemm<T>(false, true, rows, n, d.HS, scale, q, C3, k, C2, T(0), scores.data(), n);
      for (int64_t r = 0; r < rows; ++r) {
        T* s = scores.data() + r * n;
        const int64_t seen = d.pos0 + r0 + r + 1;  // keys [0, seen)
        softmax_row_inplace(s, seen);
        std::fill(s + seen, s + n, T(0));
      }
      gemm<T>(false, false, rows, d.HS, n, T(1), scores.data(), n, v, C2, T(0), out + (b * d.Tn + r0) * C + h * d.HS,
              C);
    }
  }
}

template void attention_cached<float>(float*, float*, const float*, const CachedAttentionDims&);
template void attention_cached<double>(double*, double*, const double*, const CachedAttentionDims&);

}  // namespace lattice::cpu
