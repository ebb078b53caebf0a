// Multi-head self-attention on CUDA, the plain (materialised) path: the same
// math, saved state and dropout masks as the CPU kernels
// (core/kernels/cpu/attention.h for causal, attention_masked.h for the
// bidirectional key-padding mask), so the CPU and GPU runs of one layout are
// the same computation. It is the fallback for shapes cuDNN's fused attention
// does not take, and the reference the fused path is tested against.
//
// Per (sample b, head h), q, k, v are (T, HS) slices of qkv (row stride 3C,
// C = NH * HS), scale = 1 / sqrt(HS):
//   S = scale q k^T;  P = softmax over the allowed keys of each row (causal:
//   j <= i; key mask: key_mask[b, j] != 0; a row with none is all zero);
//   Pd = dropout(P);  out = Pd v.
// Backward: dV = Pd^T dO, dPd = dO v^T, dP = dropout(dPd) (same mask),
//   dS = P (dP - rowsum(P dP)), dQ = scale dS k, dK = scale dS^T q.
// Masked entries of P are zero, so backward needs no mask.
//
// The products are cuBLAS strided-batched gemms over the heads of one
// sample, with fp32 compute (no TF32); the softmax, its backward and the
// dropout are one kernel each, one thread block per row (deterministic: no
// atomics). Dropout element (i, j) of head h is rng_keep(key, sample0 + b,
// ((head_offset + h) T + i) T + j, p), as on the CPU.
//
// Storage S (float, Bf16 or F16 of core/kernels/storage.h): every
// activation (qkv, out, att, dout, dqkv, scratch) of that type. float: fp32
// sgemms, the row kernels in place on att and scratch. 16-bit: the products
// are cublasGemmStridedBatchedEx with 16-bit operands and fp32 compute; a
// product that feeds a row kernel (scores, dP) lands in fp32 in `work`, the
// row kernel computes in fp32 and stores P (or dS) rounded to S; the
// products that make out and dqkv land in fp32 in `work` too and are
// rounded to nearest even once (the conversion kernels of kernels.h), as on
// the CPU. With dropout, forward drops the fp32 P, backward the stored P
// widened, both rounded to S: the values the CPU's 16-bit products see.
// Samples run one after another, so `work` holds one sample.
//
// Memory: att (B, NH, T, T) saved by forward (P before dropout); backward's
// scratch (B, NH, T, T) holds dS on return (for a compact state the backend
// calls these one sample at a time, on (NH, T, T) temporaries of its own:
// backend_attention.cpp); `work` (attention_work_bytes,
// the backend keeps it): one sample's dropped probabilities (NH, T, T) of S
// when p > 0, and for 16-bit S one sample's fp32 scores or dP (NH, T, T)
// and its fp32 out or dqkv (T, 3C).
//
// Invariants: device pointers of the current device; only enqueues on
// `stream` (the caller checks the launch and synchronizes); dqkv is
// overwritten.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/backend.h"
#include "core/kernels/storage.h"

namespace lattice::cuda {

using AttentionArgs = CudaAttentionArgs;  // core/backend.h

// One line for arguments the kernels cannot take (empty shape, p outside
// [0, 1), a key mask with causal attention, more rows than a grid holds).
// Touches no device: callers run it before any CUDA call.
void check_attention(const AttentionArgs& a);
// Bytes of `work` a call on storage S needs (0: none).
template <typename S>
size_t attention_work_bytes(const AttentionArgs& a);
// out (B, T, C), or null: att alone (no dropout, no P @ V: the
// probabilities computed again for backward); att (B, NH, T, T) saved;
// qkv (B, T, 3C).
template <typename S>
void attention_forward(cublasHandle_t blas, cudaStream_t stream, S* out, S* att, void* work, const S* qkv,
                       const AttentionArgs& a);
// dqkv (B, T, 3C) overwritten; scratch (B, NH, T, T) holds dS on return.
template <typename S>
void attention_backward(cublasHandle_t blas, cudaStream_t stream, S* dqkv, S* scratch, void* work, const S* dout,
                        const S* qkv, const S* att, const AttentionArgs& a);

// The row kernels (attention_kernels.cu), one block per row, over rows
// [row0, row0 + rows) of the (B, NH, T, T) probabilities; each pointer points
// at row row0 of its buffer.
// s: fp32 scores in, fp32 probabilities out; p: the probabilities rounded to
// S (for float, p is s).
template <typename S>
void launch_masked_softmax_rows(cudaStream_t stream, float* s, S* p, const AttentionArgs& a, int64_t row0,
                                int64_t rows);
// dropped = dropout(P) rounded to D; P fp32 or S.
template <typename D, typename P>
void launch_dropout_rows(cudaStream_t stream, D* dropped, const P* probs, const AttentionArgs& a, int64_t row0,
                         int64_t rows);
// ds: dPd in, dS = P (dP - rowsum(P dP)) out, fp32; ds_out: dS rounded to S
// (for float, ds_out is ds). P (S) read widened.
template <typename S>
void launch_softmax_backward_rows(cudaStream_t stream, float* ds, S* ds_out, const S* P, const AttentionArgs& a,
                                  int64_t row0, int64_t rows);

}  // namespace lattice::cuda
