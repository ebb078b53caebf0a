// The single-rank plugin: gradient accumulation over microbatches computes the
// same step as one large microbatch (the loss-normalisation rule and the
// layout-invariant dropout keys), the step's data depends only on (seed, step),
// and ZeRO-1 on one dp rank is the plain optimizer, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "booster/hybrid_parallel_plugin.h"
#include "comm/self_communicator.h"
#include "core/allocator.h"
#include "core/rng.h"
#include "data/shard.h"
#include "models/chunk_model.h"
#include "support/test_support.h"

using namespace lattice;

namespace {

std::string make_shards(const std::string& dir) {
  std::vector<int32_t> tokens;
  RngKey k{.seed = 3, .purpose = RngPurpose::data};
  for (int i = 0; i < 6000; ++i) tokens.push_back(int32_t(rng_uniform(k, 0, uint64_t(i)) * 50) + (i % 3) * 60);
  data::write_shard(dir + "/tok_train_000000.bin", tokens);
  return dir + "/tok_train_*.bin";
}

Config config(const std::string& train_glob, int micro_batch, const std::string& extra = "") {
  return parse_config(R"(
model: { arch: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 257, max_seq_len: 16, dropout: 0.2 }
train: { steps: 10, global_batch: 8, micro_batch: )" +
                      std::to_string(micro_batch) + R"(, seq_len: 16 }
optimizer: { lr: 0.001 }
data: { train: ")" + train_glob +
                      R"(", tokenizer: bytes }
)" + extra);
}

mesh::ProcessGroupMesh one_rank() { return mesh::ProcessGroupMesh::create(comm::self_group("world"), {1, 1, 1}); }

}  // namespace

TEST(HybridParallelPlugin, MicrobatchesAccumulateToTheFullBatchStep) {
  std::string dir = test::make_temp_dir("plugin");
  std::string glob = make_shards(dir);
  auto m1 = one_rank(), m2 = one_rank();
  HybridParallelPlugin one(config(glob, 8), m1), four(config(glob, 2), m2);
  for (int64_t step = 1; step <= 6; ++step) {
    StepStats a = one.execute_pipeline(step), b = four.execute_pipeline(step);
    EXPECT_EQ(a.valid_tokens, 8 * 16);
    EXPECT_EQ(b.valid_tokens, a.valid_tokens);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_NEAR(b.loss_sum, a.loss_sum, 1e-5 * std::fabs(a.loss_sum)) << "step " << step;
    EXPECT_TENSOR_NEAR(four.params().grads(), one.params().grads(), (test::Tolerance{1e-4, 1e-7}));
    UpdateStats ua = one.optimizer_step(step, 1e-3), ub = four.optimizer_step(step, 1e-3);
    EXPECT_NEAR(ub.grad_norm, ua.grad_norm, 1e-5 * ua.grad_norm);
    EXPECT_FALSE(ua.skipped);
  }
  // Values are not compared element-wise: Adam turns fp32 summation-order noise in
  // near-zero gradients into update differences of order lr; the contract is the loss.
}

// parallel.head_chunk_tokens in training: the plugin gives the model each
// step's dloss before its forwards, so the head computes its gradients in
// forward and backward computes no logits again; the step equals the whole
// head's.
TEST(HybridParallelPlugin, AHeadInChunksComputesItsGradientsInForward) {
  std::string dir = test::make_temp_dir("plugin");
  std::string glob = make_shards(dir);
  auto m1 = one_rank(), m2 = one_rank();
  Config chunked = config(glob, 2);
  chunked.parallel.head_chunk_tokens = 7;
  HybridParallelPlugin whole(config(glob, 2), m1), in_chunks(chunked, m2);
  for (int64_t step = 1; step <= 3; ++step) {
    StepStats a = whole.execute_pipeline(step), b = in_chunks.execute_pipeline(step);
    EXPECT_NEAR(b.loss_sum, a.loss_sum, 1e-5 * std::fabs(a.loss_sum)) << "step " << step;
    EXPECT_TENSOR_NEAR(in_chunks.params().grads(), whole.params().grads(), (test::Tolerance{1e-4, 1e-7}));
    whole.optimizer_step(step, 1e-3), in_chunks.optimizer_step(step, 1e-3);
  }
  EXPECT_EQ(dynamic_cast<const ChunkModel&>(in_chunks.chunk(0)).head_rows_recomputed(), 0);
}

