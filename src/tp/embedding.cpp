#include "tp/embedding.h"

#include "core/ops.h"
#include "tp/mappings.h"

namespace lattice::tp {

namespace {
void check_table(const char* op, const Tensor& weight) {
  LATTICE_CHECK(weight.defined() && weight.ndim() == 2, "tp::{}: weight must be a 2-D table, got {}", op,
                weight.defined() ? shape_str(weight.shape()) : "undefined");
}
}  // namespace

// ---- VocabParallelEmbedding -----------------------------------------------

VocabParallelEmbedding::VocabParallelEmbedding(comm::Group& tp) : tp_(tp) {}

void VocabParallelEmbedding::forward(Tensor& out, const Tensor& ids, const Tensor& weight) {
  check_table("VocabParallelEmbedding::forward", weight);
  ops::embedding_forward(out, ids, weight, vocab_start(weight.dim(0)));  // ids elsewhere: zero rows
  reduce_from_tp_region_forward(out, tp_);
}

void VocabParallelEmbedding::backward(Tensor& dweight, const Tensor& dout, const Tensor& ids) {
  check_table("VocabParallelEmbedding::backward", dweight);
  Tensor d = dout;
  reduce_from_tp_region_backward(d, tp_);
  ops::embedding_backward(dweight, d, ids, vocab_start(dweight.dim(0)));
}

// ---- ParallelEmbedding ------------------------------------------------------

ParallelEmbedding::ParallelEmbedding(comm::Group& tp) : tp_(tp) {}

void ParallelEmbedding::forward(Tensor& out, const Tensor& ids, const Tensor& weight) {
  check_table("ParallelEmbedding::forward", weight);
  Tensor local = Tensor::empty({ids.numel(), weight.dim(1)}, out.dtype(), weight.device());  // (N, C/p)
  ops::embedding_forward(local, ids, weight);
  gather_from_tp_region_forward(out, local, tp_);
}

void ParallelEmbedding::backward(Tensor& dweight, const Tensor& dout, const Tensor& ids) {
  check_table("ParallelEmbedding::backward", dweight);
  Tensor dlocal = Tensor::empty({ids.numel(), dweight.dim(1)}, dout.dtype(), dweight.device());
  gather_from_tp_region_backward(dlocal, dout, tp_);
  ops::embedding_backward(dweight, dlocal, ids);
}

}  // namespace lattice::tp
