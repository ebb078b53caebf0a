// The CUDA element-wise kernels and reductions (declared in kernels.h):
// bias, GELU (tanh and erf), SwiGLU, add, scale, dropout, sum of squares, the
// non-finite check, AdamW and SGD. Grid-stride loops over int64 indices; the
// math itself is core/kernels/math.h and core/rng.h, the same code the CPU
// kernels run.
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/dtype.h"
#include "core/kernels/math.h"
#include "core/kernels/storage.h"

namespace lattice::cuda {

namespace {

template <typename S>
__global__ void add_bias_kernel(S* out, const float* bias, int64_t rows, int64_t cols) {
  int64_t n = rows * cols;
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = narrow<S>(widen(out[i]) + bias[i % cols]);
}

// Element-wise activations: Act::f is the function, Act::df its derivative.
struct GeluTanh {
  __device__ static float f(float x) { return math::gelu(x); }
  __device__ static float df(float x) { return math::gelu_grad(x); }
};
struct GeluErf {
  __device__ static float f(float x) { return math::gelu_erf(x); }
  __device__ static float df(float x) { return math::gelu_erf_grad(x); }
};

template <typename Act, typename S>
__global__ void activation_forward_kernel(S* out, const S* inp, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = narrow<S>(Act::f(widen(inp[i])));
}

template <typename Act, typename S>
__global__ void activation_backward_kernel(S* dinp, const S* dout, const S* inp, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    dinp[i] = narrow<S>(Act::df(widen(inp[i])) * widen(dout[i]));
}

template <typename Act, typename S>
void launch_activation(cudaStream_t stream, S* out, const S* inp, int64_t n) {
  if (n > 0) activation_forward_kernel<Act><<<blocks_for(n), kThreads, 0, stream>>>(out, inp, n);
}

template <typename Act, typename S>
void launch_activation_backward(cudaStream_t stream, S* dinp, const S* dout, const S* inp, int64_t n) {
  if (n > 0) activation_backward_kernel<Act><<<blocks_for(n), kThreads, 0, stream>>>(dinp, dout, inp, n);
}

template <typename S>
__global__ void swiglu_forward_kernel(S* out, const S* inp, int64_t N, int64_t F) {
  for (int64_t i = first_index(); i < N * F; i += grid_stride()) {
    const int64_t r = i / F, f = i % F;
    out[i] = narrow<S>(math::swiglu(widen(inp[r * 2 * F + f]), widen(inp[r * 2 * F + F + f])));
  }
}

template <typename S>
__global__ void swiglu_backward_kernel(S* dinp, const S* dout, const S* inp, int64_t N, int64_t F) {
  for (int64_t i = first_index(); i < N * F; i += grid_stride()) {
    const int64_t r = i / F, f = i % F, g = r * 2 * F + f;
    float dgate, dup;
    math::swiglu_grad(widen(dout[i]), widen(inp[g]), widen(inp[g + F]), dgate, dup);
    dinp[g] = narrow<S>(dgate);
    dinp[g + F] = narrow<S>(dup);
  }
}

template <typename S, typename A, typename B>
__global__ void add_kernel(S* out, const A* a, const B* b, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = narrow<S>(widen(a[i]) + widen(b[i]));
}

template <typename O, typename I>
__global__ void convert_kernel(O* out, const I* in, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = narrow<O>(widen(in[i]));
}

template <typename S>
__global__ void narrow_rows_kernel(S* out, S* gelu, const float* acc, const float* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const S v = narrow<S>(bias ? acc[i] + bias[i % cols] : acc[i]);
    out[i] = v;
    if (gelu) gelu[i] = narrow<S>(GeluTanh::f(widen(v)));
  }
}

template <typename S>
__global__ void scale_kernel(S* x, float s, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) x[i] = narrow<S>(widen(x[i]) * s);
}

__global__ void to_bf16_kernel(uint16_t* out, const float* in, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = lattice::f32_to_bf16(in[i]);
}

__global__ void to_f16_kernel(uint16_t* out, const float* in, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = lattice::f32_to_f16(in[i]);
}

