#include "optim/grad_clip.h"

#include <algorithm>

#include "core/ops.h"

namespace lattice::optim {

double weighted_grad_squares(const FlatParams& params, int tp_size, int64_t begin, int64_t end) {
  // Entries lie back to back in the flat buffer, so a run of consecutive
  // entries with the same divisor is one reduction: a handful per step
  // instead of one per entry (on a GPU, each is a host synchronisation).
  double sum = 0, run_div = 1;
  int64_t run_lo = 0, run_hi = 0;
  auto flush = [&] {
    if (run_hi > run_lo) sum += ops::sum_squares(params.grads().view(run_lo, {run_hi - run_lo})) / run_div;
    run_lo = run_hi = 0;
  };
  const TpShard shard{0, tp_size, 1};
  for (const ParamEntry& e : params.entries()) {
    const int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel);
    if (e.spec.tie_replica || lo >= hi) continue;
    // A column block held by several tp ranks (LLaMA's replicated k/v heads) counts once.
    const double div = e.spec.placement == Placement::replicated ? double(tp_size) : double(tp_replicas(e.spec, shard));
    if (run_hi > run_lo && run_hi == lo && div == run_div) {
      run_hi = hi;
      continue;
    }
    flush();
    run_lo = lo, run_hi = hi, run_div = div;
  }
  flush();
  return sum;
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return float(max_norm / (norm + 1e-6));
}

}  // namespace lattice::optim
