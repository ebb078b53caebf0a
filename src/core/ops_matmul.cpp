// The matmul ops of core/ops.h (gemm, the linear layers and the bias ops):
// check shapes, dtypes and devices, then call the CPU kernels (matmul.h for
// f32/f64 and fp32 products of 16-bit operands, matmul16.h for 16-bit
// outputs, bias.h) or the CUDA backend. The dtype rules are ops.h's.
#include <algorithm>
#include <type_traits>

#include "core/backend.h"
#include "core/kernels/cpu/bias.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul16.h"
#include "core/ops.h"
#include "core/ops_internal.h"

namespace lattice::ops {

using namespace detail;

namespace {

// The type the matmuls on `device` run in (runtime.precision).
DType matmul_dtype_on(Device device) { return device.is_cuda() ? cuda_backend().matmul_dtype() : cpu::matmul_dtype(); }

const char* precision_of(DType half) { return half == DType::bf16 ? "bf16" : "fp16"; }

// 16-bit activations need the matmuls on their device to run in their type.
void check_act16(const char* op, const Tensor& act) {
  const DType matmuls = matmul_dtype_on(act.device());
  LATTICE_CHECK(act.dtype() == matmuls,
                "ops::{}: {} activations need the matmuls on {} to run in {} (runtime.precision {}), but they run "
                "in {}",
                op, dtype_name(act.dtype()), act.device().str(), dtype_name(act.dtype()), precision_of(act.dtype()),
                dtype_name(matmuls));
}

// A matmul operand `name` of a product into (or with activations) `like`:
// like's dtype; f32 beside 16-bit activations (rounded on the call); or, for
// an f32 product, the 16-bit type the matmuls on that device run in (a
// parameter's 16-bit shadow, core/param.h).
void check_operand(const char* op, const char* name, const Tensor& x, const Tensor& like) {
  LATTICE_CHECK(x.defined(), "ops::{}: {} is undefined", op, name);
  const bool half = is_16bit(x.dtype());
  const bool ok = x.dtype() == like.dtype() || (half && like.dtype() == DType::f32) ||
                  (x.dtype() == DType::f32 && is_16bit(like.dtype()));
  LATTICE_CHECK(x.device() == like.device() && ok, "ops::{}: mixed tensors {} and {} {}", op, desc(like), name,
                desc(x));
  if (!half) return;
  const DType matmuls = matmul_dtype_on(x.device());
  LATTICE_CHECK(x.dtype() == matmuls,
                "ops::{}: {} {} is a 16-bit copy, but the matmuls on {} run in {}: a {} operand needs "
                "runtime.precision {}",
                op, name, desc(x), x.device().str(), dtype_name(matmuls), dtype_name(x.dtype()),
                precision_of(x.dtype()));
}

// An activation output beside 16-bit activations `act`: act's dtype, or f32
// (a tensor-parallel partial sum, all-reduced in fp32 before it is rounded).
void check_out16(const char* op, const char* name, const Tensor& out, const Tensor& act) {
  LATTICE_CHECK(out.defined(), "ops::{}: {} is undefined", op, name);
  LATTICE_CHECK(out.device() == act.device() && (out.dtype() == act.dtype() || out.dtype() == DType::f32),
                "ops::{}: {} must be {} or f32 on {} beside {} activations, got {}", op, name, dtype_name(act.dtype()),
                act.device().str(), dtype_name(act.dtype()), desc(out));
}

MatmulOperand operand(const Tensor& t) { return {t.raw(), t.dtype()}; }

}  // namespace

void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  check_same("gemm", {&c});
  if (is_16bit(c.dtype())) check_act16("gemm", c);
  check_operand("gemm", "a", a, c);
  check_operand("gemm", "b", b, c);
  LATTICE_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "ops::gemm: needs 2-D tensors, got a {} b {} c {}",
                shape_str(a.shape()), shape_str(b.shape()), shape_str(c.shape()));
  int64_t m = trans_a ? a.dim(1) : a.dim(0), k = trans_a ? a.dim(0) : a.dim(1);
  int64_t kb = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
  LATTICE_CHECK(k == kb && c.dim(0) == m && c.dim(1) == n, "ops::gemm: op(a) {}{} times op(b) {}{} does not give c {}",
                shape_str(a.shape()), trans_a ? "^T" : "", shape_str(b.shape()), trans_b ? "^T" : "",
                shape_str(c.shape()));
  const int dev = c.device().index;
  if (cuda_f32(c))
    return cuda_backend().gemm(dev, trans_a, trans_b, m, n, k, alpha, operand(a), operand(b), beta, fp(c));
  if (cuda_16(c))
    return cuda_backend().gemm16(dev, c.dtype(), trans_a, trans_b, m, n, k, alpha, operand(a), operand(b), beta,
                                 c.raw());
  on_cpu_act("gemm", c, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>)  // packed: each row stride is the stored width
      cpu::gemm(trans_a, trans_b, m, n, k, alpha, operand(a), std::max<int64_t>(1, a.dim(1)), operand(b),
                std::max<int64_t>(1, b.dim(1)), beta, c.data<float>(), std::max<int64_t>(1, n));
    else if constexpr (std::is_same_v<T, double>)
      cpu::gemm<T>(trans_a, trans_b, m, n, k, T(alpha), a.data<T>(), b.data<T>(), T(beta), c.data<T>());
    else
      cpu::gemm16<T>(trans_a, trans_b, m, n, k, alpha, operand(a), operand(b), beta, sp<T>(c));
  });
}

