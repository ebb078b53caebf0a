// Moving parameters between their logical (unsharded) form and tp shards.
//
// The slicing rules are core/param.h's (local_to_logical); this file adds the
// communication (master_weight) and source-layout handling (shard_from_logical)
// that checkpoints, HF import/export and tests need. Linear weights are
// stored (OC, C) in Lattice; HF GPT-2's Conv1D stores them (C, OC)
// (Megatron/ColossalAI call that layout "reversed").
#pragma once

#include "comm/communicator.h"
#include "core/param.h"
#include "core/tensor.h"

namespace lattice::tp {

// The logical tensor (spec.shape, no vocabulary padding) of parameter `e`,
// gathered over tp: every rank of the group gets it, as a CPU tensor of the
// parameters' dtype. `tp` must be the group the params were sharded over
// (size and rank equal to params.shard()). A collective for sharded entries;
// replicated entries are copied without communication.
Tensor master_weight(const FlatParams& params, const ParamEntry& e, comm::Group& tp);

// The same for any buffer laid out like the parameters (optimizer state):
// `local` is entry e's view (local_shape) of that buffer on this tp rank.
Tensor gather_logical(const ParamEntry& e, const Tensor& local, const TpShard& shard, comm::Group& tp);

// This rank's shard (local_shape(spec, shard), CPU, the dtype of `logical`)
// of a logical tensor. `logical` has spec.shape, or, when source_transposed
// (a 2-D weight stored (C, OC) as HF Conv1D does), the transposed shape; it is
// sliced as the (OC, C) tensor it stands for. Vocabulary padding rows are 0.
Tensor shard_from_logical(const ParamSpec& spec, const TpShard& shard, const Tensor& logical, bool source_transposed);

}  // namespace lattice::tp
