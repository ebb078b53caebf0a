// The interface every model in the zoo implements, and what the training loop
// (src/booster) and the pipeline callbacks drive.
//
// A model object runs one pipeline chunk (StageSpan): blocks [first_layer,
// end_layer), plus the embedding when it is the first chunk and the final
// norm, head and loss when it is the last. The whole model is one span with
// both. A model owns no parameters: it binds named views into a FlatParams
// laid out from its table (select_stage_params picks a chunk's entries).
// Forward runs one microbatch and saves what backward needs in a ModelContext,
// one per in-flight microbatch, so the activation memory a schedule holds is
// countable. backward() accumulates (+=) into the parameter gradients and
// overwrites the input-activation gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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

// The part of the model one object runs.
struct StageSpan {
  int first_layer = 0;
  int end_layer = -1;     // one past the last block; -1: n_layer
  bool embedding = true;  // holds the token/position embedding (reads token ids)
  bool head = true;       // holds the final norm, LM head and loss
  int recompute = 0;      // the first `recompute` blocks keep only their output and
                          // recompute the rest in backward (activation recomputation)
  // The other blocks keep no attention probabilities: they share one buffer
  // per chunk and compute them again in backward (parallel.recompute_attention;
  // ChunkModel::recompute_attention).
  bool recompute_attention = false;
  // With the head: the LM head and loss run over at most this many of the
  // microbatch's B * T rows at a time and keep no logits: a training forward
  // given the loss weight (LanguageModel::set_loss_weight) computes each
  // chunk's gradients at once, else backward computes its logits again
  // (parallel.head_chunk_tokens). 0: all rows at once, the logits kept in the
  // context until backward.
  int64_t head_chunk = 0;
};

// The parameter entries a rank needs for its chunks: each spec whose owning
// layer is in a chunk (kEmbeddingLayer with the embedding, n_layer with the
// head), plus tied parameters whose tie_layer is (marked tie_replica when the
// rank does not also own them).
std::vector<ParamSpec> select_stage_params(const std::vector<ParamSpec>& all, const std::vector<StageSpan>& chunks,
                                           int n_layer);

// Allocator bytes of one model chunk's activations at microbatch (B, T), from
// the same tensor lists the model allocates (lattice plan predicts memory with it).
struct ActivationBytes {
  int64_t context = 0;             // one make_context(B, T): what one in-flight microbatch holds
  int64_t workspace = 0;           // scratch shared by the chunk's contexts: allocated by its
                                   // first forward, kept for the model's lifetime
  int64_t transient = 0;           // allocated and freed again inside one forward
  int64_t backward_transient = 0;  // allocated and freed again inside one backward
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
  // The dtype of the activations make_context allocates and forward/backward
  // take and give at a chunk boundary: the parameters' dtype by default;
  // bf16 or f16 (beside f32 parameters) under runtime.precision bf16/fp16,
  // whose matmuls must then run in that type. Set it before the first
  // make_context; statistics, losses and gradients stay in the parameters'.
  virtual DType activation_dtype() const = 0;
  virtual void set_activation_dtype(DType dtype) = 0;
  // The dloss the next training forwards' backward will take (the plugin sets
  // it each step, before any forward; nullopt: not known). With it a model
  // may do part of backward during forward: under StageSpan::head_chunk the
  // LM head computes its gradients chunk by chunk as it computes the loss, so
  // backward computes no logits again. backward() must then get the same
  // dloss. Evaluation forwards (StepCoords::train false) compute no gradients.
  virtual void set_loss_weight(std::optional<float> dloss) { (void)dloss; }
  // When set (a (1) f64 tensor on the model's device), forwards of the chunk
  // with the head add their loss sum to *acc where it lies (ops::sum_into: on
  // a GPU no host wait per microbatch) and return 0; the caller reads *acc
  // once (the plugin: once per step). nullptr: forward returns the sum.
  virtual void set_loss_sum(Tensor* acc) { (void)acc; }
  virtual std::unique_ptr<ModelContext> make_context(int64_t B, int64_t T) const = 0;
  // What make_context(B, T) and the chunk's workspace allocate, without allocating.
  virtual ActivationBytes activation_bytes(int64_t B, int64_t T) const = 0;
  // input: token ids (B, T) i32 for a chunk with the embedding, otherwise the
  //   previous chunk's activation (B, T, C), which must stay alive until backward;
  // targets: (B, T) i32, read by the chunk with the head;
  // output: this chunk's activation (B, T, C) for the next chunk (unused with the head).
  // Returns the SUM of the token losses over valid tokens (0 without the head).
  virtual double forward(ModelContext& ctx, const Tensor& input, const Tensor& targets, const StepCoords& coords,
                         Tensor* output = nullptr) = 0;
  // With the head: starts from the loss, each valid token weighted by dloss
  // (1 / global valid tokens); otherwise from doutput (B, T, C). Writes dinput
  // (B, T, C) unless the chunk holds the embedding.
  virtual void backward(ModelContext& ctx, float dloss, const Tensor* doutput = nullptr, Tensor* dinput = nullptr) = 0;
  // Training FLOPs per token of the WHOLE model at sequence length T: 6 N + the
  // attention term 12 L C T (score and value matmuls, forward and backward, no
  // causal discount).
  virtual double flops_per_token(int64_t T) const = 0;

  // When set, backward() calls it once per layer it holds, as soon as that
  // layer's parameter gradients are final for the call: the head (layer
  // n_layer) first, then the blocks from last to first, then the embedding
  // (kEmbeddingLayer). The plugin sets it for a chunk's last microbatch to
  // start the dp all-reduce of finished buckets (booster/grad_buckets.h).
  std::function<void(int layer)> on_grads_ready;
};

inline constexpr int kIgnoreIndex = -1;

}  // namespace lattice
