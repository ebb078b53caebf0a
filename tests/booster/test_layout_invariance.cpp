// The layout-invariance contract (ARCHITECTURE.md §2): inside one mpirun of W
// ranks, every (tp, pp, dp) layout with tp * pp * dp = W, with each pipeline
// schedule (GPipe, 1F1B, interleaved) and even and uneven stage splits, trains
// a tiny GPT-2 (dropout on, tied embeddings, a vocabulary that tp does not
// divide) for 20 steps and must match the single-rank run that each rank also
// computes itself: the loss at every step within relative 1e-5, step 1 within
// 1e-6, and every gradient tensor of step 1 within 1e-5 in relative L2 norm
// against the reference's slice for this rank. The two replicas of the tied
// embedding (first and last stage) stay bit-identical. Every layout with
// dp > 1 runs again with ZeRO-1 (parallel.zero = 1), whose step-1 gradients
// are the dp shards gathered back together. The dp all-reduce runs in small
// buckets that must all start during backward (ZeRO-1 too), and once more
// unbucketed (ZeRO-1: one reduce-scatter). Selective recomputation
// (parallel.recompute_attention, with parallel.cpu_attention: full, whose
// probabilities it shares) runs interleaved, with blocks recomputed whole
// beside it, and in every other model's tp x pp layout; every other case
// runs the CPU's compact attention state (the default), against a one-rank
// run that does too. The LM head in chunks of rows (parallel.head_chunk_tokens)
// runs at tp = W, in GPipe and, for every other model, at (2, 2, 1); the
// one-rank run keeps its head whole.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <regex>
#include <set>

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "layout_harness.h"
#include "models/registry.h"
#include "support/test_support.h"

using namespace lattice;

using namespace lattice::layout_test;

