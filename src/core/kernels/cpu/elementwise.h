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

// out (n) = a (n) + b (n); out may alias a or b.
template <typename T>
void add(T* out, const T* a, const T* b, int64_t n);

// acc (n) += x (n)
template <typename T>
void add_inplace(T* acc, const T* x, int64_t n);

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