namespace {
// (N, C, OC) of a linear layer, checked.
struct LinearDims {
  int64_t N, C, OC;
};
LinearDims linear_dims(const char* op, const Tensor& out, const Tensor& inp, const Tensor& weight) {
  LATTICE_CHECK(weight.ndim() == 2, "ops::{}: weight must be (OC, C), got {}", op, shape_str(weight.shape()));
  int64_t OC = weight.dim(0), C = weight.dim(1);
  Rows r = rows_of(inp);
  LATTICE_CHECK(r.c == C && out.numel() == r.n * OC && rows_of(out).c == OC,
                "ops::{}: inp {} and weight {} (OC, C) need out (N, OC), got out {}", op, shape_str(inp.shape()),
                shape_str(weight.shape()), shape_str(out.shape()));
  return {r.n, C, OC};
}

// linear_forward's checks (out, inp, weight and bias), shared with linear_gelu_forward.
LinearDims check_linear_forward(const char* op, const Tensor& out, const Tensor& inp, const Tensor& weight,
                                const Tensor* bias) {
  if (is_16bit(inp.dtype())) {
    check_same(op, {&inp});
    check_act16(op, inp);
    check_out16(op, "out", out, inp);
    check_operand(op, "weight", weight, inp);
    if (bias) check_master(op, inp, {bias});
  } else {
    check_same(op, {&out, &inp});
    check_operand(op, "weight", weight, out);
    if (bias) check_same(op, {&out, bias});
  }
  LinearDims d = linear_dims(op, out, inp, weight);
  if (bias) LATTICE_CHECK(bias->numel() == d.OC, "ops::{}: bias {} for OC = {}", op, shape_str(bias->shape()), d.OC);
  return d;
}

// An fp32 bias beside 16-bit activations, or null.
const float* bias16(const Tensor* bias) { return bias ? fp(*bias) : nullptr; }
}  // namespace

