// Global gradient norm and clipping.
//
// The norm counts each logical parameter once. On one rank the flat buffer
// holds each logical parameter exactly once (a tied head is the same entry as
// the embedding), so the sum runs over the whole gradient buffer; parallel
// plugins add the partial sums over their groups, skipping tie replicas.
#pragma once

#include "core/param.h"

namespace lattice::optim {

// Sum of squared gradients over the whole flat buffer (one rank's view).
double grad_sum_squares(const FlatParams& params);

// The same split by placement: under tp, sharded entries hold different
// pieces on each rank (sum them over the tp group), replicated entries hold
// the same values everywhere (count them once).
struct GradSquares {
  double sharded = 0, replicated = 0;
};
GradSquares grad_squares_by_placement(const FlatParams& params);

// Sum of squared gradients over the flat elements [begin, end) of this rank's
// buffers, weighted so that each logical element counts once over the tp
// group: sharded entries fully, replicated entries 1/tp_size (every tp rank
// holds them), tie replicas not at all (their owner counts them). Summed over
// ranks whose ranges together cover every stage's buffer once (tp x pp; with
// ZeRO-1 every rank's dp shard) it is the squared global norm.
double weighted_grad_squares(const FlatParams& params, int tp_size, int64_t begin, int64_t end);
// Factor to multiply gradients by so that their norm is at most max_norm
// (1 when max_norm <= 0 or the norm is already below it).
float clip_factor(double norm, double max_norm);

}  // namespace lattice::optim
