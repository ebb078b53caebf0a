// Storage types of activation tensors, shared by the CPU and CUDA kernels.
//
// A kernel templated on its storage type S reads every activation element
// through widen() and writes it through narrow<S>(), and does all arithmetic
// in compute_t<S>: double for double, float for float, bf16 and f16. So one
// kernel body serves the f32/f64 paths (widen and narrow are the identity
// there, the generated code is unchanged) and the 16-bit activation paths of
// runtime.precision bf16|fp16 (load 16-bit, compute in fp32, round to nearest
// even on store, through the converters of core/dtype.h).
//
// Parameters, parameter gradients and saved statistics (norm mean/rstd, loss
// lse) are never 16-bit: kernels take them as compute_t<S>.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/hd.h"

namespace lattice {

// The bits of one bf16 / IEEE fp16 value; distinct types so that overloads
// and templates tell them apart (both are uint16_t underneath).
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

template <typename S>
struct StorageTraits {  // float and double: their own compute type
  using Compute = S;
};
template <>
struct StorageTraits<Bf16> {
  using Compute = float;
};
template <>
struct StorageTraits<F16> {
  using Compute = float;
};
template <typename S>
using compute_t = typename StorageTraits<S>::Compute;

// Every storage type the CPU kernels are instantiated for, as X(type) in
// turn: LATTICE_CPU_STORAGES(LATTICE_INSTANTIATE) in their .cpp files (the
// CUDA kernels' list, without double, is cuda/kernels.h LATTICE_EACH_STORAGE).
#define LATTICE_CPU_STORAGES(X) X(float) X(double) X(Bf16) X(F16)

// The DType of storage type S (float, double, Bf16, F16).
template <typename S>
inline constexpr DType storage_dtype = std::is_same_v<S, Bf16>     ? DType::bf16
                                       : std::is_same_v<S, F16>    ? DType::f16
                                       : std::is_same_v<S, double> ? DType::f64
                                                                   : DType::f32;

LATTICE_HD float widen(float x) { return x; }
LATTICE_HD double widen(double x) { return x; }
LATTICE_HD float widen(Bf16 x) { return bf16_to_f32(x.bits); }
LATTICE_HD float widen(F16 x) { return f16_to_f32(x.bits); }

// compute_t<S> -> S, round to nearest even for the 16-bit types (fp16
// overflows to inf beyond 65504).
template <typename S>
LATTICE_HD S narrow(compute_t<S> v) {
  return v;
}
template <>
LATTICE_HD Bf16 narrow<Bf16>(float v) {
  return Bf16{f32_to_bf16(v)};
}
template <>
LATTICE_HD F16 narrow<F16>(float v) {
  return F16{f32_to_f16(v)};
}

}  // namespace lattice
