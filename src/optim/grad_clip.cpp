#include "optim/grad_clip.h"

#include "core/ops.h"

namespace lattice::optim {

double grad_sum_squares(const FlatParams& params) { return ops::sum_squares(params.grads()); }

GradSquares grad_squares_by_placement(const FlatParams& params) {
  GradSquares g;
  for (const ParamEntry& e : params.entries()) {
    double s = ops::sum_squares(params.grad(e));
    (e.spec.placement == Placement::replicated ? g.replicated : g.sharded) += s;
  }
  return g;
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
  return float(max_norm / (norm + 1e-6));
}

}  // namespace lattice::optim
