// Training checkpoints that any layout can load (docs/checkpoint-format.md).
//
// save_checkpoint (collective over the world): on every pipeline stage the
// ranks of dp rank 0 gather each parameter, and each optimizer-state buffer
// laid out like it, from its tp shards into the logical tensor (ZeRO-1 shards
// are first all-gathered over dp); the stage's tp rank 0 writes
// model-<s>-of-<P> and optimizer-<s>-of-<P> into `<step_dir>.tmp/`, all stages
// in parallel. Rank 0 then writes the two indexes and trainer_state.json and
// commits (checkpoint/atomic_dir.h: manifest last, rename, `latest`), and
// prunes to checkpoint.keep_last. A tied replica is not written: the owner's
// tensor is the logical one. A write the file system refuses (a full disk, a
// read-only directory: checkpoint::WriteError) is one InputError line naming
// checkpoint.dir, the file, the fix and the checkpoint a restart resumes from;
// the unfinished .tmp directory stays (the next write of the step replaces it).
//
// load_checkpoint (no communication): every rank memory-maps the files through
// the indexes and copies its tp slice of each logical tensor into its
// parameters and optimizer state (its dp shard under ZeRO-1). A model-only
// checkpoint (no optimizer index) leaves the optimizer state as it is (zero).
// The parameters are marked written; the caller refreshes a 16-bit shadow.
//
// Test hook: LATTICE_TEST_CHECKPOINT_PAUSE_S=<seconds> makes every writer
// sleep after its model file (only when writing step
// LATTICE_TEST_CHECKPOINT_PAUSE_STEP, if set), with the step directory still
// `.tmp`, so a test can kill the job in the middle of a write.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "config/config.h"
#include "core/param.h"
#include "mesh/process_group_mesh.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/zero.h"

namespace lattice {

// One training shard as a checkpoint remembers it: its file name (not the
// directory: the data may move with data.train), size and the XXH64 of its
// first and last 64 KiB (a cheap check that reads 128 KiB, not the shard),
// and which source of data.train it belongs to (0 without a mixture).
struct ShardPrint {
  std::string file;
  uint64_t bytes = 0;
  std::string xxh64;
  int source = 0;
  bool operator==(const ShardPrint&) const = default;
};
std::vector<ShardPrint> fingerprint_shards(const std::vector<std::string>& paths, int source = 0);

struct TrainerState {
  int64_t step = 0;               // optimizer steps completed (the directory's number)
  int64_t optimizer_updates = 0;  // updates applied (steps minus skipped ones): Adam's bias correction
  int64_t skipped_steps = 0;
  int64_t consumed_samples = 0, consumed_tokens = 0;
  uint64_t seed = 0;
  std::string config;  // to_yaml of the run's config; "" in a model-only checkpoint
  Layout layout;
  std::string schedule;
  int virtual_stages = 1, zero = 0;
  int64_t vocab_size = 0, padded_vocab_size = 0;
  std::string optimizer, arch;
  // fp16 runs: the dynamic loss scale after `step` (absent otherwise).
  std::optional<optim::LossScalerState> loss_scaler;
  // The training shards the run read (empty in a model-only checkpoint and
  // in checkpoints from before 2026-11-25).
  std::vector<ShardPrint> data_train;
  // The `model` object of a model-only checkpoint (lattice convert --from-hf),
  // as model_state_json writes it; null when absent.
  nlohmann::ordered_json model;
};

std::string trainer_state_json(const TrainerState& s);
// Reads <step_dir>/trainer_state.json; one Error line naming the file and field.
TrainerState read_trainer_state(const std::string& step_dir);

// One rank's trainable state.
struct RankState {
  FlatParams& params;
  optim::Optimizer& optimizer;
  optim::ZeroOptimizer* zero;  // the optimizer when parallel.zero = 1, else null
  mesh::ProcessGroupMesh& mesh;
};

void save_checkpoint(const std::string& step_dir, RankState& r, const TrainerState& state, int keep_last);
void load_checkpoint(const std::string& step_dir, RankState& r);
// The model's tensors only (lattice eval): the optimizer state is not read.
void load_model_tensors(const std::string& step_dir, FlatParams& params);

// Which checkpoint a start resumes from (rank 0 decides, every rank gets the
// answer; collective over `world`): the step directory, or nullopt to start
// at step 1. `notes` receives one line per fallback ("step_0000020 is
// incomplete (...): resuming from step_0000010").
std::optional<std::string> resolve_resume(const Config& cfg, comm::Group& world, std::vector<std::string>* notes);

// Throws one line when `cfg` may not continue the run `state` was written by:
// only parallel.*, runtime.threads, log.*, checkpoint.* and train.stop_at_step
// may differ (ARCHITECTURE.md §5). A model-only checkpoint is checked for the
// model's shape only, by the load itself.
// and, when the checkpoint has them, that `data_train` (this run's training
// shards, fingerprint_shards) are the ones it was trained on, source by
// source: a shard deleted, added, regenerated or truncated under the same
// data.train would resume on another token stream without a word. (The
// sources' globs and weights are config: a changed mixture is a difference
// in data.train.)
void check_resume_config(const Config& cfg, const TrainerState& state, const std::string& step_dir,
                         const std::vector<ShardPrint>& data_train = {});

// Throws one line when the model `state` holds is not cfg's (lattice eval,
// checkpoint.init_from): model.* and data.tokenizer must be the checkpoint's,
// except model.dropout, init_std, vocab_multiple and max_seq_len (a position
// table of another size fails the load with its shape); everything else (the
// layout, batch, data, optimizer) may differ. A model-only checkpoint is
// checked by its tensor names and model keys, as check_resume_config does.
void check_checkpoint_model(const Config& cfg, const TrainerState& state, const std::string& step_dir);

}  // namespace lattice
