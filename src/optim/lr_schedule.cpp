#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lattice::optim {

Decay decay_from_name(const std::string& name) {
  if (name == "cosine") return Decay::cosine;
  if (name == "linear") return Decay::linear;
  if (name == "constant") return Decay::constant;
  LATTICE_FAIL("optimizer.schedule.decay: unknown decay '{}' (expected cosine, linear or constant)", name);
}

double learning_rate(const LrSchedule& s, int64_t step) {
  if (s.warmup_steps > 0 && step <= s.warmup_steps) return s.lr * double(step) / double(s.warmup_steps);
  if (s.decay == Decay::constant) return s.lr;
  const int64_t start = s.decay_steps > 0 ? s.total_steps - s.decay_steps : s.warmup_steps;  // the decay's step 0
  int64_t span = std::max<int64_t>(1, s.total_steps - start);
  double progress = std::clamp(double(step - start) / double(span), 0.0, 1.0);
  double factor = s.decay == Decay::cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return s.min_lr + (s.lr - s.min_lr) * factor;
}

}  // namespace lattice::optim
