// P2P: activations and their gradients between neighbouring pipeline stages,
// over the pp group, with verbs named by direction (Megatron
// p2p_communication.py):
//
//   send_forward(out)   -> next stage     recv_forward(in)    <- previous stage
//   send_backward(din)  -> previous stage recv_backward(dout) <- next stage
//   send_forward_recv_backward(out, dout), send_backward_recv_forward(din, in):
//   both transfers started together (one batch_send_recv).
//
// No-ops: a transfer whose chunk has no such neighbour (the model's first
// chunk receives no input and sends no gradient, the last chunk sends no
// output and receives no gradient) does nothing, so callers never ask "am I
// the last stage". With interleaving the stages form a ring: chunk v of the
// last stage feeds chunk v + 1 of stage 0.
//
// Completion: every verb starts its transfers and returns a comm::Work at
// once (a completed one for a no-op); wait() on it before reading a received
// buffer or writing a sent one. The caller (the interpreter) times the wait
// and names the plan action when it passes its deadline.
//
// Wire format: raw buffers, no metadata; both sides know the shape from the
// config. Tags name (direction, model-chunk boundary, microbatch), so a
// transfer only ever meets its own counterpart; microbatches wrap modulo
// tag_microbatches() (MPI keeps same-tag messages in order).
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "pipeline/stage_manager.h"

namespace lattice::pipeline {

enum class P2PKind { send_forward, recv_forward, send_backward, recv_backward };

struct Transfer {
  P2PKind kind;
  Tensor tensor;  // sent from, or received into
  int chunk = 0;  // virtual stage on this rank
  int microbatch = 0;
};

class P2P {
 public:
  // pp: the pipeline group (group rank == stage). timeout_s: deadline of each
  // wait (0: the communicator's default, runtime.comm_timeout_s).
  P2P(comm::Group& pp, const PipelineStageManager& stages, double timeout_s = 0);

  comm::WorkPtr send_forward(const Tensor& output, int chunk = 0, int microbatch = 0);
  comm::WorkPtr recv_forward(Tensor& input, int chunk = 0, int microbatch = 0);
  comm::WorkPtr send_backward(const Tensor& dinput, int chunk = 0, int microbatch = 0);
  comm::WorkPtr recv_backward(Tensor& doutput, int chunk = 0, int microbatch = 0);
  // The recv half's microbatch is recv_microbatch (-1: the same as the send's).
  comm::WorkPtr send_forward_recv_backward(const Tensor& output, Tensor& doutput, int chunk = 0, int microbatch = 0,
                                           int recv_microbatch = -1);
  comm::WorkPtr send_backward_recv_forward(const Tensor& dinput, Tensor& input, int chunk = 0, int microbatch = 0,
                                           int recv_microbatch = -1);

  // Any set of transfers started together; those without a peer are dropped.
  // timeout_s: this batch's deadline (0: the P2P's).
  comm::WorkPtr start(const std::vector<Transfer>& batch, double timeout_s = 0);

  // The peer stage of a transfer, or -1 for a no-op; and its world rank.
  int peer_stage(P2PKind kind, int chunk) const;
  int peer_world_rank(P2PKind kind, int chunk) const;
  int world_rank_of(int stage) const { return pp_.world_ranks()[size_t(stage)]; }
  int tag(P2PKind kind, int chunk, int microbatch) const;
  int tag_microbatches() const;
  const PipelineStageManager& stages() const { return stages_; }

 private:
  comm::Group& pp_;
  const PipelineStageManager& stages_;
  double timeout_s_;
};

}  // namespace lattice::pipeline
