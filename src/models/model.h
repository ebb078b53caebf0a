// The interface every model in the zoo implements, and what the training loop
// (src/booster) drives.
//
// A model owns no parameters: it binds named views into a FlatParams built
// from its own table (param_specs()). Forward runs one microbatch through the
// loss and saves what backward needs in a ModelContext, one per in-flight
// microbatch, so the activation memory a schedule holds is countable.
// backward() accumulates (+=) into the parameter gradients.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/param.h"
#include "core/tensor.h"

namespace lattice {

// What keys the random numbers of one microbatch (ARCHITECTURE.md §2).
struct StepCoords {
  uint64_t seed = 0;
  int64_t step = 0;     // optimizer step this microbatch belongs to (1-based)
  int64_t sample0 = 0;  // global index, in the step's global batch, of row 0
  bool train = true;    // false: dropout off (evaluation)
};

// Activations saved by forward for backward; model-specific.
class ModelContext {
 public:
  virtual ~ModelContext() = default;
  virtual int64_t bytes() const = 0;  // activation bytes this context holds
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual std::string arch() const = 0;
  virtual std::unique_ptr<ModelContext> make_context(int64_t B, int64_t T) const = 0;
  // inputs, targets: (B, T) i32 on the model's device. Returns the SUM of the
  // token losses over valid (target != ignore) tokens.
  virtual double forward(ModelContext& ctx, const Tensor& inputs, const Tensor& targets,
                         const StepCoords& coords) = 0;
  // Backward from the loss scaled per token by dloss (1 / global valid tokens).
  virtual void backward(ModelContext& ctx, float dloss) = 0;
  // Training FLOPs per token at sequence length T: 6 N + the attention term
  // 12 L C T (score and value matmuls, forward and backward, no causal discount).
  virtual double flops_per_token(int64_t T) const = 0;
};

inline constexpr int kIgnoreIndex = -1;

}  // namespace lattice
