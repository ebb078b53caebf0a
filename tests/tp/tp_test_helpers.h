// Helpers shared by the multi-rank tests of src/tp (CONVENTIONS.md §12): the
// groups each check runs on, and the expected shard of a logical tensor
// computed with explicit block arithmetic (independent of core/param.cpp, so
// the tests do not trust the code they check).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/param.h"
#include "core/tensor.h"
#include "support/test_support.h"

namespace lattice::test {

// The tp groups a test runs its checks on: the whole job, and, when the job
// has 4 or more ranks (an even count), each half of it, so expectations are
// exercised at more than one group size. Collective: every rank calls it.
std::vector<comm::Group> tp_test_groups();

// Exact equality through the tolerance machinery (atol tiny so 0 / 0 is never formed).
inline constexpr Tolerance kExact{0.0, 1e-300};

// A ParamSpec built field by field (a designated initializer that skips
// tie_group draws -Wmissing-field-initializers); n_fused and weight_decay
// are set on the result where a test needs them.
ParamSpec param_spec(std::string name, Shape shape, Placement placement, InitKind init, float init_std = 0.0f);
ParamSpec fused(ParamSpec s, int n_fused);
ParamSpec decayed(ParamSpec s);

TpShard shard_of(const comm::Group& tp, int64_t vocab_multiple = 1);

// Block `rank` of every one of `n_parts` parts of the last dim of full (..., K).
Tensor slice_last_dim(const Tensor& full, int rank, int size, int n_parts = 1);

// This rank's shard of a logical tensor with spec.shape, by the placement
// rules written out again: column = rows f P + r P/p ... of every fused part,
// row = last-dim block r, vocab = rows [r V_l, (r + 1) V_l) of the zero-padded
// table, replicated = all.
Tensor expected_shard(const Tensor& logical, const ParamSpec& spec, const TpShard& shard);

// For every entry of `sharded`: its values (or grads) equal the expected shard
// of the same entry of `full` (built at tp = 1, vocab_multiple 1).
void expect_values_are_shards(const FlatParams& full, const FlatParams& sharded, Tolerance tol, const char* what);
void expect_grads_are_shards(const FlatParams& full, const FlatParams& sharded, Tolerance tol, const char* what);
// Takes one AdamW step (optim::make_optimizer defaults, weight decay on) on
// both and expects the sharded values to be the shards of the full ones.
void expect_adamw_step_matches(FlatParams& full, FlatParams& sharded, Tolerance tol, const char* what);

}  // namespace lattice::test