void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  LinearDims d = check_linear_forward("linear_forward", out, inp, weight, bias);
  if (is_16bit(inp.dtype())) {
    if (inp.device().is_cuda())
      return cuda_backend().linear_forward16(inp.device().index, inp.dtype(), out.raw(), out.dtype(), inp.raw(),
                                             operand(weight), bias16(bias), d.N, d.C, d.OC);
    return with_16bit("linear_forward", inp.dtype(), [&](auto s) {
      using S = decltype(s);
      if (out.dtype() == DType::f32)
        cpu::linear_forward(fp(out), operand(inp), operand(weight), bias16(bias), d.N, d.C, d.OC);
      else
        cpu::linear_forward16<S>(sp<S>(out), sp<S>(inp), operand(weight), bias16(bias), d.N, d.C, d.OC);
    });
  }
  if (cuda_f32(out))
    return cuda_backend().linear_forward(out.device().index, fp(out), fp(inp), operand(weight), bias16(bias), d.N, d.C,
                                         d.OC);
  on_cpu("linear_forward", out, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>)
      cpu::linear_forward(out.data<float>(), inp.data<float>(), operand(weight), ptr<float>(bias), d.N, d.C, d.OC);
    else
      cpu::linear_forward<T>(out.data<T>(), inp.data<T>(), weight.data<T>(), ptr<T>(bias), d.N, d.C, d.OC);
  });
}

void linear_gelu_forward(Tensor& act, Tensor& pre, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  check_same("linear_gelu_forward", {&act, &pre, &inp});
  LATTICE_CHECK(act.numel() == pre.numel(), "ops::linear_gelu_forward: act {} for pre {}", shape_str(act.shape()),
                shape_str(pre.shape()));
  if (cuda_f32(pre) || cuda_16(pre)) {
    LinearDims d = check_linear_forward("linear_gelu_forward", pre, inp, weight, bias);
    const int dev = pre.device().index;
    if (cuda_16(pre))
      return cuda_backend().linear_gelu_forward16(dev, pre.dtype(), act.raw(), pre.raw(), inp.raw(), operand(weight),
                                                  bias16(bias), d.N, d.C, d.OC);
    return cuda_backend().linear_gelu_forward(dev, fp(act), fp(pre), fp(inp), operand(weight), bias16(bias), d.N, d.C,
                                              d.OC);
  }
  linear_forward(pre, inp, weight, bias);  // on the CPU, 16-bit too: these bits, by definition
  gelu_forward(act, pre);
}

namespace {
// linear_backward's gradient checks: beside 16-bit dout, dinp is dout's type
// or f32 and the parameter gradients f32; else all share dout's dtype.
void check_linear_grads(const char* op, const Tensor* dinp, const Tensor* dweight, const Tensor* dbias,
                        const Tensor& dout, const Tensor& inp, const Tensor& weight, int64_t OC) {
  const bool act16 = is_16bit(dout.dtype());
  if (dinp) {
    if (act16)
      check_out16(op, "dinp", *dinp, dout);
    else
      check_same(op, {&dout, dinp});
    LATTICE_CHECK(dinp->numel() == inp.numel(), "ops::{}: dinp {} for inp {}", op, shape_str(dinp->shape()),
                  shape_str(inp.shape()));
  }
  for (const Tensor* g : {dweight, dbias}) {
    if (!g) continue;
    if (act16)
      check_master(op, dout, {g});
    else
      check_same(op, {&dout, g});
  }
  if (dweight)
    LATTICE_CHECK(dweight->numel() == weight.numel(), "ops::{}: dweight {} for weight {}", op,
                  shape_str(dweight->shape()), shape_str(weight.shape()));
  if (dbias) LATTICE_CHECK(dbias->numel() == OC, "ops::{}: dbias {} for OC = {}", op, shape_str(dbias->shape()), OC);
}

void linear_backward16(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, const LinearDims& d) {
  float* dw = dweight ? fp(*dweight) : nullptr;  // device pointers on CUDA (ptr<> is Tensor::data, host-only)
  float* db = dbias ? fp(*dbias) : nullptr;
  if (dout.device().is_cuda())
    return cuda_backend().linear_backward16(dout.device().index, dout.dtype(), dinp ? dinp->raw() : nullptr,
                                            dinp ? dinp->dtype() : dout.dtype(), dw, db, dout.raw(), inp.raw(),
                                            operand(weight), d.N, d.C, d.OC);
  with_16bit("linear_backward", dout.dtype(), [&](auto s) {
    using S = decltype(s);
    if (dinp && dinp->dtype() == DType::f32)
      cpu::linear_backward16<S, float>(fp(*dinp), dw, db, sp<S>(dout), sp<S>(inp), operand(weight), d.N, d.C, d.OC);
    else
      cpu::linear_backward16<S, S>(dinp ? sp<S>(*dinp) : nullptr, dw, db, sp<S>(dout), sp<S>(inp), operand(weight), d.N,
                                   d.C, d.OC);
  });
}
}  // namespace

