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
// The products are cuBLAS strided-batched sgemms over the heads of one
// sample (plain fp32, no TF32); the softmax, its backward and the dropout are
// one kernel each, one thread block per row (deterministic: no atomics).
// Dropout element (i, j) of head h is rng_keep(key, sample0 + b,
// ((head_offset + h) T + i) T + j, p), as on the CPU.
//
// Memory: att (B, NH, T, T) saved by forward (P before dropout); backward's
// scratch (B, NH, T, T) holds dS on return; with dropout both passes need
// `dropped`, one more (B, NH, T, T) buffer (the backend keeps it).
//
// Invariants: f32; device pointers of the current device; only enqueues on
// `stream` (the caller checks the launch and synchronizes); dqkv is
// overwritten.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend.h"

namespace lattice::cuda {

using AttentionArgs = CudaAttentionArgs;  // core/backend.h

// One line for arguments the kernels cannot take (empty shape, p outside
// [0, 1), a key mask with causal attention, more rows than a grid holds).
// Touches no device: callers run it before any CUDA call.
void check_attention(const AttentionArgs& a);
// out (B, T, C); att (B, NH, T, T) saved; dropped (B, NH, T, T) or null when p == 0.
void attention_forward(cublasHandle_t blas, cudaStream_t stream, float* out, float* att, float* dropped,
                       const float* qkv, const AttentionArgs& a);
// dqkv (B, T, 3C) overwritten; scratch (B, NH, T, T) holds dS on return;
// dropped as in forward (recomputed here, not carried over).
void attention_backward(cublasHandle_t blas, cudaStream_t stream, float* dqkv, float* scratch, float* dropped,
                        const float* dout, const float* qkv, const float* att, const AttentionArgs& a);

// The row kernels (attention_kernels.cu), one block per row of (B, NH, T, T):
// masked softmax of scores in place; dropped = dropout(P); dPd -> dS in place.
void launch_masked_softmax_rows(cudaStream_t stream, float* s, const AttentionArgs& a);
void launch_dropout_rows(cudaStream_t stream, float* dropped, const float* P, const AttentionArgs& a);
void launch_softmax_backward_rows(cudaStream_t stream, float* ds, const float* P, const AttentionArgs& a);

}  // namespace lattice::cuda
