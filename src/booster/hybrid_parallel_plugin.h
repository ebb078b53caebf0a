// HybridParallelPlugin: composes, from one Config and this rank's place in a
// ProcessGroupMesh, the model chunks this rank runs, their sharded flat
// parameters, the optimizer, this rank's share of the data, and the pipeline
// schedule that drives the microbatches.
//
// Every layout runs the same path: a schedule plan (GPipe, 1F1B or
// interleaved 1F1B; with pp = 1 it is forward then backward per microbatch)
// executed by pipeline::run_schedule with callbacks into the model chunks.
// Per step: each dp rank reads its contiguous slice of the step's global
// batch (every stage reads it: the first for token ids, the last for labels);
// the global valid-token count is fixed before backward; after the schedule
// the tied embedding's gradient is summed over its tie group (first and last
// stage), then all gradients over dp; with parallel.dp_bucket_mb the dp
// all-reduce of the untied gradients starts in buckets during the last
// microbatch's backward (booster/grad_buckets.h). The gradient norm counts sharded
// parameters over tp, every stage's parameters once, and a tied parameter once.
// With parallel.zero = 1 the dp all-reduce becomes a reduce-scatter, each dp
// rank updates only its shard of the flat buffer (optim/zero.h) and the values
// are all-gathered over dp after the update.
// runtime.precision fp16 scales the loss's gradient seed by a dynamic loss
// scale (optim/loss_scaler.h); after backward every rank says whether its
// gradients are finite and the world decides together: a step with a
// non-finite gradient anywhere is skipped on every rank (at any precision),
// and otherwise the optimizer reads the gradients times 1/scale and the clip
// factor of the unscaled norm. The scale is saved with the trainer state.
// runtime.precision bf16 and fp16 keep a 16-bit shadow of the parameters
// (core/param.h) that every matmul weight is read from; it is refreshed after
// init, each optimizer step and a checkpoint load. Their activations, and the
// pipeline's boundary buffers, are 16-bit too (LanguageModel::
// set_activation_dtype); statistics, losses and every parameter gradient stay
// fp32.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "booster/checkpointing.h"
#include "booster/context_pool.h"
#include "booster/device_groups.h"
#include "booster/grad_buckets.h"
#include "booster/plugin.h"
#include "config/config.h"
#include "core/param.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "mesh/process_group_mesh.h"
#include "models/model.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/zero.h"
#include "pipeline/interpreter.h"
#include "pipeline/stage_manager.h"

namespace lattice {

// Where the 16-bit matmuls of runtime.precision bf16/fp16 read the weights
// from: the parameters' 16-bit shadow (FlatParams::enable_shadow), or the fp32
// values rounded on every call, the path before the shadow existed. Both give
// the same bits; the second is kept so tests can show it (test_shadow_weights).
enum class HalfWeights : uint8_t { shadow, rounded_per_call };

// What the plugin is built for: training (every part), or evaluation only
// (lattice eval: no optimizer state, no training data opened; evaluate and
// load_model only).
enum class PluginUse : uint8_t { train, evaluate };

class HybridParallelPlugin final : public Plugin {
 public:
  // placement: where this rank's tensors live; unset: runtime.device placed by
  // place_rank (booster/device_groups.h). verify-layout passes the job's
  // placement to its one-rank reference.
  HybridParallelPlugin(const Config& cfg, mesh::ProcessGroupMesh& mesh,
                       std::optional<RankPlacement> placement = std::nullopt,
                       HalfWeights half_weights = HalfWeights::shadow, PluginUse use = PluginUse::train);

  std::string describe() const override;
  std::string stage_map() const override;
  StepStats execute_pipeline(int64_t step) override;
  UpdateStats optimizer_step(int64_t step, double lr) override;
  double evaluate(int64_t batches) override;
  bool has_validation() const override { return val_ != nullptr; }
  int64_t val_windows() const { return val_ ? val_->n_windows() : 0; }  // windows of data.val (0: none)
  int64_t param_count() const override;
  double flops_per_token() const override;
  int64_t local_peak_mem_bytes() const override;
  std::vector<double> max_over_ranks(std::vector<double> v) override;
  bool write_trace(const std::string& path) const override;
  void save_checkpoint(const std::string& step_dir, int64_t step, int64_t skipped) override;
  TrainerState load_checkpoint(const std::string& step_dir) override;
  // The model of any checkpoint whose model.* (and data.tokenizer) are this
  // config's, without its optimizer state or training settings (lattice eval).
  TrainerState load_model(const std::string& step_dir);

