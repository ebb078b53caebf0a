// Tensor-parallel embeddings (Megatron VocabParallelEmbedding, ColossalAI
// Embedding1D).
//
//   VocabParallelEmbedding  vocabulary rows split: rank r holds rows
//                           [r V_l, (r + 1) V_l) of the padded table
//                           (core/param.h Placement::vocab, V_l = padded V / p).
//                           Forward looks up the ids it holds, gives zero rows
//                           for the others, and all-reduces over tp.
//                           Backward touches local rows only: no communication.
//   ParallelEmbedding       the embedding dim split (Placement::row): weight
//                           (V, C/p); forward looks up the local columns and
//                           gathers them along the last dim; backward keeps
//                           this rank's columns of dout.
//
// The layers hold no tensors (weights are views into flat parameters).
// dweight accumulates (+=); out overwrites. Every rank calls forward and
// backward together. Shapes: N ids (B * T), C model width, p = tp size.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace lattice::tp {

class VocabParallelEmbedding {
 public:
  explicit VocabParallelEmbedding(comm::Group& tp);

  // out (N, C) = weight_full[ids]; ids (N) i32 (logical ids, < the logical V);
  // weight (V_l, C): this rank's rows.
  void forward(Tensor& out, const Tensor& ids, const Tensor& weight);
  // dweight (V_l, C) += dout (N, C) scattered by the ids this rank holds.
  void backward(Tensor& dweight, const Tensor& dout, const Tensor& ids);

  // The first (padded) vocabulary row this rank holds, for a local table of V_l rows.
  int64_t vocab_start(int64_t local_rows) const { return int64_t(tp_.rank()) * local_rows; }

 private:
  comm::Group& tp_;
};

class ParallelEmbedding {
 public:
  explicit ParallelEmbedding(comm::Group& tp);

  // out (N, C) = all-gather over tp of weight[ids] (N, C/p); weight (V, C/p).
  void forward(Tensor& out, const Tensor& ids, const Tensor& weight);
  // dweight (V, C/p) += this rank's columns of dout (N, C), scattered by ids.
  void backward(Tensor& dweight, const Tensor& dout, const Tensor& ids);

 private:
  comm::Group& tp_;
};

}  // namespace lattice::tp
