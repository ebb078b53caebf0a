// The activation memory a pipeline schedule promises, read from the
// allocator's counters: during the first training step, stage s of a 1F1B
// pipeline holds (stages - s) microbatch contexts at most, GPipe holds all
// microbatches'. One context's bytes are measured the same way (allocator
// live bytes around make_context of the stage's chunk); the difference
// between the two schedules' peaks is the contexts (and their boundary
// activation buffers) that GPipe holds beyond 1F1B.
#include <gtest/gtest.h>
#include <mpi.h>

#include "booster/hybrid_parallel_plugin.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "data/shard.h"
#include "models/registry.h"
#include "support/test_support.h"

using namespace lattice;

namespace {

constexpr int kMicrobatches = 8;

Config config(const std::string& glob, int pp, const std::string& schedule) {
  return parse_config(R"(
model: { arch: gpt2, n_layer: 4, n_head: 2, d_model: 32, vocab_size: 300, max_seq_len: 32 }
train: { steps: 5, global_batch: 16, micro_batch: 2, seq_len: 32 }
optimizer: { lr: 0.001 }
data: { train: ")" + glob +
                          R"(", tokenizer: bytes }
runtime: { threads: 1 }
)",
                      "memory-test", {"parallel.pp=" + std::to_string(pp), "parallel.schedule=" + schedule});
}

// Allocator bytes of one microbatch context of this rank's chunk.
int64_t context_bytes(const Config& cfg, const pipeline::PipelineStageManager& stages) {
  const pipeline::LayerRange& r = stages.layers();
  StageSpan span{r.begin, r.end, stages.is_first_chunk(0), stages.is_last_chunk(0)};
  comm::Group tp = comm::self_group("tp");
  FlatParams params(select_stage_params(model_param_specs(cfg.model), {span}, cfg.model.n_layer), DType::f32,
                    Device::cpu(), TpShard{.vocab_multiple = cfg.model.vocab_multiple});
  auto model = build_model(cfg.model, params, tp, span);
  const int64_t before = memory_stats(Device::cpu()).live_bytes;
  auto ctx = model->make_context(cfg.train.micro_batch, cfg.train.seq_len);
  return memory_stats(Device::cpu()).live_bytes - before;
}

// Peak bytes above the starting point during the first step of a fresh plugin.
int64_t first_step_peak(const Config& cfg, mesh::ProcessGroupMesh& mesh, int64_t* ctx_bytes) {
  HybridParallelPlugin plugin(cfg, mesh);
  *ctx_bytes = context_bytes(cfg, plugin.stages());
  reset_peak_memory(Device::cpu());
  const int64_t base = memory_stats(Device::cpu()).live_bytes;
  plugin.execute_pipeline(1);
  return memory_stats(Device::cpu()).peak_bytes - base;
}

}  // namespace

TEST(PipelineMemory, OneFOneBHoldsStagesMinusStageContextsGPipeAll) {
  int pp = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &pp);
  std::string dir = test::make_temp_dir("pipemem");
  std::vector<int32_t> tokens(4000);
  RngKey k{.seed = 2, .purpose = RngPurpose::data};
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(rng_uniform(k, 0, i) * 256);
  data::write_shard(dir + "/m_train_000000.bin", tokens);
  const std::string glob = dir + "/m_train_*.bin";

  int64_t peak[2] = {0, 0}, ctx = 0;
  int stage = 0;
  const char* schedules[2] = {"1f1b", "gpipe"};
  for (int i = 0; i < 2; ++i) {
    auto mesh = mesh::ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)), {1, pp, 1});
    stage = mesh.this_coord().pp;
    peak[i] = first_step_peak(config(glob, pp, schedules[i]), mesh, &ctx);
  }
  const int64_t held_1f1b = pp - stage, held_gpipe = kMicrobatches;
  const int64_t boundary = 2 * int64_t(2 * 32 * 32 * sizeof(float));  // input + output (B, T, C) per microbatch
  SCOPED_TRACE(testing::Message() << "stage " << stage << ": peak 1f1b " << peak[0] << " B, gpipe " << peak[1]
                                  << " B, one context " << ctx << " B");
  ASSERT_GT(ctx, 0);
  EXPECT_GE(peak[0], held_1f1b * ctx);
  EXPECT_GE(peak[1], held_gpipe * ctx);
  const int64_t extra = held_gpipe - held_1f1b;
  EXPECT_GE(peak[1] - peak[0], extra * ctx);
  EXPECT_LE(peak[1] - peak[0], extra * (ctx + boundary));
}
