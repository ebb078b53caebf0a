// The first-use check behind 16-bit matmul outputs written by cuBLAS
// (CudaBackend::half_outputs_direct), as plain C++ with no CUDA header, so
// the CPU tests check its inputs (tests/core/cuda/test_half_out_probe.cpp).
//
// A 16-bit matmul output is Lattice's rounding of the fp32 sum: round to
// nearest even, overflow to infinity, subnormals kept (dtype.h's f32_to_bf16
// and f32_to_f16, the bits of the CPU path and of the narrow_rows kernel).
// cuBLAS can write a bf16 or f16 C itself (cublasGemmEx with a 16-bit Ctype,
// CUBLAS_COMPUTE_32F), which saves the fp32 scratch, its write and read and
// one kernel per matmul, but its documentation does not say how it rounds.
// So the backend runs this product once per device and type through cuBLAS
// with a 16-bit C and compares every bit with `expected`; only if all agree
// does it let cuBLAS round. The probe's k is tiny; at a model's k cuBLAS may
// split the sum, and the handle's CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_
// REDUCTION (backend.cpp) keeps those partial sums in fp32 until the one
// rounding.
//
// The product is exact in fp32 whatever order the GEMM sums in: k = 2, every
// input exactly representable in the 16-bit type, and each row's two terms
// close enough in magnitude that their sum fits fp32's 24-bit significand. So
// the fp32 values are fixed, and the comparison tests only the rounding:
//  - values that need no rounding, and ones just above or below a half-ulp;
//  - ties, which round to the even neighbour both down and up;
//  - negative values;
//  - f16: a sum above 65504 that must round to infinity (not saturate), and
//    subnormal outputs, which must not be flushed to zero.
// Row-major: C (m, n) = A (m, k) B (k, n).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace lattice::cuda {

struct HalfOutProbe {
  int64_t m = 0, n = 0, k = 0;
  std::vector<float> a, b;         // the inputs' values, each exact in the 16-bit type
  std::vector<uint16_t> a16, b16;  // their bits
  std::vector<float> sums;         // C in fp32: exact
  std::vector<uint16_t> expected;  // C's bits, rounded as Lattice rounds
};

// The probe for bf16 (`bf16`) or f16.
inline HalfOutProbe make_half_out_probe(bool bf16) {
  const auto to16 = [bf16](float v) { return bf16 ? f32_to_bf16(v) : f32_to_f16(v); };
  // Row r of A: a first term and a second; row 0 of B is ones and row 1
  // 2^-e for these e, so C[r][j] = A[r][0] + A[r][1] * 2^-e[j].
  const int e[] = {0, 7, 8, 9, 10, 11, 12, 16};
  const float ulp = bf16 ? 0x1p-7f : 0x1p-10f;  // of the type at 1
  const float rows[][2] = {
      {1.0f, 1.0f},                         // 1 + 2^-e: ties at the half-ulp round down to even
      {1.0f + ulp, 1.0f},                   // odd last bit: ties round up to even
      {1.0f + ulp, 1.25f},                  // just above a half-ulp
      {1.0f + 0x1p-7f, -3.0f},              // below, and ties down
      {-(1.0f + 0x1p-6f + 0x1p-7f), 3.0f},  // negative
      {57344.0f, 57344.0f},                 // f16: 114688 overflows to infinity
      {0x1p-20f, 0x1p-21f},                 // f16: subnormal sums
      {0.75f, -(1.0f + 0x1p-7f)},           // a cancelling sum
  };
  HalfOutProbe p;
  p.m = int64_t(sizeof(rows) / sizeof(rows[0]));
  p.n = int64_t(sizeof(e) / sizeof(e[0]));
  p.k = 2;
  for (const auto& r : rows)
    for (float v : r) p.a.push_back(v);
  for (int64_t j = 0; j < p.n; ++j) p.b.push_back(1.0f);
  for (int64_t j = 0; j < p.n; ++j) p.b.push_back(std::ldexp(1.0f, -e[j]));
  for (float v : p.a) p.a16.push_back(to16(v));
  for (float v : p.b) p.b16.push_back(to16(v));
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const double s =
          double(p.a[size_t(i * 2)]) * p.b[size_t(j)] + double(p.a[size_t(i * 2 + 1)]) * p.b[size_t(p.n + j)];
      p.sums.push_back(float(s));
      p.expected.push_back(to16(float(s)));
    }
  return p;
}

}  // namespace lattice::cuda
