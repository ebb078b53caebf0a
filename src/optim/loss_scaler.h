// Dynamic loss scaling for fp16 training.
//
// fp16 gradients underflow unless the loss is multiplied by a large scale
// before backward; the optimizer then reads the gradients times 1/scale. The
// scale follows a small state machine, advanced once per step with a verdict
// that must be the same on every rank (the trainer uses the global gradient
// norm, a sum over the ranks: booster/hybrid_parallel_plugin.cpp):
//   - overflow (any rank saw inf/nan): the step is skipped (no update), the
//     scale is multiplied by backoff_factor (clamped at min) and the
//     good-step counter restarts at 0;
//   - finite: the counter grows; when it reaches growth_interval the scale
//     is multiplied by growth_factor (clamped at max) and the counter
//     restarts at 0.
// The options are runtime.loss_scale's struct (LossScaleConfig,
// config/config.h), checked by its one check (loss_scale_problem).
// Because the verdict is the same on every rank, every rank skips the same
// steps and holds the same state, which is what a checkpoint stores
// (LossScalerState, to/from JSON) and a resume restores.
//
// min clamps rather than fails: an overflow at the minimum skips the
// step and leaves the scale there. One bad batch can overflow at any scale and
// the next step may be fine, so ending the run there would lose runs that
// recover; a run that keeps overflowing shows it in the skipped-step count and
// in the scale it logs.
//
// Disabled (bf16, fp32): the scale is 1 and never moves, and update() never
// skips on its own; the trainer's non-finite gradient-norm check still skips
// a step whose gradients are inf/nan (booster/hybrid_parallel_plugin.cpp).
//
// Use in a step: loss *= scale(); backward; found = the global norm is not
// finite; if (update(found)) skip; else the optimizer's grad_scale is
// inv_scale() times the clip factor of the unscaled norm.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>

#include "config/config.h"
#include "core/dtype.h"

namespace lattice::optim {

// What a checkpoint carries. good_steps counts the finite steps since the
// last growth or overflow.
struct LossScalerState {
  double scale = 1.0;
  int64_t good_steps = 0;
  bool operator==(const LossScalerState&) const = default;
};

// {"scale": 65536.0, "good_steps": 12}
nlohmann::json loss_scaler_state_json(const LossScalerState& s);
// The inverse; throws lattice::Error (one line) naming the field when it is
// missing, of the wrong type, or out of range (scale not finite and > 0,
// good_steps < 0).
LossScalerState loss_scaler_state_from_json(const nlohmann::json& j);

class LossScaler {
 public:
  // Disabled: scale 1, no growth, no skips.
  LossScaler() = default;
  // Dynamic, starting at o.initial. Throws lattice::Error (one line) naming
  // the runtime.loss_scale key when loss_scale_problem finds one.
  explicit LossScaler(const LossScaleConfig& o);

  bool enabled() const { return enabled_; }
  float scale() const { return float(state_.scale); }  // multiply the loss by this
  float inv_scale() const { return float(1.0 / state_.scale); }
  const LossScalerState& state() const { return state_; }
  const LossScaleConfig& options() const { return opts_; }

  // Advances one step with the verdict shared by every rank;
  // true: skip this step's update. Disabled: never skips, never changes.
  bool update(bool found_inf);

  // Restores a checkpointed state. Dynamic: the scale must lie in
  // [min, max]; disabled: only the state of a disabled scaler
  // (scale 1, no good steps) is accepted. Throws lattice::Error otherwise.
  void load_state(const LossScalerState& s);

 private:
  bool enabled_ = false;
  LossScaleConfig opts_;
  LossScalerState state_;
};

// Dynamic scaling for f16 compute, disabled for every other dtype.
LossScaler make_loss_scaler(DType compute, const LossScaleConfig& o = {});

}  // namespace lattice::optim
