// GradBuckets (booster/grad_buckets.h): the buckets partition the untied part
// of the flat gradient buffer into contiguous ranges of at most the bucket
// size (or one entry), tied entries stay out, a bucket starts the moment its
// last layer reports, and finish() leaves the dp sum in every bucketed entry
// and the tied entries untouched. Run on 2 ranks: the dp group is the world.
#include <gtest/gtest.h>
#include <mpi.h>

#include <set>

#include "booster/grad_buckets.h"
#include "comm/mpi_communicator.h"
#include "config/config.h"
#include "models/registry.h"

using namespace lattice;

namespace {

ModelConfig model(bool tied) {
  Config c = parse_config(R"(
model: { arch: gpt2, n_layer: 4, n_head: 2, d_model: 32, vocab_size: 300, max_seq_len: 16 }
train: { steps: 1, global_batch: 2, micro_batch: 1, seq_len: 16 }
optimizer: { lr: 0.001 }
data: { train: "unused_*.bin", tokenizer: bytes }
)",
                          "buckets", {std::string("model.tie_embeddings=") + (tied ? "true" : "false")});
  return c.model;
}

constexpr double kBucketMb = 0.02;  // 5242 floats: a few entries of a d=32 block

}  // namespace

TEST(GradBuckets, PartitionTheUntiedBufferFromItsEnd) {
  for (bool tied : {true, false}) {
    FlatParams p(model_param_specs(model(tied)), DType::f32);
    comm::Group dp(comm::make_world_communicator(60));
    GradBuckets gb(p, dp, kBucketMb);
    const int64_t limit = int64_t(kBucketMb * 1024 * 1024) / 4;
    const auto& buckets = gb.buckets();
    ASSERT_GT(buckets.size(), 4u);
    std::vector<int> covered(size_t(p.numel()), 0);
    int64_t prev_begin = p.numel() + 1;
    for (const auto& b : buckets) {
      EXPECT_LT(b.begin, b.end);
      EXPECT_LE(b.end, prev_begin) << "buckets run from the buffer's end towards its start";
      prev_begin = b.begin;
      if (b.entries > 1) {
        EXPECT_LE(b.end - b.begin, limit);
      }
      for (int64_t i = b.begin; i < b.end; ++i) ++covered[size_t(i)];
    }
    for (const ParamEntry& e : p.entries()) {
      const int want = e.spec.tie_group.empty() ? 1 : 0;
      for (int64_t i = e.offset; i < e.offset + e.numel; ++i)
        ASSERT_EQ(covered[size_t(i)], want) << e.spec.name << " tied " << tied;
    }
  }
}

TEST(GradBuckets, StartWhenTheirLayersReportAndSumOverDp) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const ModelConfig m = model(true);
  FlatParams p(model_param_specs(m), DType::f32);
  comm::Group dp(comm::make_world_communicator(60));
  GradBuckets gb(p, dp, kBucketMb);
  for (int step = 0; step < 2; ++step) {  // a second step reuses the buckets
    float* g = p.grads().data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) g[i] = float((rank + 1) * (i % 97) + step);
    gb.begin_step();
    std::set<int> reported;
    auto check_started = [&] {
      // A bucket has started exactly when every entry in its range belongs to a reported layer.
      for (const auto& b : gb.buckets()) {
        bool complete = true;
        for (const ParamEntry& e : p.entries())
          if (e.spec.tie_group.empty() && e.offset >= b.begin && e.offset < b.end)
            complete = complete && reported.count(e.spec.layer) > 0;
        EXPECT_EQ(b.started, complete) << "bucket [" << b.begin << ", " << b.end << ")";
      }
    };
    check_started();
    for (int layer = m.n_layer; layer >= kEmbeddingLayer; --layer) {  // backward's order
      gb.layer_ready(layer);
      reported.insert(layer);
      check_started();
    }
    EXPECT_EQ(gb.started_early(), int64_t(gb.buckets().size()));
    gb.finish();
    const int64_t sum_weights = int64_t(size) * (size + 1) / 2;
    for (const ParamEntry& e : p.entries())
      for (int64_t i = e.offset; i < e.offset + e.numel; ++i) {
        const float want = e.spec.tie_group.empty() ? float(sum_weights * (i % 97) + size * step)
                                                    : float((rank + 1) * (i % 97) + step);
        ASSERT_EQ(g[i], want) << e.spec.name << " step " << step;
      }
  }
}

TEST(GradBuckets, ALayerReportedTwiceIsAnError) {
  FlatParams p(model_param_specs(model(true)), DType::f32);
  comm::Group dp(comm::make_world_communicator(60));
  GradBuckets gb(p, dp, 1000.0);  // one bucket for the whole untied buffer
  ASSERT_EQ(gb.buckets().size(), 1u);
  gb.layer_ready(0);
  EXPECT_THROW(gb.layer_ready(0), Error);
  gb.finish();
}
