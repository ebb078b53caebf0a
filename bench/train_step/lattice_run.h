// Measuring Lattice on one rank: the float matmul rate of this machine at the
// current thread count and matmul dtype (the MFU denominator) and the training step of any registered
// model (zero_grad + forward + backward + AdamW), timed per phase. The model
// is built by ModelConfig through the registry (models/registry.h), its
// vocabulary padded as the trainer pads it (model.vocab_multiple), and its
// batches go through the arch's prepare_batch (BERT: masked LM) before timing.
//
// Both run at the thread count set beforehand with lattice::set_num_threads.
// FLOP model (the PyTorch references'): the model's flops_per_token, 6 N +
// 12 L C T; for gpt2 (N = all parameters except wpe, a tied head once)
// run_lattice checks it against N counted from the parameter table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/model.h"
#include "train_step/bench_config.h"

namespace lattice::bench {

// Float matmul GFLOP/s (ops::gemm: sgemm, or the bf16 / fp16 path that
// cpu::set_matmul_dtype selected), best of `reps` timed products after one warm-up:
// square = 1024 x 1024 x 1024; model = the MLP input shape (B*T, F, C) as
// linear_forward calls it (inp @ weight^T).
struct SgemmRate {
  double square = 0, model = 0;
  double peak() const { return square > model ? square : model; }
};
SgemmRate measure_sgemm(const BenchConfig& cfg, int reps);

struct LatticeResult {
  int64_t n_params = 0;       // all parameters
  int64_t n_flop_params = 0;  // N of the FLOP model (without wpe)
  double flops_per_step = 0;
  int64_t tokens_per_step = 0;
  Stats step_ms;                          // whole step
  Stats zero_ms, fwd_ms, bwd_ms, opt_ms;  // per phase
  Stats data_ms;                          // making the batch (outside the step, as in the references)
  double first_loss = 0, last_loss = 0;   // mean loss over the scored tokens
  double scored_per_step = 0;             // targets that count (BERT: the masked positions)
  int64_t activation_bytes = 0;           // one context (make_context)
  int64_t workspace_bytes = 0;            // the model's workspace (activation_bytes().workspace)
};

// How a run under 16-bit matmuls (cpu::set_matmul_dtype) holds its weights
// and activations; nothing changes under f32 matmuls.
struct HalfMode {
  // Weights from the parameters' 16-bit shadow, refreshed in the optimizer
  // phase as the trainer does; false: rounded on every call (the path before
  // the shadow; the same bits).
  bool shadow = true;
  // Activations stored in the matmul type, as the trainer stores them; false:
  // fp32 activations (the path before 16-bit activations).
  bool act16 = true;
};

// Times `warmup` untimed + `steps` timed training steps of cfg.model on random
// token ids. `span`: the whole model, with its recomputation settings
// (StageSpan::recompute_attention). `log` receives one line per step.
LatticeResult run_lattice(const BenchConfig& cfg, int steps, int warmup, HalfMode half, const StageSpan& span,
                          const std::function<void(const std::string&)>& log);

}  // namespace lattice::bench
