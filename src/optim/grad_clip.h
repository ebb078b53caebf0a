// Global gradient norm and clipping.
//
// The norm counts each logical parameter once: weighted_grad_squares gives a
// rank's share, and the plugin sums the shares over its groups.
#pragma once

#include "core/param.h"

namespace lattice::optim {

// Sum of squared gradients over the flat elements [begin, end) of this rank's
// buffers, weighted so that each logical element counts once over the tp
// group: sharded entries fully (a column block held by tp_replicas ranks 1/tp_replicas),
// replicated entries 1/tp_size (every tp rank holds them), tie replicas not at all (their owner counts them). Summed over
// ranks whose ranges together cover every stage's buffer once (tp x pp; with
// ZeRO-1 every rank's dp shard) it is the squared global norm.
double weighted_grad_squares(const FlatParams& params, int tp_size, int64_t begin, int64_t end);
// Factor to multiply gradients by so that their norm is at most max_norm
// (1 when max_norm <= 0 or the norm is already below it).
float clip_factor(double norm, double max_norm);

}  // namespace lattice::optim
