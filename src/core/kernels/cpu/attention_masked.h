// CPU bidirectional (non-causal) multi-head self-attention with a key padding
// mask, on a fused qkv projection (BERT).
//
// Per (sample b, head h), with q, k, v the (T, HS) slices of qkv (row stride
// 3C, where C = NH * HS), scale = 1 / sqrt(HS) and M_j = key_mask[b, j] != 0:
//   S = scale * q k^T,  P_ij = exp(S_ij) M_j / sum_j' exp(S_ij') M_j'
//   (a row with no valid key is all zeros),  Pd = dropout(P),  out = Pd v.
// Backward, with dO the (T, HS) slice of dout:
//   dV = Pd^T dO,  dPd = dO v^T,  dP = dropout(dPd) (same mask),
//   dS = P * (dP - rowsum(P * dP)),  dQ = scale * dS k,  dK = scale * dS^T q.
// Masked entries of P are zero, so backward needs no mask: dS is zero there.
// Every product is a BLAS gemm on strided blocks; (b, h) pairs run in
// parallel over OpenMP threads with BLAS single-threaded inside.
//
// Saved state: att (B, NH, T, T) holds P before dropout. The dropout mask of
// element (i, j) of head h is rng_keep(key, sample0 + b, ((head_offset + h) *
// T + i) * T + j, p), as in the causal kernel (attention.h), so masks do not
// depend on how heads are split over tp ranks. dqkv is OVERWRITTEN.
// Memory saved for backward: B * NH * T * T elements per layer, plus qkv.
// Storage S: float, double, Bf16 or F16, as for the causal kernel
// (attention.h).
#pragma once

#include <cstdint>

#include "core/kernels/cpu/attention.h"
#include "core/rng.h"

namespace lattice::cpu {

// key_mask may be null: every key is valid.
template <typename S>
void attention_masked_forward(S* out,                   // (B, T, NH * HS)
                              S* att,                   // (B, NH, T, T) saved: probabilities before dropout
                              const S* qkv,             // (B, T, 3 * NH * HS)
                              const int32_t* key_mask,  // (B, T) nonzero = attend to this key; or null
                              const RngKey& key, int64_t sample0, float p, const AttentionDims& d);

template <typename S>
void attention_masked_backward(S* dqkv,        // (B, T, 3 * NH * HS) overwrite
                               S* scratch,     // (B, NH, T, T) workspace (holds dS on return)
                               const S* dout,  // (B, T, NH * HS)
                               const S* qkv,   // (B, T, 3 * NH * HS)
                               const S* att,   // (B, NH, T, T) from forward
                               const RngKey& key, int64_t sample0, float p, const AttentionDims& d);

}  // namespace lattice::cpu
