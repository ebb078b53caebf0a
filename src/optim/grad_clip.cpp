#include "optim/grad_clip.h"

#include <algorithm>

#include "core/ops.h"

namespace lattice::optim {

double weighted_grad_squares(const FlatParams& params, int tp_size, int64_t begin, int64_t end) {
  double sum = 0;
  for (const ParamEntry& e : params.entries()) {
    const int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel);
    if (e.spec.tie_replica || lo >= hi) continue;
    const double sq = ops::sum_squares(params.grads().view(lo, {hi - lo}));
    // A column block held by several tp ranks (LLaMA's replicated k/v heads) counts once.
    const TpShard shard{0, tp_size, 1};
    sum += e.spec.placement == Placement::replicated ? sq / double(tp_size) : sq / double(tp_replicas(e.spec, shard));
  }
  return sum;
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return float(max_norm / (norm + 1e-6));
}

}  // namespace lattice::optim