// A training set of fewer windows than one global batch is said in the
// run's header (describe()): each step sees some windows twice.
TEST(HybridParallelPlugin, DescribeNotesATrainingSetSmallerThanABatch) {
  std::string dir = test::make_temp_dir("plugin");
  std::vector<int32_t> tokens(16 * 5 + 1, 7);  // 5 windows of 16 + 1 tokens
  data::write_shard(dir + "/small_train_000000.bin", tokens);
  auto m1 = one_rank(), m2 = one_rank();
  HybridParallelPlugin small(config(dir + "/small_train_*.bin", 2), m1), enough(config(make_shards(dir), 2), m2);
  EXPECT_NE(small.describe().find("note: data.train holds 5 windows of 17 tokens, fewer than the global batch of 8"),
            std::string::npos)
      << small.describe();
  EXPECT_EQ(enough.describe().find("note:"), std::string::npos) << enough.describe();
  // An evaluation of more batches than the validation set holds re-reads it.
  Config c = config(make_shards(dir), 2);
  c.data.val = dir + "/small_train_*.bin";
  c.train.eval_every = 5;
  c.train.eval_steps = 2;
  auto m3 = one_rank(), m4 = one_rank();
  HybridParallelPlugin reread(c, m3);
  EXPECT_NE(reread.describe().find("note: an evaluation reads train.eval_steps (2) x global batch (8) windows, but "
                                   "data.val holds 5: it reads some of them more than once — set "
                                   "train.eval_steps to 1 or less"),
            std::string::npos)
      << reread.describe();
  c.train.eval_steps = 1;  // 8 windows from 5: the batch itself wraps, as the training note says for data.train
  HybridParallelPlugin one_batch(c, m4);
  EXPECT_EQ(one_batch.describe().find("note: an evaluation"), std::string::npos) << one_batch.describe();
  EXPECT_EQ(one_batch.describe().find("also a shard of"), std::string::npos) << one_batch.describe();
  // Validation shards that are training shards too (here through another
  // glob and a symbolic link) are named: val_loss would score trained data.
  std::filesystem::create_symlink(dir + "/small_train_000000.bin", dir + "/linked_val_000000.bin");
  c.data.train = {{.path = dir + "/small_train_*.bin"}};
  c.data.val = dir + "/linked_val_*.bin";
  auto m5 = one_rank();
  HybridParallelPlugin shared(c, m5);
  EXPECT_NE(shared.describe().find("note: data.val's shard " + dir +
                                   "/linked_val_000000.bin is also a shard of data.train: val_loss scores data the "
                                   "run trains on"),
            std::string::npos)
      << shared.describe();
  EXPECT_EQ(shared.describe().find("both hold the shard"), std::string::npos) << shared.describe();
  // Two mixture sources whose globs share a file: its windows are drawn by both.
  c.data.val = "";
  c.train.eval_every = 0;
  c.data.train = {{.path = dir + "/small_train_*.bin", .weight = 1}, {.path = dir + "/*_000000.bin", .weight = 1}};
  auto m6 = one_rank();
  HybridParallelPlugin overlap(c, m6);
  EXPECT_NE(overlap.describe().find("note: data.train[0] and data.train[1] both hold the shard " + dir +
                                    "/small_train_000000.bin: its windows are drawn by both sources"),
            std::string::npos)
      << overlap.describe();
}

// evaluate(0) scores the whole validation set, each window once: 10 windows
// in batches of 8 (the second batch's 6 wrapped rows score nothing) give the
// loss of 10 windows in batches of 2; an evaluation-only plugin (lattice
// eval) opens no training data and refuses to train.
TEST(HybridParallelPlugin, WholeSetEvaluationScoresEachWindowOnce) {
  std::string dir = test::make_temp_dir("plugin");
  std::vector<int32_t> tokens;
  for (int i = 0; i < 16 * 10 + 1; ++i) tokens.push_back((i * 37) % 200);
  data::write_shard(dir + "/v_val_000000.bin", tokens);
  Config by8 = config(dir + "/none_train_*.bin", 2), by2 = by8;  // no training shards: eval-only plugins
  by8.data.val = by2.data.val = dir + "/v_val_*.bin";
  by2.train.global_batch = 2;
  auto m1 = one_rank(), m2 = one_rank();
  HybridParallelPlugin a(by8, m1, std::nullopt, HalfWeights::shadow, PluginUse::evaluate);
  HybridParallelPlugin b(by2, m2, std::nullopt, HalfWeights::shadow, PluginUse::evaluate);
  const double whole8 = a.evaluate(0), whole2 = b.evaluate(0);
  EXPECT_NEAR(whole8, whole2, 1e-6 * whole2);
  EXPECT_GT(std::fabs(a.evaluate(2) - whole2), 1e-4);  // two batches of 8 read windows 0-5 twice
  EXPECT_ANY_THROW(a.execute_pipeline(1));
}

