// Launchers for the CUDA element-wise kernels (kernels.cu), called by the
// backend (backend.cpp). Plain C++ declarations so the host side compiles
// with the C++ compiler; only kernels.cu goes through nvcc.
//
// Invariants: f32 only; every pointer is a device pointer of the current
// device; the launchers only enqueue on `stream` (n == 0 launches nothing);
// the caller checks the launch (cudaGetLastError) and synchronizes, so this
// file and kernels.cu need no error machinery. The per-element math is core/kernels/math.h, shared
// with the CPU kernels. Parameter gradients accumulate (+=), activation
// gradients overwrite (=).
//
// Shapes: rows = N (folded leading dims), cols = C (last dim), n = numel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace lattice::cuda {

// out (N, C) += bias (C), broadcast over rows.
void launch_add_bias(cudaStream_t stream, float* out, const float* bias, int64_t rows, int64_t cols);
// dbias (C) += column sums of dout (N, C); deterministic (no atomics).
void launch_bias_backward(cudaStream_t stream, float* dbias, const float* dout, int64_t rows, int64_t cols);

// out (n) = gelu(inp), tanh approximation.
void launch_gelu_forward(cudaStream_t stream, float* out, const float* inp, int64_t n);
// dinp (n) = dout * gelu'(inp)   (overwrite)
void launch_gelu_backward(cudaStream_t stream, float* dinp, const float* dout, const float* inp, int64_t n);

// out (n) = a + b; out may alias a or b.
void launch_add(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n);

// One AdamW step on n elements: g = grad * grad_scale, then
// math::adamw_step(param, g, m, v, ...) with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t.
struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale;
};
void launch_adamw(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args);

}  // namespace lattice::cuda
