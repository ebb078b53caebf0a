// lattice plan's memory prediction against the allocator, under mpirun: every
// rank builds the real HybridParallelPlugin, runs two training steps (execute
// the pipeline, optimizer step; the second step starts with every pooled
// context, so its peak can be higher) and compares its allocator peak above
// what was live before the plugin with the peak plan predicts for its rank.
// To the byte: tiny layouts of the world size (pp with each schedule,
// recomputation of blocks and of attention, tp, dp, ZeRO-1; fp32 and fp16),
// and the GPT-2 124M shape (configs/gpt2-small.yaml) at pp = 2, where the
// parameters, the optimizer state and the 50k-row logits dominate: a formula
// fitted to tiny shapes would not pass both.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "booster/hybrid_parallel_plugin.h"
#include "booster/plan.h"
#include "comm/mpi_communicator.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "data/shard.h"
#include "support/test_support.h"

using namespace lattice;

namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Shards of `tokens` ids below `vocab` (train and val) in a directory of this rank's own.
std::string write_shards(const std::string& tag, int64_t tokens, int vocab) {
  std::string dir = test::make_temp_dir(tag);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  RngKey k{.seed = 11, .purpose = RngPurpose::data};
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(rng_uniform(k, 0, i) * vocab) % vocab;
  data::write_shard(dir + "/m_train_000000.bin", ids);
  data::write_shard(dir + "/m_val_000000.bin", ids);
  return dir;
}

// The tiny GPT-2 the layout cases vary, on shards in `dir`, without its runtime mapping.
std::string tiny_yaml(const std::string& dir) {
  return R"(
model: { arch: gpt2, n_layer: 4, n_head: 4, d_model: 32, vocab_size: 300, max_seq_len: 64 }
train: { steps: 5, global_batch: 16, micro_batch: 2, seq_len: 64 }
optimizer: { lr: 0.001 }
data: { train: ")" +
         dir + R"(/m_train_*.bin", tokenizer: bytes }
)";
}

// This rank's allocator peak during the plugin's construction and two steps,
// above the bytes live before it.
int64_t measured_peak(const Config& cfg) {
  const Layout l = resolve_layout(cfg, world_size());
  auto mesh = mesh::ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(120)), {l.tp, l.pp, l.dp});
  const int64_t base = memory_stats(Device::cpu()).live_bytes;
  reset_peak_memory(Device::cpu());
  {
    HybridParallelPlugin plugin(cfg, mesh);
    for (int64_t step = 1; step <= 2; ++step) {
      plugin.execute_pipeline(step);
      plugin.optimizer_step(step, 1e-4);
    }
  }
  return memory_stats(Device::cpu()).peak_bytes - base;
}

// The prediction is the measured peak, to the byte.
void expect_exact_prediction(const Config& cfg) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const RankMemory want = make_job_plan(cfg, world_size()).memory.at(size_t(rank));
  const int64_t got = measured_peak(cfg);
  std::printf("  rank %d (tp %d dp %d pp %d): predicted %s = %lld B (activations %s), measured %lld B, %+.3f%%\n", rank,
              want.coord.tp, want.coord.dp, want.coord.pp, format_bytes(want.total()).c_str(), (long long)want.total(),
              format_bytes(want.activations.total()).c_str(), (long long)got,
              100.0 * double(want.total() - got) / double(got));
  std::fflush(stdout);
  EXPECT_EQ(want.total(), got) << "rank " << rank;
}

}  // namespace