TEST(HybridParallelPlugin, StepDataDependsOnlyOnSeedAndStep) {
  std::string dir = test::make_temp_dir("plugin");
  std::string glob = make_shards(dir);
  auto m1 = one_rank(), m2 = one_rank();
  HybridParallelPlugin a(config(glob, 4), m1), b(config(glob, 4), m2);
  // b skips step 1: step 2's batch (and so its loss before any update) is the same.
  a.execute_pipeline(1);
  EXPECT_EQ(a.execute_pipeline(2).loss_sum, b.execute_pipeline(2).loss_sum);
}

TEST(HybridParallelPlugin, RefusesWhatItCannotRunWithOneLine) {
  std::string dir = test::make_temp_dir("plugin");
  std::string glob = make_shards(dir);
  auto m = one_rank();
  try {
    HybridParallelPlugin p(config(glob, 4, "parallel: { tp: 2 }\n"), m);
    FAIL() << "tp=2 accepted on one rank";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

TEST(HybridParallelPlugin, ZeroOnOneDpRankIsThePlainOptimizerBitForBit) {
  std::string dir = test::make_temp_dir("plugin");
  std::string glob = make_shards(dir);
  auto m1 = one_rank(), m2 = one_rank();
  HybridParallelPlugin plain(config(glob, 2), m1), zero(config(glob, 2, "parallel: { zero: 1 }\n"), m2);
  for (int64_t step = 1; step <= 4; ++step) {
    EXPECT_EQ(zero.execute_pipeline(step).loss_sum, plain.execute_pipeline(step).loss_sum) << "step " << step;
    EXPECT_EQ(zero.optimizer_step(step, 1e-3).grad_norm, plain.optimizer_step(step, 1e-3).grad_norm);
  }
  const Tensor& a = plain.params().values();
  const Tensor& b = zero.params().values();
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

// A checkpoint is written one logical tensor at a time (SafetensorsWriter):
// the writing rank allocates at most one tensor's gather (its local rows, the
// vocabulary's padded, and the logical tensor), not the stage's tensors,
// which before took 4 bytes per parameter for the values and 8 for AdamW's
// two states. The files still load to the same bits.
TEST(HybridParallelPlugin, CheckpointWriteHoldsOneTensorAtATime) {
  std::string dir = test::make_temp_dir("plugin");
  std::string glob = make_shards(dir);
  auto m1 = one_rank(), m2 = one_rank();
  HybridParallelPlugin a(config(glob, 2), m1);
  a.execute_pipeline(1);
  a.optimizer_step(1, 1e-3);
  int64_t gather = 0;  // the most one tensor's gather allocates
  for (const ParamEntry& e : a.params().entries()) gather = std::max(gather, (e.numel + shape_numel(e.spec.shape)) * 4);
  const int64_t stage = a.params().numel() * 4;
  ASSERT_LT(gather, stage);  // so the whole stage's tensors would not pass
  const int64_t live = memory_stats(Device::cpu()).live_bytes;
  reset_peak_memory(Device::cpu());
  a.save_checkpoint(dir + "/step_0000001", 1, 0);
  const int64_t held = memory_stats(Device::cpu()).peak_bytes - live;
  std::printf("  checkpoint write: %lld B above live; one gather %lld B, stage %lld B\n", (long long)held,
              (long long)gather, (long long)stage);
  EXPECT_LE(held, gather);
  EXPECT_EQ(memory_stats(Device::cpu()).live_bytes, live);
  HybridParallelPlugin b(config(glob, 2), m2);
  b.load_checkpoint(dir + "/step_0000001");
  EXPECT_EQ(std::memcmp(a.params().values().raw(), b.params().values().raw(), a.params().values().nbytes()), 0);
  EXPECT_EQ(a.execute_pipeline(2).loss_sum, b.execute_pipeline(2).loss_sum);
  EXPECT_EQ(a.optimizer_step(2, 1e-3).grad_norm, b.optimizer_step(2, 1e-3).grad_norm);
  EXPECT_EQ(std::memcmp(a.params().values().raw(), b.params().values().raw(), a.params().values().nbytes()), 0);
}

TEST(HybridParallelPlugin, NonFiniteGradientsSkipTheUpdate) {
  std::string dir = test::make_temp_dir("plugin");
  std::string glob = make_shards(dir);
  auto m = one_rank();
  HybridParallelPlugin p(config(glob, 4), m);
  p.execute_pipeline(1);
  Tensor before = p.params().values().clone();
  p.params().grads().data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  UpdateStats u = p.optimizer_step(1, 1e-3);
  EXPECT_TRUE(u.skipped);
  EXPECT_FALSE(std::isfinite(u.grad_norm));
  EXPECT_EQ(std::memcmp(before.raw(), p.params().values().raw(), before.nbytes()), 0);
  p.execute_pipeline(2);  // the next step trains normally
  EXPECT_FALSE(p.optimizer_step(2, 1e-3).skipped);
}