__global__ void from_bf16_kernel(float* out, const uint16_t* in, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = lattice::bf16_to_f32(in[i]);
}

__global__ void from_f16_kernel(float* out, const uint16_t* in, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = lattice::f16_to_f32(in[i]);
}

// One thread per aligned group of four logical elements of a row: one Philox
// call gives the four uniforms (core/rng.h), as on the CPU path.
template <typename Store>
__global__ void dropout_kernel(Store* out, const Store* inp, RngKey key, int64_t sample0, float p, int64_t B,
                               int64_t S) {
  const int64_t groups = (S + 3) / 4;
  const float scale = 1.0f / (1.0f - p);
  for (int64_t g = first_index(); g < B * groups; g += grid_stride()) {
    const int64_t b = g / groups, s0 = (g % groups) * 4;
    const Philox4 bits = rng_bits(key, uint64_t(sample0 + b), uint64_t(s0));
    for (int64_t s = s0; s < s0 + 4 && s < S; ++s) {
      const int64_t i = b * S + s;
      out[i] = narrow<Store>(rng_keep_lane(bits, uint64_t(s), p) ? widen(inp[i]) * scale : 0.0f);
    }
  }
}

// Two-stage reductions of n floats with a fixed shape, so the order of every
// combination is fixed: stage one, kReduceBlocks blocks, each combining
// term(x[i]) over i = b * kThreads + t (mod the grid) and then over the block
// in a fixed tree; stage two, one block over the partials in order.
template <typename T, typename S, typename Term, typename Op>
__global__ void reduce_partial_kernel(T* partial, const S* x, int64_t n, Term term, Op op, T init) {
  T acc = init;
  for (int64_t i = first_index(); i < n; i += grid_stride()) acc = op(acc, term(widen(x[i])));
  acc = block_reduce(acc, op);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <typename T, typename Op>
__global__ void reduce_final_kernel(T* out, const T* partial, int n, Op op, T init) {
  T acc = init;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc = op(acc, partial[i]);
  acc = block_reduce(acc, op);
  if (threadIdx.x == 0) *out = acc;
}

template <typename T, typename S, typename Term, typename Op>
void launch_reduce(cudaStream_t stream, T* result, const S* x, int64_t n, void* workspace, Term term, Op op, T init) {
  T* partial = static_cast<T*>(workspace);
  reduce_partial_kernel<<<kReduceBlocks, kThreads, 0, stream>>>(partial, x, n, term, op, init);
  reduce_final_kernel<<<1, kThreads, 0, stream>>>(result, partial, kReduceBlocks, op, init);
}

// *out = op(*out, the reduction of partial): launch_reduce's last step, accumulating.
template <typename T, typename Op>
__global__ void reduce_final_into_kernel(T* out, const T* partial, int n, Op op, T init) {
  T acc = init;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc = op(acc, partial[i]);
  acc = block_reduce(acc, op);
  if (threadIdx.x == 0) *out = op(*out, acc);
}

struct PlainTerm {  // x in double
  __device__ double operator()(float v) const { return double(v); }
};
struct SquareTerm {  // x^2 in double
  __device__ double operator()(float v) const { return double(v) * double(v); }
};
struct NonfiniteTerm {  // 1 for NaN or +-inf
  __device__ int operator()(float v) const { return isfinite(v) ? 0 : 1; }
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWArgs s) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    float mi = m[i], vi = v[i];
    param[i] = math::adamw_step(param[i], grad[i] * s.grad_scale, mi, vi, s.lr, s.beta1, s.beta2, s.eps, s.weight_decay,
                                s.bias_correction1, s.bias_correction2);
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void sgd_kernel(float* param, const float* grad, float* momentum, int64_t n, SgdArgs s) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float g = grad[i] * s.grad_scale;
    if (momentum) {
      float buf = momentum[i];
      param[i] = math::sgd_momentum_step(param[i], g, buf, s.lr, s.momentum, s.weight_decay);
      momentum[i] = buf;
    } else {
      param[i] = math::sgd_step(param[i], g, s.lr, s.weight_decay);
    }
  }
}

}  // namespace

