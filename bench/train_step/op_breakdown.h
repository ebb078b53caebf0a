// Where a GPT-2 training step spends its time, op by op: replays the op
// sequence of Gpt2::forward / Gpt2::backward (src/models/gpt2/gpt2.cpp, dropout
// 0) on buffers of the model's shapes with a timer around every op call, and
// sums the time per op kind. Matmul-like kinds also report their GFLOP/s.
//
// One block's buffers are reused for all L blocks (same shapes, same work);
// the AdamW update and zero_grad are timed by run_lattice, not here.
#pragma once

#include <string>
#include <vector>

#include "train_step/bench_config.h"

namespace lattice::bench {

struct OpTime {
  std::string kind;   // e.g. "linear fwd (blocks)", "attention bwd"
  int calls = 0;      // per step
  double ms = 0;      // per step
  double flops = 0;   // per step; 0 for kinds that are not matmuls
};

// Mean per-step times over `reps` replays after one untimed replay, in the
// order the kinds first occur.
std::vector<OpTime> op_breakdown(const BenchConfig& cfg, int reps);

}  // namespace lattice::bench
