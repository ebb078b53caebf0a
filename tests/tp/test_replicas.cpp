// Tests of src/tp/replicas.cpp and of column blocks held by several tp ranks
// (ParamSpec::max_shards, LLaMA's k/v heads when n_kv_head < tp): the gradient
// sum covers exactly the ranks that share a block (small integers, exact), and
// such a parameter initialises, gathers and re-slices like the tp = 1 tensor.
#include <gtest/gtest.h>

#include "tp/replicas.h"
#include "tp/sharding.h"
#include "tp_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

TEST(TpReplicas, SumCoversExactlyTheRanksSharingABlock) {
  for (comm::Group& tp : tp_test_groups())
    for (int replicas = 1; replicas <= tp.size(); replicas *= 2) {
      if (tp.size() % replicas != 0) continue;
      SCOPED_TRACE(fmt::format("tp {} rank {} replicas {}", tp.size(), tp.rank(), replicas));
      Tensor g = Tensor::empty({3, 2}, DType::f64);
      for (int64_t i = 0; i < 6; ++i) g.data<double>()[i] = double((tp.rank() + 1) * (i + 1));
      tp::sum_over_replicas(g, replicas, tp);
      const int first = tp.rank() / replicas * replicas;
      double rank_sum = 0;  // sum of (r + 1) over the ranks of this block
      for (int r = first; r < first + replicas; ++r) rank_sum += r + 1;
      for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(g.data<double>()[i], rank_sum * double(i + 1)) << i;
    }
}

TEST(TpReplicas, ReplicatedColumnBlocksGatherToTheTp1Tensor) {
  // k_proj-like: 2 blocks (kv heads) of 4 rows; tp 4 holds each block on 2 ranks.
  ParamSpec k = param_spec("k_proj.weight", {8, 6}, Placement::column, InitKind::normal, 0.1f);
  k.max_shards = 2;
  for (comm::Group& tp : tp_test_groups()) {
    SCOPED_TRACE(fmt::format("tp {} rank {}", tp.size(), tp.rank()));
    FlatParams single({k}, DType::f64), sharded({k}, DType::f64, Device::cpu(), shard_of(tp));
    single.init(9);
    sharded.init(9);
    const ParamEntry& e = sharded.entries()[0];
    const int blocks = std::min(tp.size(), 2);
    EXPECT_EQ(e.local_shape, (Shape{8 / blocks, 6}));
    Tensor m = tp::master_weight(sharded, e, tp);
    EXPECT_EQ(closeness(m, single.value("k_proj.weight"), kExact), 0.0);
    Tensor again = tp::shard_from_logical(k, shard_of(tp), m, false);
    EXPECT_EQ(closeness(again, sharded.value(e), kExact), 0.0);
  }
}
