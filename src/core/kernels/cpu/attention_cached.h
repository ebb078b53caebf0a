// CPU causal attention for incremental decoding: the new positions' queries
// against a key/value cache (lattice sample; models/chunk_model.h KvCache).
//
// The cache of one layer is (B, capacity, 2 KV HS) for KV key/value heads
// (NH, or fewer for grouped queries): position p of sample b holds that
// position's keys (KV HS columns, head-major) and then its values. The call
// takes qkv (B, Tn, 3 C), C = NH * HS, of the Tn new positions pos0 .. pos0
// + Tn - 1 (q, k, v as attention_forward's; rotated already where the model
// rotates; with KV < NH, k and v repeated to the NH query heads, head h a
// copy of group h / (NH / KV), as repeat_kv leaves them), first writes their
// k and v into cache rows [pos0, pos0 + Tn) (one head per group: the cache
// of a grouped model is NH / KV times smaller), then computes for each
// (b, h) and new row t, with K, V the cache's heads of h's group,
//   out[t] = softmax(scale q_t K^T, keys j <= pos0 + t) V,  scale = 1 / sqrt(HS),
// over cache rows [0, pos0 + t]: the output attention_forward gives for row
// pos0 + t of the whole sequence (no dropout: evaluation only), up to the
// rounding of the products (other gemm shapes, another softmax loop; not
// bitwise). Rows go in blocks of 64, each block reading the keys up to its own
// last position; (b, h) pairs run over OpenMP threads with BLAS
// single-threaded inside. float or double.
#pragma once

#include <cstdint>

namespace lattice::cpu {

struct CachedAttentionDims {
  int64_t B, Tn, NH, HS;
  int64_t KV;        // key/value heads the cache holds; NH % KV == 0
  int64_t capacity;  // cache rows per sample
  int64_t pos0;      // position of qkv's row 0; pos0 + Tn <= capacity
};

template <typename T>
void attention_cached(T* out,        // (B, Tn, NH * HS) overwrite
                      T* cache,      // (B, capacity, 2 * KV * HS): rows [pos0, pos0 + Tn) written, [0, pos0) read
                      const T* qkv,  // (B, Tn, 3 * NH * HS)
                      const CachedAttentionDims& d);

}  // namespace lattice::cpu
