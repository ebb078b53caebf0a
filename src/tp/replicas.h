// Gradients of column blocks held by several tp ranks.
//
// A column-parallel weight whose ParamSpec::max_shards is below the tp size
// (LLaMA's k/v projections with n_kv_head < tp) splits into S = max_shards
// blocks, each held by R = tp / S consecutive ranks (core/param.h
// tp_replicas). Each of those ranks computes only its own heads' share of the
// block's gradient; the true gradient is the sum over the R ranks.
//
// sum_over_replicas overwrites `grad_local` (any shape; this rank's block, the
// same size on every rank) with that sum. It is a collective over the WHOLE tp
// group (every rank calls it, in the same order): an all-reduce of S blocks in
// which rank r contributes block r / R and zeros elsewhere, so no sub-group is
// needed. Returns at once when replicas == 1. Blocking.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"

namespace lattice::tp {

void sum_over_replicas(Tensor& grad_local, int replicas, comm::Group& tp);

}  // namespace lattice::tp