template <typename S>
void launch_add_bias(cudaStream_t stream, S* out, const float* bias, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(out, bias, rows, cols);
}

template <typename S>
void launch_bias_backward(cudaStream_t stream, float* dbias, const S* dout, int64_t rows, int64_t cols) {
  launch_column_sum(stream, dbias, rows, cols, RowTerm<S>{dout, cols});
}

template <typename S>
void launch_gelu_forward(cudaStream_t stream, S* out, const S* inp, int64_t n) {
  launch_activation<GeluTanh>(stream, out, inp, n);
}

template <typename S>
void launch_gelu_backward(cudaStream_t stream, S* dinp, const S* dout, const S* inp, int64_t n) {
  launch_activation_backward<GeluTanh>(stream, dinp, dout, inp, n);
}

template <typename S>
void launch_gelu_erf_forward(cudaStream_t stream, S* out, const S* inp, int64_t n) {
  launch_activation<GeluErf>(stream, out, inp, n);
}

template <typename S>
void launch_gelu_erf_backward(cudaStream_t stream, S* dinp, const S* dout, const S* inp, int64_t n) {
  launch_activation_backward<GeluErf>(stream, dinp, dout, inp, n);
}

template <typename S>
void launch_swiglu_forward(cudaStream_t stream, S* out, const S* inp, int64_t N, int64_t F) {
  if (N * F == 0) return;
  swiglu_forward_kernel<<<blocks_for(N * F), kThreads, 0, stream>>>(out, inp, N, F);
}

template <typename S>
void launch_swiglu_backward(cudaStream_t stream, S* dinp, const S* dout, const S* inp, int64_t N, int64_t F) {
  if (N * F == 0) return;
  swiglu_backward_kernel<<<blocks_for(N * F), kThreads, 0, stream>>>(dinp, dout, inp, N, F);
}

template <typename S, typename A, typename B>
void launch_add(cudaStream_t stream, S* out, const A* a, const B* b, int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, a, b, n);
}

template <typename O, typename I>
void launch_convert(cudaStream_t stream, O* out, const I* in, int64_t n) {
  if (n == 0) return;
  convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n);
}

template <typename S>
void launch_narrow_rows(cudaStream_t stream, S* out, S* gelu, const float* acc, const float* bias, int64_t rows,
                        int64_t cols) {
  if (rows * cols == 0) return;
  narrow_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(out, gelu, acc, bias, rows, cols);
}

template <typename S>
void launch_scale(cudaStream_t stream, S* x, float s, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, s, n);
}

void launch_to_bf16(cudaStream_t stream, uint16_t* out, const float* in, int64_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n);
}

void launch_to_f16(cudaStream_t stream, uint16_t* out, const float* in, int64_t n) {
  if (n == 0) return;
  to_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n);
}

void launch_from_bf16(cudaStream_t stream, float* out, const uint16_t* in, int64_t n) {
  if (n == 0) return;
  from_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n);
}

void launch_from_f16(cudaStream_t stream, float* out, const uint16_t* in, int64_t n) {
  if (n == 0) return;
  from_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, in, n);
}

template <typename Store>
void launch_dropout(cudaStream_t stream, Store* out, const Store* inp, const RngKey& key, int64_t sample0, float p,
                    int64_t B, int64_t S) {
  const int64_t groups = B * ((S + 3) / 4);
  if (groups == 0) return;
  dropout_kernel<<<blocks_for(groups), kThreads, 0, stream>>>(out, inp, key, sample0, p, B, S);
}

size_t reduce_workspace_bytes() { return kReduceBlocks * sizeof(double); }

template <typename S>
void launch_sum_squares(cudaStream_t stream, double* result, const S* x, int64_t n, void* workspace) {
  launch_reduce(stream, result, x, n, workspace, SquareTerm{}, SumOp{}, 0.0);
}

