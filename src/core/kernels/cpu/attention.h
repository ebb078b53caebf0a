// CPU causal multi-head self-attention on a fused qkv projection.
//
// Per (sample b, head h), with q, k, v the (T, HS) slices of qkv (row stride
// 3C, where C = NH * HS) and scale = 1 / sqrt(HS):
//   S = scale * q k^T (causal: j <= i),  P = softmax_rows(S),
//   Pd = dropout(P),  out = Pd v.
// Backward, with dO the (T, HS) slice of dout:
//   dV = Pd^T dO,  dPd = dO v^T,  dP = dropout(dPd) (same mask),
//   dS = P * (dP - rowsum(P * dP)),  dQ = scale * dS k,  dK = scale * dS^T q.
// Rows go in blocks of 128, and a block reads the key columns up to its own
// end, so the causal mask also halves the work; every product is a BLAS gemm
// on strided blocks; (b, h) pairs run in parallel over OpenMP threads with
// BLAS single-threaded inside. Backward sums dK and dV over the row blocks
// (attention_common.h), so neither pass holds more of the (T, T) matrices
// than one block of rows per thread.
//
// Saved state, one of two (AttentionDims::compact_state), the same bits
// either way:
//   - full: att (B, NH, T, T) holds P before dropout, zero above the
//     diagonal: 4 * B * NH * T^2 bytes per layer in f32 (GPT-2 small at
//     B = 4, T = 256: 12.6 MB per layer; half that in bf16/f16);
//   - compact: att holds each row's softmax statistics (its max and the
//     reciprocal of its sum), 2 * B * NH * T values of compute_t<S>
//     (attention_compact_elems), linear in T; backward computes each block's
//     scores again (one more q k^T product per block) and from them P, by
//     the same arithmetic as forward.
// The dropout mask of element (i, j) of head h is rng_keep(key, sample0 + b,
// ((head_offset + h) * T + i) * T + j, p): it does not depend on how heads
// are split over tp ranks. dqkv is OVERWRITTEN. The caller keeps qkv.
//
// Storage S: float, double, Bf16 or F16 (core/kernels/storage.h), every
// activation argument (qkv, out, att, dout, dqkv) of that type. For
// 16-bit S the math is fp32 (scores, softmax, row sums), the products run in
// S through gemm_half (the matmuls must run in S), P is stored rounded to S
// and read back widened, outputs are rounded once (ops.h states the
// semantics; attention_common.h has the mechanics).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/kernels/storage.h"
#include "core/rng.h"

namespace lattice::cpu {

struct AttentionDims {
  int64_t B, T, NH, HS;
  int64_t head_offset;         // global index of local head 0 (tp shards)
  bool compact_state = false;  // att holds the rows' statistics, not P (above)
};

// Elements of activation dtype `act` the compact state of a (B, NH, T)
// call takes: two compute_t values per row of each head (fp32 for 16-bit
// activations, so two 16-bit elements each).
constexpr int64_t attention_compact_elems(DType act, int64_t B, int64_t NH, int64_t T) {
  return 2 * B * NH * T * (is_16bit(act) ? 2 : 1);
}

template <typename S>
void attention_forward(S* out,        // (B, T, NH * HS); null: att alone, no dropout or P @ V (recompute)
                       S* att,        // saved: P before dropout (B, NH, T, T), or the compact state
                       const S* qkv,  // (B, T, 3 * NH * HS)
                       const RngKey& key, int64_t sample0, float p, const AttentionDims& d);

template <typename S>
void attention_backward(S* dqkv,        // (B, T, 3 * NH * HS) overwrite
                        const S* dout,  // (B, T, NH * HS)
                        const S* qkv,   // (B, T, 3 * NH * HS)
                        const S* att,   // from forward
                        const RngKey& key, int64_t sample0, float p, const AttentionDims& d);

}  // namespace lattice::cpu
