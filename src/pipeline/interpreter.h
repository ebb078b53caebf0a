// run_schedule: executes one rank's plan (pipeline/schedule.h) with the
// stage's forward/backward callbacks and the P2P transfers between them.
//
// Buffers: the interpreter owns every activation buffer that crosses a stage
// boundary, so the allocator's peak shows what the schedule holds. Per
// (chunk, microbatch) context: `input` (allocated by its recv_forward),
// `output` (by its forward), `doutput` (by its recv_backward), `dinput` (by
// its backward). input, output and doutput are freed when the backward ends,
// dinput once it has been sent. In a forward-only plan the input is freed
// after the forward and the output once sent. All of shape activation_shape.
//
// Waits: each P2P batch is started, then waited on the device
// (comm::Work::wait_on_device): on the CPU that is the host's wait, so the
// next action starts after the transfer; on a GPU (NCCL) the compute stream
// waits for the transfer and the host goes on issuing the next action's
// kernels instead of idling the GPU at every boundary. The host runs at most
// one batch ahead: it waits for a batch (Work::wait, with the deadline) after
// starting the next one, and for the last one before returning, so every
// transfer has completed when run_schedule returns. The time in P2P calls is
// wait_s (the bubble metric's numerator; on a GPU the host's view, not the
// device's idle time). A wait that passes its deadline (opts.timeout_s, or
// the communicator's default when 0) throws lattice::Error naming the plan
// action(s) of the batch it is blocked on: the hang watchdog.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"
#include "pipeline/p2p.h"
#include "pipeline/schedule.h"
#include "pipeline/trace.h"

namespace lattice::pipeline {

struct StageCallbacks {
  // Allocates nothing at the boundaries: the interpreter passes the buffers in.
  Shape activation_shape;  // (B, T, C), the same at every stage boundary
  DType dtype = DType::f32;
  Device device = Device::cpu();
  // Model chunk 0 (chunk 0 on stage 0): input is undefined (the model reads
  // token ids itself). The last model chunk: output is undefined (the model
  // computes the loss). chunk = virtual stage on this rank.
  std::function<void(int chunk, int microbatch, const Tensor& input, Tensor& output)> forward;
  // dinput undefined on model chunk 0; doutput undefined on the last model
  // chunk (the loss is the start). dinput is overwritten, never accumulated.
  std::function<void(int chunk, int microbatch, const Tensor& doutput, Tensor& dinput)> backward;
};

struct RunOptions {
  double timeout_s = 0;  // deadline of each P2P wait; 0: the communicator's default
  bool trace = false;    // record RunStats::trace
};

struct RunStats {
  double compute_s = 0;  // in forward/backward callbacks
  double wait_s = 0;     // in P2P calls (start and waits)
  std::vector<TraceSpan> trace;
};

RunStats run_schedule(const Plan& plan, P2P& p2p, StageCallbacks& cb, const RunOptions& opts = {});

}  // namespace lattice::pipeline
