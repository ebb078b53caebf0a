// Tests of src/tp/sharding.cpp: master_weight gathers every placement back to
// the logical tensor that a tp = 1 run initialises, and shard_from_logical
// slices logical tensors, including HF Conv1D's transposed (C, OC) layout.
#include <gtest/gtest.h>

#include "tp/sharding.h"
#include "tp_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

constexpr uint64_t kSeed = 2024;

// One parameter of every placement and several init kinds; sizes that tp 1, 2, 4 split.
std::vector<ParamSpec> table() {
  return {
      param_spec("wte", {13, 8}, Placement::vocab, InitKind::normal, 0.02f),
      fused(param_spec("c_attn.weight", {24, 8}, Placement::column, InitKind::xavier_uniform), 3),
      fused(param_spec("c_attn.bias", {24}, Placement::column, InitKind::uniform, 0.5f), 3),
      param_spec("c_fc.weight", {16, 8}, Placement::column, InitKind::kaiming_normal),
      param_spec("c_proj.weight", {8, 16}, Placement::row, InitKind::scaled_normal, 0.01f),
      param_spec("ln.weight", {8}, Placement::replicated, InitKind::ones),
      param_spec("ln.bias", {8}, Placement::replicated, InitKind::kaiming_uniform),
  };
}

// (C, OC) transpose of a 2-D (OC, C) tensor: how HF Conv1D stores it.
Tensor transposed(const Tensor& t) {
  const int64_t OC = t.dim(0), C = t.dim(1);
  Tensor f = to_f64(t), out = Tensor::empty({C, OC}, DType::f64);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c) out.data<double>()[c * OC + o] = f.data<double>()[o * C + c];
  return t.dtype() == DType::f64 ? out : out.to(t.dtype());
}

}  // namespace

TEST(TpSharding, MasterWeightRoundTripEqualsTheTp1Init) {
  for (comm::Group& tp : tp_test_groups())
    for (DType dt : {DType::f32, DType::f64})
      for (int64_t multiple : {1, 4}) {
        SCOPED_TRACE(fmt::format("tp {} rank {} {} vocab_multiple {}", tp.size(), tp.rank(), dtype_name(dt), multiple));
        FlatParams single(table(), dt), sharded(table(), dt, Device::cpu(), shard_of(tp, multiple));
        single.init(kSeed);
        sharded.init(kSeed);
        for (const ParamEntry& e : sharded.entries()) {
          Tensor m = tp::master_weight(sharded, e, tp);
          ASSERT_EQ(m.shape(), e.spec.shape) << e.spec.name;  // logical: no vocabulary padding
          EXPECT_EQ(closeness(m, single.value(e.spec.name), kExact), 0.0) << e.spec.name;
        }
      }
}

TEST(TpSharding, MasterWeightRefusesAGroupOfAnotherShard) {
  for (comm::Group& tp : tp_test_groups()) {
    FlatParams other_size(table(), DType::f32, Device::cpu(), TpShard{tp.rank(), 2 * tp.size(), 1});
    EXPECT_THROW(tp::master_weight(other_size, other_size.entries()[1], tp), Error);
    if (tp.size() == 1) continue;
    FlatParams other_rank(table(), DType::f32, Device::cpu(), TpShard{(tp.rank() + 1) % tp.size(), tp.size(), 1});
    EXPECT_THROW(tp::master_weight(other_rank, other_rank.entries()[1], tp), Error);
  }
}

TEST(TpSharding, ShardFromLogicalSlicesPlainAndConv1DSources) {
  for (comm::Group& tp : tp_test_groups()) {
    const TpShard shard = shard_of(tp, 4);
    FlatParams single(table(), DType::f32);
    single.init(kSeed);
    for (const ParamEntry& e : single.entries()) {
      SCOPED_TRACE(fmt::format("{} tp {} rank {}", e.spec.name, tp.size(), tp.rank()));
      Tensor logical = single.value(e), expect = expected_shard(logical, e.spec, shard);
      Tensor plain = tp::shard_from_logical(e.spec, shard, logical, false);
      ASSERT_EQ(plain.shape(), local_shape(e.spec, shard));
      EXPECT_EQ(closeness(plain, expect, kExact), 0.0) << "plain source";
      if (e.spec.shape.size() != 2) continue;
      Tensor conv1d = transposed(logical);  // stored (C, OC)
      Tensor from_t = tp::shard_from_logical(e.spec, shard, conv1d, true);
      EXPECT_EQ(closeness(from_t, expect, kExact), 0.0) << "Conv1D (transposed) source";
      if (e.spec.shape[0] != e.spec.shape[1]) {
        EXPECT_THROW(tp::shard_from_logical(e.spec, shard, conv1d, false), Error) << "wrong layout accepted";
      }
    }
  }
}

TEST(TpSharding, ShardsOfEverySizeCoverTheLogicalTensor) {
  // Pure slicing, in one process: at tp 1..4 the shards of all ranks hold every
  // logical element exactly once (vocabulary padding aside).
  FlatParams single(table(), DType::f64);
  single.init(kSeed);
  for (int size : {1, 2, 4})
    for (const ParamEntry& e : single.entries()) {
      if (e.spec.placement == Placement::replicated) continue;
      double sum = 0, expect = 0;
      Tensor logical = single.value(e);
      for (int64_t i = 0; i < logical.numel(); ++i) expect += logical.data<double>()[i];
      for (int r = 0; r < size; ++r) {
        Tensor s = tp::shard_from_logical(e.spec, TpShard{r, size, 4}, logical, false);
        for (int64_t i = 0; i < s.numel(); ++i) sum += s.data<double>()[i];
      }
      EXPECT_NEAR(sum, expect, 1e-12) << e.spec.name << " at tp " << size;
    }
}