TEST(PlanMemory, TinyLayoutsOfTheWorld) {
  const int world = world_size();
  const std::string base = tiny_yaml(write_shards("planmem", 20000, 256)) + "runtime: { threads: 1 }\n";
  const std::string pp = "parallel.pp=" + std::to_string(world), n = std::to_string(world);
  std::string recompute = "parallel.recompute_layers_per_stage=[1";  // one block per stage
  for (int s = 1; s < world; ++s) recompute += ",1";
  recompute += "]";
  std::vector<std::vector<std::string>> layouts = {
      {pp, "parallel.schedule=1f1b"},
      {pp, "parallel.schedule=gpipe"},
      {pp, "parallel.schedule=interleaved", "parallel.virtual_stages=2", "model.n_layer=" + std::to_string(2 * world)},
      // Twice as many microbatches as stages: the second step's peak is one boundary buffer above the first's.
      {pp, "parallel.schedule=interleaved", "parallel.virtual_stages=2", "model.n_layer=" + std::to_string(2 * world),
       "train.micro_batch=" + std::to_string(8 / world)},
      {pp, recompute},
      {pp, "parallel.recompute_attention=true"},
      {pp, "parallel.schedule=gpipe", "parallel.head_chunk_tokens=7"},
      {pp, recompute, "parallel.recompute_attention=true", "parallel.schedule=interleaved", "parallel.virtual_stages=2",
       "model.n_layer=" + std::to_string(2 * world)},
      {"parallel.tp=" + n},
      {"parallel.tp=" + n, "parallel.head_chunk_tokens=7"},
      // k/v heads replicated over the tp ranks: their gradients summed in a buffer of their own in backward.
      {"parallel.tp=" + n, "model.arch=llama", "model.n_kv_head=1", "model.d_ff=64", "model.tie_embeddings=false"},
      {"parallel.dp=" + n},
      {"parallel.dp=" + n, "parallel.zero=1"},
  };
  if (world >= 4 && world % 2 == 0) {  // mixed layouts: tp x pp, and pp x dp with ZeRO-1
    layouts.push_back({"parallel.tp=2", "parallel.pp=" + std::to_string(world / 2)});
    layouts.push_back({"parallel.pp=2", "parallel.zero=1"});
  }
  for (const std::vector<std::string>& o : layouts) {
    SCOPED_TRACE(testing::PrintToString(o));
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::printf("layout %s\n", testing::PrintToString(o).c_str());
    expect_exact_prediction(parse_config(base, "tiny.yaml", o));
  }
}

// runtime.precision fp16 (which every CPU runs): activations and the
// boundary buffers in 16 bits, statistics and losses fp32, plus the
// parameters' fp16 shadow, in the prediction and in the allocator alike. At
// tp > 1 the row-parallel outputs and column-parallel input gradients are
// summed in fp32 temporaries (tp/linear.cpp), in forward and in backward, and
// LLaMA's replicated k/v gradients in a buffer of their own (tp/replicas.cpp):
// every model at tp = world, the head whole and in chunks.
TEST(PlanMemory, SixteenBitActivations) {
  const int world = world_size();
  const std::string base =
      tiny_yaml(write_shards("planmem16", 20000, 256)) + "runtime: { threads: 1, precision: fp16 }\n";
  const std::string n = std::to_string(world), tp = "parallel.tp=" + n;
  const std::vector<std::string> llama = {"model.arch=llama", "model.n_kv_head=1", "model.d_ff=64",
                                          "model.tie_embeddings=false"};
  std::vector<std::vector<std::string>> layouts = {{"parallel.pp=" + n},
                                                   {tp},
                                                   {tp, "parallel.head_chunk_tokens=7"},
                                                   {"parallel.dp=" + n, "parallel.zero=1"},
                                                   {tp, "model.arch=neox", "model.d_ff=64"},
                                                   {tp, "model.arch=bert", "model.d_ff=48"}};
  for (const char* head : {"parallel.head_chunk_tokens=0", "parallel.head_chunk_tokens=7"}) {
    layouts.push_back(llama);
    layouts.back().insert(layouts.back().end(), {tp, head});
  }
  for (const std::vector<std::string>& o : layouts) {
    SCOPED_TRACE(testing::PrintToString(o));
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::printf("layout %s\n", testing::PrintToString(o).c_str());
    expect_exact_prediction(parse_config(base, "tiny16.yaml", o));
  }
}

TEST(PlanMemory, Gpt2SmallAtTwoStages) {
  if (world_size() != 2) GTEST_SKIP() << "the GPT-2 124M check runs at pp = 2 on 2 ranks";
  const char* src = std::getenv("LATTICE_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "LATTICE_SOURCE_DIR is not set (CTest sets it)";
  const std::string dir = write_shards("plan124m", 8 * 257, 50257);
  const Config cfg =
      load_config(std::string(src) + "/configs/gpt2-small.yaml",
                  {"parallel.pp=2", "train.micro_batch=1", "train.seq_len=256", "train.global_batch=4",
                   "runtime.threads=1", "data.train=" + dir + "/m_train_*.bin", "data.val=" + dir + "/m_val_*.bin"});
  ASSERT_EQ(cfg.model.d_model, 768);
  ASSERT_EQ(cfg.model.vocab_size, 50257);
  expect_exact_prediction(cfg);
  // The same under fp16: half the bytes of every activation (the logits above
  // all), the fp16 shadow on top of the parameters.
  Config half = cfg;
  half.runtime.precision = Precision::fp16;
  expect_exact_prediction(half);
}