void linear_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight) {
  check_same("linear_backward", {&dout, &inp});
  if (is_16bit(dout.dtype())) check_act16("linear_backward", dout);
  check_operand("linear_backward", "weight", weight, dout);
  LinearDims d = linear_dims("linear_backward", dout, inp, weight);
  check_linear_grads("linear_backward", dinp, dweight, dbias, dout, inp, weight, d.OC);
  if (is_16bit(dout.dtype())) return linear_backward16(dinp, dweight, dbias, dout, inp, weight, d);
  if (cuda_f32(dout)) {
    return cuda_backend().linear_backward(dout.device().index, dinp ? fp(*dinp) : nullptr,
                                          dweight ? fp(*dweight) : nullptr, dbias ? fp(*dbias) : nullptr, fp(dout),
                                          fp(inp), operand(weight), d.N, d.C, d.OC);
  }
  on_cpu("linear_backward", dout, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>)
      cpu::linear_backward(ptr<float>(dinp), ptr<float>(dweight), ptr<float>(dbias), dout.data<float>(),
                           inp.data<float>(), operand(weight), d.N, d.C, d.OC);
    else
      cpu::linear_backward<T>(ptr<T>(dinp), ptr<T>(dweight), ptr<T>(dbias), dout.data<T>(), inp.data<T>(),
                              weight.data<T>(), d.N, d.C, d.OC);
  });
}

namespace {
// rows: activations (f32, f64, bf16, f16); the bias: f32 beside 16-bit rows.
Rows bias_dims(const char* op, const Tensor& rows, const Tensor& bias) {
  check_same(op, {&rows});
  check_master(op, rows, {&bias});
  Rows r = rows_of(rows);
  LATTICE_CHECK(bias.numel() == r.c, "ops::{}: bias {} for rows {} (N, OC)", op, shape_str(bias.shape()),
                shape_str(rows.shape()));
  return r;
}
}  // namespace

void add_bias_forward(Tensor& out, const Tensor& bias) {
  Rows r = bias_dims("add_bias_forward", out, bias);
  if (cuda_f32(out)) return cuda_backend().add_bias(out.device().index, fp(out), fp(bias), r.n, r.c);
  if (cuda_16(out)) return cuda_backend().add_bias16(out.device().index, out.dtype(), out.raw(), fp(bias), r.n, r.c);
  on_cpu_act("add_bias_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::add_bias<T>(sp<T>(out), sp<compute_t<T>>(bias), r.n, r.c);
  });
}

void add_bias_backward(Tensor& dbias, const Tensor& dout) {
  Rows r = bias_dims("add_bias_backward", dout, dbias);
  if (cuda_f32(dout)) return cuda_backend().bias_backward(dout.device().index, fp(dbias), fp(dout), r.n, r.c);
  if (cuda_16(dout))
    return cuda_backend().bias_backward16(dout.device().index, dout.dtype(), fp(dbias), dout.raw(), r.n, r.c);
  on_cpu_act("add_bias_backward", dout, [&](auto t) {
    using T = decltype(t);
    cpu::bias_backward<T>(sp<compute_t<T>>(dbias), sp<T>(dout), r.n, r.c);
  });
}

}  // namespace lattice::ops
