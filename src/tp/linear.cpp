#include "tp/linear.h"

#include "core/ops.h"
#include "tp/mappings.h"

namespace lattice::tp {

namespace {

void check_bias(const char* layer, bool has_bias, const Tensor* bias) {
  LATTICE_CHECK(has_bias == (bias != nullptr), "tp::{}: built with bias = {} but given {}", layer, has_bias,
                bias ? "a bias" : "no bias");
}

int64_t rows_of(const Tensor& t) { return t.ndim() && t.dim(-1) ? t.numel() / t.dim(-1) : 0; }

// A temporary like `like` with the last dim replaced.
Tensor with_last_dim(const Tensor& like, int64_t last) {
  return Tensor::empty({rows_of(like), last}, like.dtype(), like.device());
}

// An fp32 temporary shaped like `like` (16-bit activations): tensor-parallel
// partial sums are reduced in fp32 and rounded once, so a tp layout rounds
// what the one-rank product rounds (ops.h linear_forward's f32 output).
Tensor master_like(const Tensor& like) {
  return Tensor::empty(like.shape(), master_dtype(like.dtype()), like.device());
}

}  // namespace

// ---- ColumnParallelLinear -------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(Options o, comm::Group& tp) : opts_(o), tp_(tp) {
  LATTICE_CHECK(o.n_fused >= 1, "tp::ColumnParallelLinear: n_fused = {}", o.n_fused);
}

void ColumnParallelLinear::forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  check_bias("ColumnParallelLinear", opts_.bias, bias);
  Tensor x = inp;  // replicated input: entering the region is the identity
  copy_to_tp_region_forward(x, tp_);
  if (!opts_.gather_output) return ops::linear_forward(out, x, weight, bias);
  Tensor local = with_last_dim(out, weight.dim(0));  // (N, OC/p)
  ops::linear_forward(local, x, weight, bias);
  gather_from_tp_region_forward(out, local, tp_, opts_.n_fused);
}

void ColumnParallelLinear::forward_gelu(Tensor& act, Tensor& pre, const Tensor& inp, const Tensor& weight,
                                        const Tensor* bias) {
  check_bias("ColumnParallelLinear", opts_.bias, bias);
  LATTICE_CHECK(!opts_.gather_output, "ColumnParallelLinear::forward_gelu: the layer gathers its output");
  Tensor x = inp;
  copy_to_tp_region_forward(x, tp_);
  ops::linear_gelu_forward(act, pre, x, weight, bias);
}

void ColumnParallelLinear::backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                                    const Tensor& weight) {
  check_bias("ColumnParallelLinear", opts_.bias, dbias);
  Tensor dlocal = dout;
  if (opts_.gather_output) {
    dlocal = with_last_dim(dout, weight.dim(0));
    gather_from_tp_region_backward(dlocal, dout, tp_, opts_.n_fused);
  }
  if (!dinp || tp_.size() == 1) {
    ops::linear_backward(dinp, dweight, dbias, dlocal, inp, weight);
    if (dinp) copy_to_tp_region_backward(*dinp, tp_);
    return;
  }
  // The input gradient first, its all-reduce (copy_to_tp_region_backward,
  // non-blocking here) in flight while this rank computes the weight and bias
  // gradients, which do not depend on it (Megatron's asynchronous
  // tensor-parallel all-reduce). NCCL runs it on its own stream; MPI
  // advances it only inside MPI calls (the progress thread of
  // comm/mpi_progress.h polls only while dp buckets are open, not here).
  // 16-bit activations: the partial input gradient is summed in fp32, then rounded.
  const bool half = is_16bit(dinp->dtype());
  Tensor partial = half ? master_like(*dinp) : *dinp;
  ops::linear_backward(&partial, nullptr, nullptr, dlocal, inp, weight);
  comm::WorkPtr sum = tp_.all_reduce(partial, {.op = comm::ReduceOp::sum});
  if (dweight || dbias) ops::linear_backward(nullptr, dweight, dbias, dlocal, inp, weight);
  sum->wait_on_device();
  if (half) ops::convert(*dinp, partial);
}

// ---- RowParallelLinear ----------------------------------------------------

RowParallelLinear::RowParallelLinear(Options o, comm::Group& tp) : opts_(o), tp_(tp) {}

void RowParallelLinear::forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  check_bias("RowParallelLinear", opts_.bias, bias);
  Tensor x = inp;
  if (!opts_.input_is_parallel) {
    x = with_last_dim(inp, weight.dim(-1));  // (N, C/p)
    scatter_to_tp_region_forward(x, inp, tp_);
  }
  // 16-bit activations: one rounding of the whole sum and the bias, as one
  // rank's linear_forward rounds it; the tp partial sums are reduced in fp32.
  const bool half = is_16bit(out.dtype());
  if (half && tp_.size() == 1) return ops::linear_forward(out, x, weight, bias);
  Tensor sum = half ? master_like(out) : out;
  ops::linear_forward(sum, x, weight, nullptr);
  reduce_from_tp_region_forward(sum, tp_);
  if (bias) ops::add_bias_forward(sum, *bias);
  if (half) ops::convert(out, sum);
}

void RowParallelLinear::backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                                 const Tensor& weight) {
  check_bias("RowParallelLinear", opts_.bias, dbias);
  Tensor d = dout;  // leaving the region backward is the identity
  reduce_from_tp_region_backward(d, tp_);
  Tensor x = inp;
  if (!opts_.input_is_parallel) {
    x = with_last_dim(inp, weight.dim(-1));
    scatter_to_tp_region_forward(x, inp, tp_);  // the local input of forward, sliced again
  }
  // The bias added after the reduce has the column sums of d as its gradient,
  // as a bias inside the matmul would: linear_backward sums them (on the GPU
  // in the dweight matmul's epilogue).
  if (opts_.input_is_parallel || !dinp) return ops::linear_backward(dinp, dweight, dbias, d, x, weight);
  Tensor dlocal = with_last_dim(inp, weight.dim(-1));
  ops::linear_backward(&dlocal, dweight, dbias, d, x, weight);
  scatter_to_tp_region_backward(*dinp, dlocal, tp_);
}

}  // namespace lattice::tp
