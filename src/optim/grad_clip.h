// Global gradient norm and clipping.
//
// The norm counts each logical parameter once. On one rank the flat buffer
// holds each logical parameter exactly once (a tied head is the same entry as
// the embedding), so the sum runs over the whole gradient buffer; parallel
// plugins add the partial sums over their groups, skipping tie replicas.
#pragma once

#include "core/param.h"

namespace lattice::optim {

// Sum of squared gradients over the entries this rank counts.
double grad_sum_squares(const FlatParams& params);
// Factor to multiply gradients by so that their norm is at most max_norm
// (1 when max_norm <= 0 or the norm is already below it).
float clip_factor(double norm, double max_norm);

}  // namespace lattice::optim
