// CPU element-wise kernels and reductions (float and double; Bf16 and F16
// activation storage with float math, core/kernels/storage.h).
//
// Raw-pointer kernels in llm.c style: outputs first, then inputs, then sizes.
// `n` is the element count; every buffer is contiguous. Reductions use a fixed
// chunking that does not depend on the thread count, so their results are
// bitwise reproducible on any number of threads.
#pragma once

#include <cstdint>

namespace lattice::cpu {

// out (n) = a (n) + b (n); out may alias a or b. Mixed storage (instantiated
// for float with Bf16 or F16): out = narrow<T>(widen(a) + widen(b)), one fp32
// add rounded once: e.g. an fp32 position table added into 16-bit rows, or
// 16-bit row gradients accumulated into an fp32 table gradient.
template <typename T, typename A = T, typename B = T>
void add(T* out, const A* a, const B* b, int64_t n);

// acc (n) += x (n) (mixed storage: add with out = a = acc).
template <typename T>
void add_inplace(T* acc, const T* x, int64_t n);

// out (n) = in (n) in out's storage: f32 to bf16/f16 rounds to nearest even
// (dtype.h; fp16 beyond 65504 is inf), bf16/f16 to f32 is exact, bf16 <-> f16
// goes through f32. Instantiated for the distinct pairs of float, Bf16, F16.
template <typename O, typename I>
void convert(O* out, const I* in, int64_t n);

// x (n) *= s
template <typename T>
void scale_inplace(T* x, double s, int64_t n);

// sum of x (n) squared, accumulated in double.
template <typename T>
double sum_squares(const T* x, int64_t n);

// true when no element of x (n) is NaN or infinite.
template <typename T>
bool all_finite(const T* x, int64_t n);

}  // namespace lattice::cpu