  Device device() const override { return placement_.device; }
  const RankPlacement& placement() const { return placement_; }
  FlatParams& params() { return params_; }
  // ZeRO-1 with a 16-bit shadow leaves the fp32 matmul weights outside each
  // dp rank's shard stale after a step (optim/zero.h): this all-gathers them
  // (collective over dp; nothing when they are complete). Checkpoint saves
  // do it themselves.
  void gather_values() {
    if (zero_) zero_->gather_values(params_);
  }
  const pipeline::PipelineStageManager& stages() const { return *stages_; }
  const GradBuckets* grad_buckets() const { return buckets_.get(); }          // null: no bucketed dp all-reduce
  const LanguageModel& chunk(int v) const { return *chunks_.at(size_t(v)); }  // this rank's model chunk v

  // Tests only; unset in training. Called on this rank every step right after
  // its gradients are zeroed, before backward accumulates into them: a value
  // written here is part of this rank's local gradient as if backward had
  // produced it, so it reaches the dp buckets, the tie and dp sums and the
  // norm like one (tests/booster/test_hybrid_parallel_plugin_mpi.cpp makes one
  // rank's gradient non-finite with it).
  std::function<void(int64_t step, FlatParams& params)> on_zeroed_grads_for_tests;

 private:
  std::string describe_train_data() const;  // describe()'s part about data.train
  std::string shared_val_shard_note() const;
  std::string shared_train_shard_note() const;
  std::string train_source_name(size_t k) const;  // "data.train" or, in a mixture, "data.train[k]"  // describe()'s
                                                  // note on a data.val shard that data.train holds too
  // Runs `plan` over the microbatches of inputs_/targets_; returns the loss sum of this rank.
  double run_plan(const pipeline::Plan& plan, const StepCoords& base, int64_t first_sample, float dloss,
                  pipeline::RunStats* stats);
  double sum_over(comm::Group& g, double v);
  // The model's objective on microbatch m of inputs_/targets_ (ModelEntry::prepare_batch).
  void prepare_batch(const StepCoords& coords, int64_t m);
  // Copies inputs_/targets_ to the device (nothing on the CPU: they are the same tensors).
  void batch_to_device();

  Config cfg_;
  mesh::ProcessGroupMesh& mesh_;
  Layout layout_;
  optim::LossScaler scaler_;              // runtime.precision fp16: dynamic; otherwise disabled (scale 1)
  RankPlacement placement_;               // this rank's device (booster/device_groups.h)
  std::unique_ptr<DeviceGroups> groups_;  // device tensors' tp, pp, dp and tie groups
  std::unique_ptr<pipeline::PipelineStageManager> stages_;
  std::unique_ptr<pipeline::P2P> p2p_;
  pipeline::Plan train_plan_, eval_plan_;
  std::vector<StageSpan> spans_;  // this rank's model chunks, by virtual stage
  FlatParams params_;
  std::vector<std::unique_ptr<LanguageModel>> chunks_;
  std::unique_ptr<ContextPool> contexts_;
  // parallel.dp_bucket_mb > 0 with dp > 1 (with or without ZeRO-1): the overlapped dp all-reduce
  std::unique_ptr<GradBuckets> buckets_;
  std::vector<int> last_backward_mb_;  // per chunk: the microbatch of its last backward in train_plan_
  std::unique_ptr<optim::Optimizer> optimizer_;
  // optimizer_ itself when parallel.zero = 1, else null
  optim::ZeroOptimizer* zero_ = nullptr;
  std::unique_ptr<data::DataMixture> train_;  // data.train's sources (one without a mixture)
  std::unique_ptr<data::TokenDataset> val_;
  std::vector<ShardPrint> train_print_;     // the training shards, for the checkpoints (fingerprint_shards)
  Tensor inputs_, targets_;                 // (microbatches, B, T) i32: this dp rank's share of the step
  Tensor loss_sum_;                         // (1) f64 on the device: the step's loss sum (set_loss_sum)
  Tensor device_inputs_, device_targets_;   // the same on device_ (the same tensors on the CPU)
  int64_t updates_ = 0;                     // applied (non-skipped) updates, for Adam's bias correction
  std::vector<pipeline::TraceSpan> trace_;  // log.trace: the spans of steps 1 .. kTracedSteps
};

}  // namespace lattice
