#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor.h"

namespace lattice::optim {

namespace {

// A positive scale that stays finite in fp32, where the loss is multiplied by it.
bool usable_scale(double s) { return s > 0 && s <= double(std::numeric_limits<float>::max()); }

}  // namespace

nlohmann::json loss_scaler_state_json(const LossScalerState& s) {
  return {{"scale", s.scale}, {"good_steps", s.good_steps}};
}

LossScalerState loss_scaler_state_from_json(const nlohmann::json& j) {
  LATTICE_CHECK(j.is_object() && j.contains("scale") && j.contains("good_steps"),
                "loss scaler state: expected an object with 'scale' and 'good_steps', got {}", j.dump());
  const nlohmann::json &scale = j["scale"], &good = j["good_steps"];
  LATTICE_CHECK(scale.is_number() && usable_scale(scale.get<double>()),
                "loss scaler state: 'scale' is {}, expected a number > 0 and finite in fp32", scale.dump());
  LATTICE_CHECK(good.is_number_integer() && good.get<int64_t>() >= 0,
                "loss scaler state: 'good_steps' is {}, expected an integer >= 0", good.dump());
  return {scale.get<double>(), good.get<int64_t>()};
}

LossScaler::LossScaler(const LossScaleConfig& o) : enabled_(true), opts_(o) {
  if (auto p = loss_scale_problem(o)) LATTICE_FAIL("runtime.loss_scale.{}: {}", p->key, p->message);
  state_.scale = o.initial;
}

bool LossScaler::update(bool found_inf) {
  if (!enabled_) return false;
  if (found_inf) {
    state_.scale = std::max(state_.scale * opts_.backoff_factor, opts_.min);
    state_.good_steps = 0;
    return true;
  }
  if (++state_.good_steps >= opts_.growth_interval) {
    state_.scale = std::min(state_.scale * opts_.growth_factor, opts_.max);
    state_.good_steps = 0;
  }
  return false;
}

void LossScaler::load_state(const LossScalerState& s) {
  if (!enabled_) {
    LATTICE_CHECK(s == LossScalerState{},
                  "loss scaler state: scale {} with {} good steps comes from fp16 loss scaling, but this run's "
                  "scaler is disabled (bf16/fp32): resume with the precision the checkpoint was written with",
                  s.scale, s.good_steps);
    return;
  }
  LATTICE_CHECK(s.scale >= opts_.min && s.scale <= opts_.max,
                "loss scaler state: scale {} is outside runtime.loss_scale [min {}, max {}]: resume with the loss "
                "scaler options the checkpoint was written with",
                s.scale, opts_.min, opts_.max);
  LATTICE_CHECK(s.good_steps >= 0 && s.good_steps < opts_.growth_interval,
                "loss scaler state: good_steps {} must lie in [0, growth_interval {}): resume with the loss scaler "
                "options the checkpoint was written with",
                s.good_steps, opts_.growth_interval);
  state_ = s;
}

LossScaler make_loss_scaler(DType compute, const LossScaleConfig& o) {
  return compute == DType::f16 ? LossScaler(o) : LossScaler();
}

}  // namespace lattice::optim
