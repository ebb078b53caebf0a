// The Plugin interface: what the training loop (Booster) asks of a layout.
//
// A plugin composes, from the config, everything one rank needs: the model
// (through the registry), its flat parameters, the optimizer, this rank's view
// of the data, and the schedule that runs the microbatches. The loop never
// knows the layout; HybridParallelPlugin (hybrid_parallel_plugin.h) is the
// plugin that ships.
//
// Loss normalisation (one rule for every layout): the loss of a step is the
// sum of token losses divided by the global count of valid tokens in the
// step, a count fixed before any backward runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "booster/checkpointing.h"

namespace lattice {

struct StepStats {
  double loss_sum = 0;       // sum of token losses over the step's global batch
  int64_t valid_tokens = 0;  // tokens whose target is not ignored
  int64_t tokens = 0;        // tokens processed (global batch * seq_len)
  // Pipeline runs only (< 0 otherwise): this rank's idle fraction (time
  // blocked in P2P over time in the schedule; the loop logs the largest) and
  // the schedule's theory.
  double bubble = -1, bubble_theory = -1;
  // Seconds this rank spent after its schedule finished until its gradients
  // were summed over the tie and dp groups: the exposed (not overlapped) part
  // of gradient synchronisation.
  double grad_sync_s = 0;
};

struct UpdateStats {
  double grad_norm = 0;   // global, before clipping, of the unscaled gradients
  bool skipped = false;   // non-finite gradients: no update was applied
  double loss_scale = 0;  // fp16: the scale this step's loss was multiplied by; 0 without loss scaling
};

class Plugin {
 public:
  virtual ~Plugin() = default;
  // One line describing the layout and the model, printed at start-up.
  virtual std::string describe() const = 0;
  // The layer-to-stage map printed under it (pipeline runs; empty otherwise).
  virtual std::string stage_map() const { return ""; }
  // Forward and backward of every microbatch of update `step` (1-based);
  // gradients of the step are left in the flat gradient buffer.
  virtual StepStats execute_pipeline(int64_t step) = 0;
  // Global norm, clipping, non-finite check, optimizer update.
  virtual UpdateStats optimizer_step(int64_t step, double lr) = 0;
  // Mean validation loss over `batches` global batches (0: the whole val set).
  virtual double evaluate(int64_t batches) = 0;
  virtual bool has_validation() const = 0;
  virtual int64_t param_count() const = 0;
  virtual double flops_per_token() const = 0;              // training FLOPs per token, per rank (model FLOPs / world)
  virtual int64_t local_peak_mem_bytes() const = 0;        // this rank's allocator peak
  virtual Device device() const { return Device::cpu(); }  // where this rank's tensors live
  // Collective over the job: the element-wise maximum of `v` over every rank
  // (the loop takes all its per-step maxima in one call).
  virtual std::vector<double> max_over_ranks(std::vector<double> v) = 0;
  // Collective: writes the checkpoint of the state after `step` updates
  // (`skipped` of them skipped) to `step_dir` (docs/checkpoint-format.md).
  virtual void save_checkpoint(const std::string& step_dir, int64_t step, int64_t skipped) = 0;
  // Checks that the config may continue the checkpoint's run, loads its state
  // into this rank's shards and returns its trainer state. Not collective.
  virtual TrainerState load_checkpoint(const std::string& step_dir) = 0;
  // With log.trace: writes this rank's timeline of the traced steps (Chrome
  // trace JSON) to `path` (its directory made if missing) and returns true;
  // false, writing nothing, when this run traced no step (it resumed past
  // them: an earlier run's timeline stays). Not collective.
  virtual bool write_trace(const std::string& path) const = 0;
};

}  // namespace lattice