void launch_sum_into(cudaStream_t stream, double* acc, const float* x, int64_t n, void* workspace) {
  double* partial = static_cast<double*>(workspace);
  reduce_partial_kernel<<<kReduceBlocks, kThreads, 0, stream>>>(partial, x, n, PlainTerm{}, SumOp{}, 0.0);
  reduce_final_into_kernel<<<1, kThreads, 0, stream>>>(acc, partial, kReduceBlocks, SumOp{}, 0.0);
}

template <typename S>
void launch_any_nonfinite(cudaStream_t stream, int* result, const S* x, int64_t n, void* workspace) {
  launch_reduce(stream, result, x, n, workspace, NonfiniteTerm{}, MaxOp{}, 0);
}

// The activation storage types of the templated launchers (kernels.h).
#define LATTICE_INSTANTIATE(S)                                                                                  \
  template void launch_add<S>(cudaStream_t, S*, const S*, const S*, int64_t);                                   \
  template void launch_scale<S>(cudaStream_t, S*, float, int64_t);                                              \
  template void launch_dropout<S>(cudaStream_t, S*, const S*, const RngKey&, int64_t, float, int64_t, int64_t); \
  template void launch_sum_squares<S>(cudaStream_t, double*, const S*, int64_t, void*);                         \
  template void launch_any_nonfinite<S>(cudaStream_t, int*, const S*, int64_t, void*);                          \
  template void launch_add_bias<S>(cudaStream_t, S*, const float*, int64_t, int64_t);                           \
  template void launch_bias_backward<S>(cudaStream_t, float*, const S*, int64_t, int64_t);                      \
  template void launch_gelu_forward<S>(cudaStream_t, S*, const S*, int64_t);                                    \
  template void launch_gelu_backward<S>(cudaStream_t, S*, const S*, const S*, int64_t);                         \
  template void launch_gelu_erf_forward<S>(cudaStream_t, S*, const S*, int64_t);                                \
  template void launch_gelu_erf_backward<S>(cudaStream_t, S*, const S*, const S*, int64_t);                     \
  template void launch_swiglu_forward<S>(cudaStream_t, S*, const S*, int64_t, int64_t);                         \
  template void launch_swiglu_backward<S>(cudaStream_t, S*, const S*, const S*, int64_t, int64_t);
LATTICE_EACH_STORAGE(LATTICE_INSTANTIATE)
#undef LATTICE_INSTANTIATE

// 16-bit storage S beside fp32: mixed adds, conversions, matmul outputs.
#define LATTICE_INSTANTIATE(S)                                                                      \
  template void launch_add<S, S, float>(cudaStream_t, S*, const S*, const float*, int64_t);         \
  template void launch_add<S, float, S>(cudaStream_t, S*, const float*, const S*, int64_t);         \
  template void launch_add<S, float, float>(cudaStream_t, S*, const float*, const float*, int64_t); \
  template void launch_add<float, S, S>(cudaStream_t, float*, const S*, const S*, int64_t);         \
  template void launch_add<float, S, float>(cudaStream_t, float*, const S*, const float*, int64_t); \
  template void launch_add<float, float, S>(cudaStream_t, float*, const float*, const S*, int64_t); \
  template void launch_convert<S, float>(cudaStream_t, S*, const float*, int64_t);                  \
  template void launch_convert<float, S>(cudaStream_t, float*, const S*, int64_t);                  \
  template void launch_narrow_rows<S>(cudaStream_t, S*, S*, const float*, const float*, int64_t, int64_t);
LATTICE_INSTANTIATE(Bf16)
LATTICE_INSTANTIATE(F16)
#undef LATTICE_INSTANTIATE
template void launch_convert<Bf16, F16>(cudaStream_t, Bf16*, const F16*, int64_t);
template void launch_convert<F16, Bf16>(cudaStream_t, F16*, const Bf16*, int64_t);

void launch_adamw(cudaStream_t stream, float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWArgs& args) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, m, v, n, args);
}

void launch_sgd(cudaStream_t stream, float* param, const float* grad, float* momentum, int64_t n, const SgdArgs& args) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, momentum, n, args);
}

}  // namespace lattice::cuda