namespace {

// The layouts every other model runs (1F1B, no ZeRO).
std::vector<LayoutCase> model_layouts(int world) {
  if (world == 2) return {{2, 1, 1}, {1, 2, 1}};
  if (world == 4)
    return {{2, 2, 1},
            {4, 1, 1},
            {.tp = 2, .pp = 2, .dp = 1, .recompute_attention = true},
            {.tp = 2, .pp = 2, .dp = 1, .head_chunk = 12}};
  if (world == 8) return {{2, 2, 2}};
  return {};
}

// Every layout of the world: all (tp, pp, dp) factorisations with 1F1B, plus
// GPipe, interleaved and uneven splits where pp > 1; each again with ZeRO-1
// and with one unbucketed all-reduce (and reduce-scatter) where dp > 1. Eight ranks (on a 2-core
// CI machine) run the full 3D layout (2, 2, 2) only.
std::vector<LayoutCase> layouts(int world) {
  std::vector<LayoutCase> out;
  if (world == 8) {
    for (int zero : {0, 1}) {
      out.push_back({.tp = 2, .pp = 2, .dp = 2, .zero = zero});
      out.push_back({.tp = 2, .pp = 2, .dp = 2, .schedule = "interleaved", .virtual_stages = 2, .zero = zero});
    }
    out.push_back({.tp = 2, .pp = 2, .dp = 2, .bucket_mb = 0});
    out.push_back({.tp = 2, .pp = 2, .dp = 2, .zero = 1, .bucket_mb = 0});  // ZeRO-1's reduce-scatter
    out.push_back({.tp = 2,
                   .pp = 2,
                   .dp = 2,
                   .schedule = "interleaved",
                   .virtual_stages = 2,
                   .recompute = "[1,1]",
                   .recompute_attention = true});
    out.push_back({.tp = 2, .pp = 2, .dp = 2, .head_chunk = 12});
    return out;
  }
  for (int tp = 1; tp <= world; ++tp)
    for (int pp = 1; pp <= world / tp; ++pp) {
      if (world % (tp * pp) != 0) continue;
      const int dp = world / (tp * pp);
      if (tp * pp * dp == 1) continue;
      out.push_back({tp, pp, dp});
      if (pp == 1) continue;
      out.push_back({tp, pp, dp, "gpipe"});
      out.push_back({tp, pp, dp, "interleaved", "uniform", 2});
      if (pp == 2) out.push_back({tp, pp, dp, "1f1b", "[3,5]"});
      if (pp == 2) out.push_back({tp, pp, dp, "1f1b", "uniform", 1, "[2,4]"});
      if (pp == 2)
        out.push_back({.tp = tp,
                       .pp = pp,
                       .dp = dp,
                       .schedule = "interleaved",
                       .virtual_stages = 2,
                       .recompute = "[1,1]",
                       .recompute_attention = true});
      if (pp == 4) out.push_back({tp, pp, dp, "1f1b", "[1,3,3,1]"});
    }
  // The LM head and loss in chunks of 12 of a microbatch's 32 rows (12, 12,
  // 8): vocab-parallel over all of tp, and on the last stage of GPipe, whose
  // microbatches all wait for backward with one chunk's logits between them.
  out.push_back({.tp = world, .pp = 1, .dp = 1, .head_chunk = 12});
  out.push_back({.tp = 1, .pp = 2, .dp = world / 2, .schedule = "gpipe", .head_chunk = 12});
  const size_t plain = out.size();
  for (size_t i = 0; i < plain; ++i) {
    if (out[i].dp == 1) continue;
    LayoutCase z = out[i];
    z.zero = 1;
    out.push_back(z);
    if (out[i].schedule != "1f1b" || out[i].layers != "uniform" || out[i].recompute != "[]") continue;
    LayoutCase whole = out[i];
    whole.bucket_mb = 0;
    out.push_back(whole);
    whole.zero = 1;  // ZeRO-1 without buckets: one reduce-scatter after backward
    out.push_back(whole);
  }
  return out;
}

void check_layouts(const std::string& glob, const ModelCase& model, const std::vector<LayoutCase>& cases,
                   int world_rank) {
  auto ref_mesh = mesh::ProcessGroupMesh::create(comm::self_group("world"), {1, 1, 1});
  Trace ref = train(config(glob, {1, 1, 1}, model), ref_mesh);
  EXPECT_LT(ref.loss.back(), ref.loss.front() - 0.5) << "the reference run does not learn";
  for (const LayoutCase& l : cases) {
    SCOPED_TRACE(testing::Message() << "tp=" << l.tp << " pp=" << l.pp << " dp=" << l.dp << " " << l.schedule
                                    << " layers " << l.layers << " virtual_stages " << l.virtual_stages << " recompute "
                                    << l.recompute << " recompute_attention " << l.recompute_attention << " zero "
                                    << l.zero << " dp_bucket_mb " << l.bucket_mb << " head_chunk " << l.head_chunk);
    auto m = mesh::ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)), {l.tp, l.pp, l.dp});
    Trace got = train(config(glob, l, model), m);
    EXPECT_NEAR(got.loss[0], ref.loss[0], 1e-6 * ref.loss[0]);
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(got.loss[size_t(s)], ref.loss[size_t(s)], 1e-5 * ref.loss[size_t(s)]) << "step " << s + 1;
      EXPECT_NEAR(got.norm[size_t(s)], ref.norm[size_t(s)], 1e-4 * ref.norm[size_t(s)]) << "step " << s + 1;
    }
    for (const ParamEntry& e : got.grads_step1.entries())
      EXPECT_LT(relative_l2(got.grads_step1, e, ref.grads_step1), 1e-5) << e.spec.name << " rank " << world_rank;
    if (::testing::Test::HasFailure()) break;  // one failing layout is enough to read
  }
}

}  // namespace

TEST(LayoutInvariance, EveryLayoutMatchesOneRank) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const std::string glob = make_data();
  for (const ModelCase& model : models()) {
    SCOPED_TRACE(model.name);
    check_layouts(glob, model, model.every_layout ? layouts(world_size) : model_layouts(world_size), world_rank);
    if (HasFailure()) break;
  }
}

// The suite's model list is written by hand (layout_harness.cpp): a model
// registered in the zoo but missing there would never be checked, so this
// fails until it is added.
TEST(LayoutInvariance, CoversEveryRegisteredModel) {
  std::set<std::string> covered;
  const std::regex arch(R"(arch:\s*(\w+))");
  for (const ModelCase& model : models()) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(model.yaml, m, arch)) << model.name;
    covered.insert(m[1].str());
  }
  for (const std::string& a : registered_archs())
    EXPECT_TRUE(covered.count(a)) << "model '" << a
                                  << "' is registered but tests/booster/layout_harness.cpp's models() "
                                  << "has no case for it";
}
