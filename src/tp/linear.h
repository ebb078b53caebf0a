// Tensor-parallel linear layers (Megatron tensor_parallel/layers.py).
//
// Both compute Y = X A^T + b with A stored (OC, C), split over the tp group:
//   ColumnParallelLinear  A = [A_1; ...; A_p] by output rows: local weight
//                         (OC/p, C), local bias (OC/p); the input is
//                         replicated, the output split (or gathered).
//   RowParallelLinear     A = [A_1 ... A_p] by input columns: local weight
//                         (OC, C/p); the bias (OC) is replicated and added
//                         ONCE, after the reduce of the partial products.
// A column layer followed by a row layer (attention, MLP) needs exactly one
// all-reduce forward (the row layer's) and one backward (the column layer's).
//
// The layers hold no tensors: the caller passes weights (views into its flat
// parameters, shaped by core/param.h local_shape) and keeps the activations
// that backward needs. Parameter gradients accumulate (+=), activation
// gradients overwrite (=). A fused weight (n_fused logical matrices stacked
// along OC, QKV = 3) is split part by part (param.h Placement::column), so a
// local output row is [q_r | k_r | v_r]; gathered it is [q | k | v] in logical
// order. Every rank of the group calls forward and backward together.
//
// Shapes: N rows (B * T), C input features, OC output features, p = tp size.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"

namespace lattice::tp {

class ColumnParallelLinear {
 public:
  struct Options {
    bool bias = true;
    bool gather_output = false;  // out (N, OC) on every rank instead of (N, OC/p)
    int n_fused = 1;             // logical matrices fused along OC (only matters with gather_output)
  };
  ColumnParallelLinear(Options o, comm::Group& tp);

  // out (N, OC/p), or (N, OC) with gather_output = inp (N, C) @ weight (OC/p, C)^T + bias (OC/p).
  // bias must be null exactly when !Options::bias.
  void forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias);
  // forward into pre (N, OC/p), then act = gelu(pre) (tanh form), fused where
  // the backend can (ops::linear_gelu_forward). Only without gather_output:
  // the activation stays split, as the row layer after it takes it.
  void forward_gelu(Tensor& act, Tensor& pre, const Tensor& inp, const Tensor& weight, const Tensor* bias);
  // dout like out. dinp (N, C) = all-reduce over tp of dout_local @ weight
  // (overwrite; skipped with its all-reduce when null); dweight (OC/p, C) +=;
  // dbias (OC/p) +=. The all-reduce runs while dweight and dbias are computed.
  void backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                const Tensor& weight);

  const Options& options() const { return opts_; }

 private:
  Options opts_;
  comm::Group& tp_;
};

class RowParallelLinear {
 public:
  struct Options {
    bool bias = true;
    bool input_is_parallel = true;  // false: inp is (N, C), split here (scatter_to_tp_region)
  };
  RowParallelLinear(Options o, comm::Group& tp);

  // out (N, OC) = all-reduce over tp of inp_local (N, C/p) @ weight (OC, C/p)^T, then + bias (OC).
  // inp is (N, C/p), or (N, C) when !input_is_parallel.
  void forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias);
  // dout (N, OC) replicated. dinp like inp (overwrite; skipped when null);
  // dweight (OC, C/p) +=; dbias (OC) += on every rank (the full replicated gradient).
  void backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                const Tensor& weight);

  const Options& options() const { return opts_; }

 private:
  Options opts_;
  comm::Group& tp_;
};

}  // namespace lattice::tp
