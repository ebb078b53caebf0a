// Optimizers over a FlatParams: AdamW and SGD with momentum.
//
// State buffers share the flat layout of the parameters, so a parameter's
// state is the same view as its value. Weight decay applies to parameters
// whose table entry says so (matrices and embeddings in GPT-2 practice, not
// biases and norm gains). The update reads the gradients scaled by
// `grad_scale` (the clipping factor) and leaves them untouched. A step writes
// the values and marks them written (FlatParams::mark_written); refreshing a
// 16-bit shadow is the caller's (core/param.h).
#pragma once

#include <memory>
#include <string>

#include "core/param.h"

namespace lattice::optim {

struct OptimizerOptions {
  std::string name = "adamw";  // adamw | sgd
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double momentum = 0.9;  // sgd
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Takes update number `step` (1-based) at learning rate `lr`.
  virtual void step(FlatParams& params, double lr, int64_t step, float grad_scale) = 0;
  // Optimizer state as named flat buffers (for checkpoints), e.g. "exp_avg".
  virtual std::vector<std::pair<std::string, Tensor*>> state() = 0;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& opts, const FlatParams& params);

}  // namespace lattice::optim
