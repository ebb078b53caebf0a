// The layer-to-stage split (uniform, balanced, list), its one-line errors, and
// the stage manager's neighbours, in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "core/error.h"
#include "pipeline/stage_manager.h"

namespace lattice::pipeline {
namespace {

StageConfig config(int n_layer, int pp, StageSplit split = StageSplit::uniform, std::vector<int> list = {}) {
  StageConfig c;
  c.n_layer = n_layer;
  c.pp = pp;
  c.split = split;
  c.layers_per_stage = std::move(list);
  return c;
}

std::vector<int> counts(const StageLayout& l) {
  std::vector<int> out;
  for (const LayerRange& r : l.chunks) out.push_back(r.size());
  return out;
}

std::string error_of(const StageConfig& c) {
  try {
    make_stage_layout(c);
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(StageLayout, UniformGivesTheRemainderToTheMiddleStages) {
  EXPECT_EQ(split_uniform(12, 4), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(split_uniform(10, 4), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(split_uniform(9, 4), (std::vector<int>{2, 3, 2, 2}));
  EXPECT_EQ(split_uniform(11, 4), (std::vector<int>{3, 3, 3, 2}));  // every middle has one more: then the first
  EXPECT_EQ(split_uniform(7, 2), (std::vector<int>{4, 3}));
  EXPECT_EQ(split_uniform(5, 1), (std::vector<int>{5}));
  EXPECT_EQ(split_uniform(17, 8), (std::vector<int>{2, 2, 2, 3, 2, 2, 2, 2}));
  for (int chunks = 1; chunks <= 8; ++chunks) {
    for (int n = chunks; n <= 40; ++n) {
      auto c = split_uniform(n, chunks);
      EXPECT_EQ(std::accumulate(c.begin(), c.end(), 0), n);
      auto [lo, hi] = std::minmax_element(c.begin(), c.end());
      EXPECT_LE(*hi - *lo, 1) << n << " into " << chunks;
    }
  }
}

TEST(StageLayout, ListGivesContiguousRangesInChunkOrder) {
  StageLayout l = make_stage_layout(config(16, 4, StageSplit::list, {3, 5, 5, 3}));
  EXPECT_EQ(l.layers(0), (LayerRange{0, 3}));
  EXPECT_EQ(l.layers(1), (LayerRange{3, 8}));
  EXPECT_EQ(l.layers(2), (LayerRange{8, 13}));
  EXPECT_EQ(l.layers(3), (LayerRange{13, 16}));
  const std::string map = l.describe();
  EXPECT_NE(map.find("stage 0: layers 0-2 (3) + embedding"), std::string::npos) << map;
  EXPECT_NE(map.find("stage 3: layers 13-15 (3) + head, loss"), std::string::npos) << map;
}

TEST(StageLayout, InterleavedChunksGoToStageCModPp) {
  StageConfig c = config(8, 2, StageSplit::list, {1, 2, 3, 2});
  c.virtual_stages = 2;
  c.interleaved = true;
  c.microbatches = 4;
  StageLayout l = make_stage_layout(c);
  EXPECT_EQ(l.layers(0, 0), (LayerRange{0, 1}));  // model chunk 0
  EXPECT_EQ(l.layers(1, 0), (LayerRange{1, 3}));  // model chunk 1
  EXPECT_EQ(l.layers(0, 1), (LayerRange{3, 6}));  // model chunk 2
  EXPECT_EQ(l.layers(1, 1), (LayerRange{6, 8}));  // model chunk 3
  EXPECT_EQ(l.layers_on_stage(0), 4);
  c.split = StageSplit::uniform;
  EXPECT_EQ(counts(make_stage_layout(c)), (std::vector<int>{2, 2, 2, 2}));
  const std::string map = make_stage_layout(c).describe();
  EXPECT_NE(map.find("stage 1: chunk 1 layers 2-3 (2), chunk 3 layers 6-7 (2) + head, loss"), std::string::npos) << map;
}

TEST(StageLayout, BalancedMovesLayersOffTheEmbeddingAndHeadStages) {
  // GPT-2 124M: the LM head costs ~4.5 blocks and each table holds ~5.5 blocks of parameters.
  const StageCostModel gpt2{768, 50257, 1024};
  EXPECT_NEAR(head_cost_in_blocks(gpt2), 4.47, 0.01);
  StageConfig c = config(12, 4, StageSplit::balanced);
  c.cost = gpt2;
  std::vector<int> balanced = counts(make_stage_layout(c));
  std::vector<int> uniform = counts(make_stage_layout(config(12, 4)));
  EXPECT_LT(balanced.front(), uniform.front());
  EXPECT_LT(balanced.back(), uniform.back());
  // Last stage: 1 block + head (5.47) is the floor of the max cost, so every
  // other stage may take up to 5 blocks; the parameter tie-break then keeps
  // the embedding stage at 1 too.
  EXPECT_EQ(balanced, (std::vector<int>{1, 5, 5, 1}));
  // A small vocabulary costs little: balanced is the even split.
  c.cost = {64, 256, 64};
  c.n_layer = 8;
  EXPECT_EQ(counts(make_stage_layout(c)), (std::vector<int>{2, 2, 2, 2}));
}

TEST(StageLayout, BalancedMinimisesTheMostExpensiveStage) {
  const StageCostModel m{64, 4000, 128};  // head ~3.9 blocks
  const double head = head_cost_in_blocks(m), embed = embedding_cost_in_blocks(m);
  for (int chunks = 2; chunks <= 4; ++chunks) {
    for (int n = chunks; n <= 10; ++n) {
      auto cost_of = [&](const std::vector<int>& s) {
        double worst = 0;
        for (int i = 0; i < chunks; ++i)
          worst = std::max(worst, s[size_t(i)] + (i == 0 ? embed : 0) + (i == chunks - 1 ? head : 0));
        return worst;
      };
      double best = 1e9;  // brute force over every composition
      std::vector<int> s(size_t(chunks), 1);
      std::function<void(int, int)> walk = [&](int i, int left) {
        if (i == chunks - 1) {
          s[size_t(i)] = left;
          best = std::min(best, cost_of(s));
          return;
        }
        for (int k = 1; k <= left - (chunks - 1 - i); ++k) {
          s[size_t(i)] = k;
          walk(i + 1, left - k);
        }
      };
      walk(0, n);
      auto got = split_balanced(n, chunks, m);
      EXPECT_EQ(std::accumulate(got.begin(), got.end(), 0), n);
      EXPECT_NEAR(cost_of(got), best, 1e-9) << n << " layers into " << chunks;
    }
  }
}

TEST(StageLayout, BadInputIsOneLineNamingTheKey) {
  EXPECT_EQ(error_of(config(8, 3, StageSplit::list, {1, 3, 3})),
            "parallel.layers_per_stage: [1, 3, 3] sums to 7, but model.n_layer is 8");
  EXPECT_EQ(error_of(config(8, 4, StageSplit::list, {2, 3, 3})),
            "parallel.layers_per_stage: [2, 3, 3] has 3 entries, but pp (4) * virtual_stages (1) = 4 — give one "
            "count per stage");
  EXPECT_EQ(error_of(config(6, 3, StageSplit::list, {3, 0, 3})),
            "parallel.layers_per_stage[1]: must be at least 1 (got 0) — every stage holds a layer");
  EXPECT_EQ(error_of(config(3, 4)),
            "model.n_layer: 3 layers cannot fill pp (4) * virtual_stages (1) = 4 stages — each stage needs a layer");
  StageConfig c = config(8, 2);
  c.virtual_stages = 2;
  EXPECT_EQ(error_of(c),
            "parallel.virtual_stages: 2, but only the interleaved schedule uses virtual stages — set "
            "parallel.schedule: interleaved");
  c.interleaved = true;
  c.microbatches = 3;
  EXPECT_EQ(error_of(c),
            "parallel.microbatches: 3 is not a multiple of pp (2) — the interleaved schedule runs whole rounds of pp "
            "microbatches");
  c.microbatches = 4;
  c.n_layer = 10;
  EXPECT_EQ(error_of(c),
            "model.n_layer: 10 layers do not divide into pp (2) * virtual_stages (2) = 4 equal chunks, which the "
            "uniform split needs with interleaving — change virtual_stages or give parallel.layers_per_stage as a "
            "list");
  c.split = StageSplit::list;  // an explicit list may be uneven
  c.layers_per_stage = {2, 3, 3, 2};
  EXPECT_EQ(counts(make_stage_layout(c)), (std::vector<int>{2, 3, 3, 2}));
  StageConfig b = config(8, 2, StageSplit::balanced);
  EXPECT_NE(error_of(b).find("balanced needs model.d_model"), std::string::npos);
}

TEST(PipelineStageManager, NeighboursFirstLastAndWorldRanks) {
  StageLayout l = make_stage_layout(config(8, 4));
  const std::vector<int> world = {1, 3, 5, 7};
  PipelineStageManager first(l, 0, world), mid(l, 2, world), last(l, 3, world);
  EXPECT_TRUE(first.is_first_stage());
  EXPECT_TRUE(first.is_first_chunk(0));
  EXPECT_EQ(first.prev_stage(), -1);
  EXPECT_EQ(first.prev_rank(), -1);
  EXPECT_EQ(first.next_rank(), 3);
  EXPECT_EQ(mid.prev_rank(), 3);
  EXPECT_EQ(mid.next_rank(), 7);
  EXPECT_EQ(mid.layers(), (LayerRange{4, 6}));
  EXPECT_TRUE(last.is_last_stage());
  EXPECT_TRUE(last.is_last_chunk(0));
  EXPECT_EQ(last.next_stage(), -1);
  EXPECT_FALSE(mid.is_first_chunk(0) || mid.is_last_chunk(0));

  StageConfig c = config(8, 2);
  c.virtual_stages = 2;
  c.interleaved = true;
  c.microbatches = 2;
  PipelineStageManager s0(make_stage_layout(c), 0), s1(make_stage_layout(c), 1);
  EXPECT_EQ(s0.prev_stage(), 1);  // the ring: stage 1's chunk 0 feeds stage 0's chunk 1
  EXPECT_EQ(s1.next_stage(), 0);
  EXPECT_TRUE(s0.is_first_chunk(0));
  EXPECT_FALSE(s0.is_first_chunk(1));
  EXPECT_TRUE(s1.is_last_chunk(1));
  EXPECT_EQ(s0.model_chunk(1), 2);
  EXPECT_THROW(PipelineStageManager(l, 4), Error);
  EXPECT_THROW(PipelineStageManager(l, 0, {0, 1}), Error);
}

}  // namespace
}  // namespace lattice::pipeline
