// One operand of a float matmul, for both backends (cpu::gemm in
// core/kernels/cpu/matmul.h, CudaBackend::gemm in core/backend.h): fp32 values
// (a pointer converts implicitly), which a 16-bit matmul rounds on every call,
// or values already in the matmul's 16-bit type (raw bf16 or f16 bits: a
// parameter's shadow, core/param.h), read as they are. Rounding the same fp32
// value always gives the same bits, so the two give the same product. A
// 16-bit operand needs the matmuls to run in its type (runtime.precision);
// cpu::check_matmul_operand says so otherwise.
//
// Plain data, no error machinery: the header is compiled by nvcc too.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lattice {

struct MatmulOperand {
  MatmulOperand(const float* p) : data(p) {}  // NOLINT(google-explicit-constructor): fp32 is the usual case
  MatmulOperand(const void* p, DType t) : data(p), dtype(t) {}
  const void* data = nullptr;
  DType dtype = DType::f32;  // f32, bf16 or f16
};

// x advanced by `elems` of its elements (a block of rows or columns).
inline MatmulOperand shifted(const MatmulOperand& x, int64_t elems) {
  const int64_t bytes = elems * (x.dtype == DType::f32 ? 4 : 2);
  return {static_cast<const char*>(x.data) + bytes, x.dtype};
}

}  // namespace lattice
