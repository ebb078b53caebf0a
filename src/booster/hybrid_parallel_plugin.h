// HybridParallelPlugin: composes, from one Config and this rank's place in a
// ProcessGroupMesh, the sharded model, its flat parameters, the optimizer,
// this rank's share of the data, and the microbatch schedule.
//
// Layouts this version runs: tensor parallelism (any tp dividing n_head) and
// data parallelism, combined; pp = 1. Per step, each dp rank reads its
// contiguous slice of the step's global batch (the same sequences for any
// layout), runs parallel.microbatches microbatches with gradient
// accumulation, and the gradients are summed over dp (the loss is already
// divided by the global valid-token count, fixed before backward). The
// gradient norm sums sharded parameters over tp and counts replicated ones
// once. Other layouts are refused with one line at construction.
#pragma once

#include <memory>
#include <vector>

#include "booster/plugin.h"
#include "config/config.h"
#include "core/param.h"
#include "data/loader.h"
#include "mesh/process_group_mesh.h"
#include "models/model.h"
#include "optim/optimizer.h"

namespace lattice {

class HybridParallelPlugin final : public Plugin {
 public:
  HybridParallelPlugin(const Config& cfg, mesh::ProcessGroupMesh& mesh);

  std::string describe() const override;
  StepStats execute_pipeline(int64_t step) override;
  UpdateStats optimizer_step(int64_t step, double lr) override;
  double evaluate(int64_t batches) override;
  bool has_validation() const override { return val_ != nullptr; }
  int64_t param_count() const override;
  double flops_per_token() const override;
  int64_t peak_mem_bytes() override;
  double max_over_ranks(double v) override;

  FlatParams& params() { return params_; }
  const LanguageModel& model() const { return *model_; }

 private:
  double sum_over(comm::Group& g, double v);
  Config cfg_;
  mesh::ProcessGroupMesh& mesh_;
  Layout layout_;
  FlatParams params_;
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<data::TokenDataset> train_, val_;
  std::unique_ptr<ModelContext> ctx_;
  Tensor inputs_, targets_;  // (microbatches, B, T) i32: this dp rank's share of the step
  int64_t updates_ = 0;      // applied (non-skipped) updates, for Adam's bias correction
};

}  // namespace lattice
