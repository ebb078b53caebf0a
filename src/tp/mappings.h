// The four tensor-parallel region ops (Megatron tensor_parallel/mappings.py).
//
// A tp region is the stretch of a layer where activations are split over the
// tp group. Entering and leaving it is one of four conjugate pairs: the
// backward of each op is the adjoint of its forward.
//
//   op                     | forward                          | backward
//   -----------------------+----------------------------------+----------------------------------
//   copy_to_tp_region      | identity                         | all-reduce (sum)
//   reduce_from_tp_region  | all-reduce (sum)                 | identity
//   scatter_to_tp_region   | split the last dim, keep block r | all-gather along the last dim
//   gather_from_tp_region  | all-gather along the last dim    | split the last dim, keep block r
//
// In-place ops (copy_to, reduce_from) work on the buffer they are given; the
// split/gather pairs write a separate output (overwrite). Each returns at once
// when the group has one rank (the split/gather pair then only copies when
// input and output are different buffers). Every rank of the group must make
// the same calls in the same order (collectives). Each op's collective is
// finished for whatever uses its output next: on the CPU the op waits for it
// before returning; on a GPU the compute stream waits for it and the host
// does not (comm::Work::wait_on_device), so the host keeps issuing the
// kernels that follow while the transfer runs.
//
// Shapes: "full" tensors are (N, K), "local" ones (N, K / tp) with rank r
// holding columns block r. With n_parts > 1 the last dim holds n_parts logical
// blocks that are each split separately (a fused QKV output: [q | k | v]), so
// a local row is [q_r | k_r | v_r] and a full row [q | k | v] in logical order.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"

namespace lattice::tp {

void copy_to_tp_region_forward(Tensor& x, comm::Group& tp);    // identity
void copy_to_tp_region_backward(Tensor& dx, comm::Group& tp);  // all-reduce (sum) in place

void reduce_from_tp_region_forward(Tensor& x, comm::Group& tp);    // all-reduce (sum) in place
void reduce_from_tp_region_backward(Tensor& dx, comm::Group& tp);  // identity

// out_local (N, K/tp) = block `rank` of x_full (N, K)
void scatter_to_tp_region_forward(Tensor& out_local, const Tensor& x_full, comm::Group& tp, int n_parts = 1);
// dx_full (N, K) = all-gather of dout_local (N, K/tp) along the last dim
void scatter_to_tp_region_backward(Tensor& dx_full, const Tensor& dout_local, comm::Group& tp, int n_parts = 1);

// out_full (N, K) = all-gather of x_local (N, K/tp) along the last dim
void gather_from_tp_region_forward(Tensor& out_full, const Tensor& x_local, comm::Group& tp, int n_parts = 1);
// dx_local (N, K/tp) = block `rank` of dout_full (N, K)
void gather_from_tp_region_backward(Tensor& dx_local, const Tensor& dout_full, comm::Group& tp, int n_parts = 1);

}  // namespace lattice::tp
