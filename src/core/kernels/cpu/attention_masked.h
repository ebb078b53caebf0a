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
// Row blocks, threads and products as in the causal kernel (attention.h).
//
// Saved state: att holds P before dropout (B, NH, T, T), zero at masked keys,
// or the compact state (AttentionDims::compact_state: the rows' softmax
// statistics, linear in T), as for the causal kernel. Backward of the full
// state needs no mask (dS is zero where P is); the compact state's needs the
// forward's key_mask to compute P again. The dropout mask of element (i, j)
// of head h is rng_keep(key, sample0 + b, ((head_offset + h) * T + i) * T +
// j, p), as in the causal kernel, so masks do not depend on how heads are
// split over tp ranks. dqkv is OVERWRITTEN.
// Storage S: float, double, Bf16 or F16, as for the causal kernel
// (attention.h).
#pragma once

#include <cstdint>

#include "core/kernels/cpu/attention.h"
#include "core/rng.h"

namespace lattice::cpu {

// key_mask may be null: every key is valid.
template <typename S>
void attention_masked_forward(S* out,                   // (B, T, NH * HS); null: att alone (attention.h)
                              S* att,                   // saved: P before dropout (B, NH, T, T), or compact
                              const S* qkv,             // (B, T, 3 * NH * HS)
                              const int32_t* key_mask,  // (B, T) nonzero = attend to this key; or null
                              const RngKey& key, int64_t sample0, float p, const AttentionDims& d);

template <typename S>
void attention_masked_backward(S* dqkv,                  // (B, T, 3 * NH * HS) overwrite
                               const S* dout,            // (B, T, NH * HS)
                               const S* qkv,             // (B, T, 3 * NH * HS)
                               const S* att,             // from forward
                               const int32_t* key_mask,  // forward's (compact state; else unused), or null
                               const RngKey& key, int64_t sample0, float p, const AttentionDims& d);

}  // namespace lattice::cpu
