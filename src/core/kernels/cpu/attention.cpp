#include "core/kernels/cpu/attention.h"

#include "core/kernels/cpu/attention_common.h"

namespace lattice::cpu {

namespace {

using namespace attention_detail;

// Causal rows: row i sees keys [0, i], so a row block ending at i1 reads
// columns [0, i1) only (the mask halves the work).
struct CausalRows {
  const int32_t* mask = nullptr;
  int64_t cols(int64_t i1) const { return i1; }
  int64_t valid(int64_t i) const { return i + 1; }
};

}  // namespace

template <typename S>
void attention_forward(S* out, S* att, const S* qkv, const RngKey& key, int64_t sample0, float p,
                       const AttentionDims& d) {
  const int64_t C = d.NH * d.HS;
  for_each_head(d, [&](int64_t b, int64_t h, int64_t bh) {
    head_forward(CausalRows{}, out ? out + b * d.T * C + h * d.HS : nullptr, head_state(att, d, bh),
                 qkv + b * d.T * 3 * C + h * d.HS, head_view<compute_t<S>>(d, sample0, b, h), key, p);
  });
}

template <typename S>
void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* att, const RngKey& key, int64_t sample0, float p,
                        const AttentionDims& d) {
  const int64_t C = d.NH * d.HS;
  for_each_head(d, [&](int64_t b, int64_t h, int64_t bh) {
    const int64_t qoff = b * d.T * 3 * C + h * d.HS;
    head_backward(CausalRows{}, dqkv + qoff, dout + b * d.T * C + h * d.HS, qkv + qoff,
                  head_state(const_cast<S*>(att), d, bh), head_view<compute_t<S>>(d, sample0, b, h), key, p);
  });
}

#define LATTICE_INSTANTIATE(S)                                                                               \
  template void attention_forward<S>(S*, S*, const S*, const RngKey&, int64_t, float, const AttentionDims&); \
  template void attention_backward<S>(S*, const S*, const S*, const S*, const RngKey&, int64_t, float,       \
                                      const AttentionDims&);
LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

}  // namespace lattice::cpu
