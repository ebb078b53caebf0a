// Where a GPT-2 training step spends its time, op by op: replays the op
// sequence of Gpt2::forward / Gpt2::backward (src/models/gpt2/gpt2.cpp, dropout
// 0; the loss through tp::vocab_parallel_cross_entropy on one rank, as the
// model calls it) on buffers of the model's shapes with a timer around every
// op call, and sums the time per op kind. Matmul-like kinds also report their
// GFLOP/s. Each kind belongs to one phase of the step (OpPhase); phase_times
// sums them.
//
// One block's buffers are reused for all L blocks (same shapes, same work);
// the AdamW update, zero_grad and the batch are timed by run_lattice, not here.
#pragma once

#include <string>
#include <vector>

#include "train_step/bench_config.h"

namespace lattice::bench {

// The phases of the replayed forward + backward. The step's other phases
// (optimizer, data) are measured by run_lattice.
enum class OpPhase { matmuls, attention, norms, activations, cross_entropy, other };
inline constexpr OpPhase kOpPhases[] = {OpPhase::matmuls,     OpPhase::attention,     OpPhase::norms,
                                        OpPhase::activations, OpPhase::cross_entropy, OpPhase::other};
const char* phase_name(OpPhase p);

struct OpTime {
  std::string kind;  // e.g. "linear fwd (blocks)", "attention bwd"
  OpPhase phase = OpPhase::other;
  int calls = 0;     // per step
  double ms = 0;     // per step
  double flops = 0;  // per step; 0 for kinds that are not matmuls
};

// ms per step of each phase in kOpPhases order.
std::vector<double> phase_times(const std::vector<OpTime>& ops);

// Mean per-step times over `reps` replays after one untimed replay, in the
// order the kinds first occur.
// act_dtype: the activations' dtype (f32, or the 16-bit matmul type as the
// model stores activations under bf16/fp16).
std::vector<OpTime> op_breakdown(const BenchConfig& cfg, int reps, DType act_dtype);

}  // namespace lattice::bench
