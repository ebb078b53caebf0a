#include "tp/mappings.h"

#include "core/ops.h"

namespace lattice::tp {

namespace {

// The (N, K) folding of a full tensor and its split into n_parts x size blocks.
struct Split {
  int64_t n, k, part, block;  // rows, full columns, columns per part, columns per (part, rank) block
};

Split split_of(const char* op, const Tensor& full, const Tensor& local, int size, int n_parts) {
  LATTICE_CHECK(full.defined() && local.defined(), "tp::{}: undefined tensor", op);
  LATTICE_CHECK(full.dtype() == local.dtype(), "tp::{}: full tensor is {}, local one {}", op, dtype_name(full.dtype()),
                dtype_name(local.dtype()));
  LATTICE_CHECK(n_parts >= 1, "tp::{}: n_parts = {}", op, n_parts);
  const int64_t k = full.ndim() ? full.dim(-1) : 1;
  LATTICE_CHECK(k % (int64_t(size) * n_parts) == 0,
                "tp::{}: last dim {} of {} cannot be split into {} part(s) over tp = {}", op, k,
                shape_str(full.shape()), n_parts, size);
  const int64_t n = k ? full.numel() / k : 0;
  LATTICE_CHECK(local.numel() * size == full.numel() && (local.ndim() ? local.dim(-1) : 1) * size == k,
                "tp::{}: local tensor {} is not a 1/{} split of the last dim of {}", op, shape_str(local.shape()), size,
                shape_str(full.shape()));
  return {n, k, k / n_parts, k / n_parts / size};
}

// local (N, K/size) = block `rank` of every part of full (N, K).
void split_last_dim(const char* op, Tensor& local, const Tensor& full, int rank, int size, int n_parts) {
  Split s = split_of(op, full, local, size, n_parts);
  const int64_t lk = s.k / size;
  for (int64_t f = 0; f < n_parts; ++f)
    ops::copy_rows(local, f * s.block, lk, full, f * s.part + rank * s.block, s.k, s.n, s.block);
}

// full (N, K) = the blocks of every rank's local (N, K/size), parts in logical order.
void gather_last_dim(const char* op, Tensor& full, const Tensor& local, comm::Group& tp, int n_parts) {
  const int size = tp.size();
  Split s = split_of(op, full, local, size, n_parts);
  Tensor all = Tensor::empty({size * local.numel()}, local.dtype(), local.device());  // rank r at r * numel
  tp.all_gather(all, local)->wait_on_device();
  const int64_t lk = s.k / size;
  for (int r = 0; r < size; ++r)
    for (int64_t f = 0; f < n_parts; ++f)
      ops::copy_rows(full, f * s.part + r * s.block, s.k, all, r * local.numel() + f * s.block, lk, s.n, s.block);
}

// The one-rank case of a split or gather: a copy unless out is in.
void copy_unless_same(const char* op, Tensor& out, const Tensor& in) {
  LATTICE_CHECK(out.numel() == in.numel() && out.dtype() == in.dtype(), "tp::{}: out {} {} for in {} {}", op,
                shape_str(out.shape()), dtype_name(out.dtype()), shape_str(in.shape()), dtype_name(in.dtype()));
  if (out.same_storage(in) && out.raw() == in.raw()) return;
  out.copy_from(in);
}

}  // namespace

void copy_to_tp_region_forward(Tensor& x, comm::Group& tp) {}

void copy_to_tp_region_backward(Tensor& dx, comm::Group& tp) {
  if (tp.size() > 1) tp.all_reduce(dx, {.op = comm::ReduceOp::sum})->wait_on_device();
}

void reduce_from_tp_region_forward(Tensor& x, comm::Group& tp) {
  if (tp.size() > 1) tp.all_reduce(x, {.op = comm::ReduceOp::sum})->wait_on_device();
}

void reduce_from_tp_region_backward(Tensor& dx, comm::Group& tp) {}

void scatter_to_tp_region_forward(Tensor& out_local, const Tensor& x_full, comm::Group& tp, int n_parts) {
  if (tp.size() == 1) return copy_unless_same("scatter_to_tp_region_forward", out_local, x_full);
  split_last_dim("scatter_to_tp_region_forward", out_local, x_full, tp.rank(), tp.size(), n_parts);
}

void scatter_to_tp_region_backward(Tensor& dx_full, const Tensor& dout_local, comm::Group& tp, int n_parts) {
  if (tp.size() == 1) return copy_unless_same("scatter_to_tp_region_backward", dx_full, dout_local);
  gather_last_dim("scatter_to_tp_region_backward", dx_full, dout_local, tp, n_parts);
}

void gather_from_tp_region_forward(Tensor& out_full, const Tensor& x_local, comm::Group& tp, int n_parts) {
  if (tp.size() == 1) return copy_unless_same("gather_from_tp_region_forward", out_full, x_local);
  gather_last_dim("gather_from_tp_region_forward", out_full, x_local, tp, n_parts);
}

void gather_from_tp_region_backward(Tensor& dx_local, const Tensor& dout_full, comm::Group& tp, int n_parts) {
  if (tp.size() == 1) return copy_unless_same("gather_from_tp_region_backward", dx_local, dout_full);
  split_last_dim("gather_from_tp_region_backward", dx_local, dout_full, tp.rank(), tp.size(), n_parts);
}

}  // namespace lattice::tp
