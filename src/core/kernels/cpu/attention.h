// CPU causal multi-head self-attention on a fused qkv projection.
//
// Per (sample b, head h), with q, k, v the (T, HS) slices of qkv (row stride
// 3C, where C = NH * HS) and scale = 1 / sqrt(HS):
//   S = scale * q k^T (causal: j <= i),  P = softmax_rows(S),
//   Pd = dropout(P),  out = Pd v.
// Backward, with dO the (T, HS) slice of dout:
//   dV = Pd^T dO,  dPd = dO v^T,  dP = dropout(dPd) (same mask),
//   dS = P * (dP - rowsum(P * dP)),  dQ = scale * dS k,  dK = scale * dS^T q.
// Every product is a BLAS gemm on strided blocks; (b, h) pairs run in parallel
// over OpenMP threads with BLAS single-threaded inside. Row blocks skip the
// zero upper triangle, so the causal mask also halves the work.
//
// Saved state: att (B, NH, T, T) holds P before dropout, zero above the
// diagonal. The dropout mask of element (i, j) of head h is rng_keep(key,
// sample0 + b, ((head_offset + h) * T + i) * T + j, p): it does not depend on
// how heads are split over tp ranks. dqkv is OVERWRITTEN.
// Memory saved for backward: B * NH * T * T elements, i.e. 4 * B * NH * T^2
// bytes in f32 per layer (GPT-2 small at B = 4, T = 256: 12.6 MB per layer,
// 151 MB for its 12 layers; half that in bf16/f16), plus the qkv input the
// caller keeps.
//
// Storage S: float, double, Bf16 or F16 (core/kernels/storage.h), every
// activation argument (qkv, out, att, dout, dqkv, scratch) of that type. For
// 16-bit S the math is fp32 (scores, softmax, row sums), the products run in
// S through gemm_half (the matmuls must run in S), P is stored rounded to S
// and read back widened, outputs are rounded once (ops.h states the
// semantics; attention_common.h has the mechanics).
#pragma once

#include <cstdint>

#include "core/kernels/storage.h"
#include "core/rng.h"

namespace lattice::cpu {

struct AttentionDims {
  int64_t B, T, NH, HS;
  int64_t head_offset;  // global index of local head 0 (tp shards)
};

template <typename S>
void attention_forward(S* out,        // (B, T, NH * HS)
                       S* att,        // (B, NH, T, T) saved: probabilities before dropout
                       const S* qkv,  // (B, T, 3 * NH * HS)
                       const RngKey& key, int64_t sample0, float p, const AttentionDims& d);

template <typename S>
void attention_backward(S* dqkv,        // (B, T, 3 * NH * HS) overwrite
                        S* scratch,     // (B, NH, T, T) workspace (holds dS on return)
                        const S* dout,  // (B, T, NH * HS)
                        const S* qkv,   // (B, T, 3 * NH * HS)
                        const S* att,   // (B, NH, T, T) from forward
                        const RngKey& key, int64_t sample0, float p, const AttentionDims& d);

}  // namespace lattice::cpu
