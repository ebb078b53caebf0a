// Shared helpers of the op dispatch layer (ops.cpp, ops_nn.cpp); not a
// public header.
#pragma once

#include <initializer_list>
#include <string>

#include "core/error.h"
#include "core/kernels/storage.h"
#include "core/tensor.h"

namespace lattice::ops::detail {

inline std::string desc(const Tensor& t) {
  return fmt::format("{} {} on {}", shape_str(t.shape()), dtype_name(t.dtype()), t.device().str());
}

[[noreturn]] inline void no_kernel(const char* op, const Tensor& t) {
  if (t.device().is_cuda())
    LATTICE_FAIL("ops::{}: no CUDA kernel yet ({} on {})", op, dtype_name(t.dtype()), t.device().str());
  LATTICE_FAIL("ops::{}: no CPU kernel for {} (CPU kernels take f32 and f64)", op, dtype_name(t.dtype()));
}

// Every tensor is defined and shares the dtype and device of the first.
inline void check_same(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = *ts.begin();
  for (const Tensor* t : ts) {
    LATTICE_CHECK(t->defined(), "ops::{}: an argument tensor is undefined", op);
    LATTICE_CHECK(t->dtype() == first->dtype() && t->device() == first->device(), "ops::{}: mixed tensors {} and {}",
                  op, desc(*first), desc(*t));
  }
}

inline void check_ids(const char* op, const Tensor& ids, const Tensor& like) {
  LATTICE_CHECK(ids.defined() && ids.dtype() == DType::i32, "ops::{}: ids/targets must be i32, got {}", op,
                ids.defined() ? desc(ids) : "undefined");
  LATTICE_CHECK(ids.device() == like.device(), "ops::{}: ids on {} but data on {}", op, ids.device().str(),
                like.device().str());
}

// Rows and columns of the (N, C) folding of t (C = the last dim).
struct Rows {
  int64_t n, c;
};
inline Rows rows_of(const Tensor& t) {
  int64_t c = t.ndim() ? t.dim(-1) : 1;
  return {c ? t.numel() / c : 0, c};
}

// Calls f(T{}) with T = float or double for a CPU tensor; otherwise fails.
template <typename F>
auto on_cpu(const char* op, const Tensor& t, F&& f) -> decltype(f(float{})) {
  if (t.device().is_cpu()) {
    if (t.dtype() == DType::f32) return f(float{});
    if (t.dtype() == DType::f64) return f(double{});
  }
  no_kernel(op, t);
}

// Calls f(S{}) with S = float, double, Bf16 or F16 for a CPU tensor: the ops
// whose kernels also take 16-bit activation storage (core/kernels/storage.h).
template <typename F>
auto on_cpu_act(const char* op, const Tensor& t, F&& f) -> decltype(f(float{})) {
  if (t.device().is_cpu()) {
    switch (t.dtype()) {
      case DType::f32:
        return f(float{});
      case DType::f64:
        return f(double{});
      case DType::bf16:
        return f(Bf16{});
      case DType::f16:
        return f(F16{});
      default:
        break;
    }
    LATTICE_FAIL("ops::{}: no CPU kernel for {} (activations are f32, f64, bf16 or f16)", op, dtype_name(t.dtype()));
  }
  no_kernel(op, t);
}

// Calls f(Bf16{}) or f(F16{}) for the 16-bit dtype `t`; fails otherwise.
template <typename F>
auto with_16bit(const char* op, DType t, F&& f) -> decltype(f(Bf16{})) {
  if (t == DType::bf16) return f(Bf16{});
  LATTICE_CHECK(t == DType::f16, "ops::{}: {} is not a 16-bit activation type (bf16 or f16)", op, dtype_name(t));
  return f(F16{});
}
inline bool cuda_f32(const Tensor& t) { return t.device().is_cuda() && t.dtype() == DType::f32; }
// A CUDA tensor of 16-bit activations (the backend's *16 kernels).
inline bool cuda_16(const Tensor& t) { return t.device().is_cuda() && is_16bit(t.dtype()); }
template <typename S>
S* sp(const Tensor& t) {
  return static_cast<S*>(t.raw());
}

// Every tensor of `ts` is defined, on the device of `act`, and of
// master_dtype(act.dtype()).
inline void check_master(const char* op, const Tensor& act, std::initializer_list<const Tensor*> ts) {
  const DType want = master_dtype(act.dtype());
  for (const Tensor* t : ts) {
    LATTICE_CHECK(t->defined(), "ops::{}: an argument tensor is undefined", op);
    LATTICE_CHECK(t->dtype() == want && t->device() == act.device(),
                  "ops::{}: parameters, their gradients and saved statistics must be {} on {} beside {} "
                  "activations, got {}",
                  op, dtype_name(want), act.device().str(), dtype_name(act.dtype()), desc(*t));
  }
}
inline float* fp(const Tensor& t) { return static_cast<float*>(t.raw()); }
// i32 ids or targets on any device (Tensor::data is host-only).
inline const int32_t* ip(const Tensor& t) { return static_cast<const int32_t*>(t.raw()); }
template <typename T>
T* ptr(const Tensor* t) {
  return t ? t->data<T>() : nullptr;
}

}  // namespace lattice::ops::detail
