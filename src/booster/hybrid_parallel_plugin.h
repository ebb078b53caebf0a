// HybridParallelPlugin: composes model, flat parameters, optimizer, data and
// the microbatch schedule from one Config.
//
// This version runs the single-rank layout (tp = pp = dp = 1) with gradient
// accumulation over parallel.microbatches; the mesh, tensor-parallel sharding,
// pipeline schedules and data parallelism grow inside this class (and the
// folders it composes) without changing the Booster loop. Any other layout is
// refused with one line at construction.
#pragma once

#include <memory>
#include <vector>

#include "booster/plugin.h"
#include "config/config.h"
#include "core/param.h"
#include "data/loader.h"
#include "models/model.h"
#include "optim/optimizer.h"

namespace lattice {

class HybridParallelPlugin final : public Plugin {
 public:
  HybridParallelPlugin(const Config& cfg, int world_size);

  std::string describe() const override;
  StepStats execute_pipeline(int64_t step) override;
  UpdateStats optimizer_step(int64_t step, double lr) override;
  double evaluate(int64_t batches) override;
  bool has_validation() const override { return val_ != nullptr; }
  int64_t param_count() const override { return params_.numel(); }
  double flops_per_token() const override { return model_->flops_per_token(cfg_.train.seq_len); }
  int64_t peak_mem_bytes() const override;

  FlatParams& params() { return params_; }
  const LanguageModel& model() const { return *model_; }

 private:
  Config cfg_;
  Layout layout_;
  FlatParams params_;
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<data::TokenDataset> train_, val_;
  std::unique_ptr<ModelContext> ctx_;
  Tensor inputs_, targets_;  // (microbatches, B, T) i32: the step's batch
  int64_t updates_ = 0;      // applied (non-skipped) updates, for Adam's bias correction
};

}  // namespace lattice
