// Learning-rate schedules: linear warm-up, then cosine, linear or constant
// decay to min_lr at the horizon (train.steps). `step` is the 1-based index of
// the update being taken, so step 1 uses lr * 1 / warmup when warming up.
// decay_steps > 0 holds lr after the warm-up and decays over the last
// decay_steps steps only (warmup-stable-decay, as MiniCPM's WSD: a run can
// be continued from a checkpoint of its stable phase with another horizon).
#pragma once

#include <cstdint>
#include <string>

namespace lattice::optim {

enum class Decay { cosine, linear, constant };
Decay decay_from_name(const std::string& name);  // throws on unknown names

struct LrSchedule {
  double lr = 3e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  Decay decay = Decay::cosine;
  int64_t decay_steps = 0;  // 0: the decay spans every step after the warm-up
};

double learning_rate(const LrSchedule& s, int64_t step);

}  // namespace lattice::optim
