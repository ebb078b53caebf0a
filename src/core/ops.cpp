// The op dispatch layer (see ops.h): check shapes, dtypes and devices, then
// call the CPU kernel for f32/f64 (and bf16/f16 activations) or the CUDA
// backend. Every failure names the op and the offending shapes, dtypes or
// device. The matmul section is ops_matmul.cpp, the layers' ops ops_nn.cpp.
#include "core/ops.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <type_traits>

#include "core/backend.h"
#include "core/kernels/cpu/activation.h"
#include "core/kernels/cpu/elementwise.h"
#include "core/kernels/cpu/matmul_half.h"
#include "core/kernels/cpu/norm.h"
#include "core/kernels/cpu/optimizer.h"
#include "core/ops_internal.h"

namespace lattice::ops {

using namespace detail;

// ---- normalisation ------------------------------------------------------

namespace {
// (N, C) of a normalisation: out like inp, per-row stats of N, params of C.
Rows norm_dims(const char* op, const Tensor& out, const Tensor& inp, const Tensor& weight,
               std::initializer_list<const Tensor*> stats) {
  Rows r = rows_of(inp);
  LATTICE_CHECK(out.numel() == inp.numel() && weight.numel() == r.c,
                "ops::{}: inp {} (N, C) needs out of the same size and weight (C), got out {} weight {}", op,
                shape_str(inp.shape()), shape_str(out.shape()), shape_str(weight.shape()));
  for (const Tensor* s : stats)
    LATTICE_CHECK(s->numel() == r.n, "ops::{}: per-row stats {} for inp {} (N = {})", op, shape_str(s->shape()),
                  shape_str(inp.shape()), r.n);
  return r;
}
}  // namespace

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, float eps) {
  check_same("layernorm_forward", {&out, &inp});
  check_master("layernorm_forward", inp, {&mean, &rstd, &weight, &bias});
  Rows r = norm_dims("layernorm_forward", out, inp, weight, {&mean, &rstd});
  LATTICE_CHECK(bias.numel() == r.c, "ops::layernorm_forward: bias {} for C = {}", shape_str(bias.shape()), r.c);
  const int dev = out.device().index;
  if (cuda_f32(out))
    return cuda_backend().layernorm_forward(dev, fp(out), fp(mean), fp(rstd), fp(inp), fp(weight), fp(bias), eps, r.n,
                                            r.c);
  if (cuda_16(out))
    return cuda_backend().layernorm_forward16(dev, out.dtype(), out.raw(), fp(mean), fp(rstd), inp.raw(), fp(weight),
                                              fp(bias), eps, r.n, r.c);
  on_cpu_act("layernorm_forward", out, [&](auto t) {
    using T = decltype(t);
    using P = compute_t<T>;
    cpu::layernorm_forward<T>(sp<T>(out), sp<P>(mean), sp<P>(rstd), sp<T>(inp), sp<P>(weight), sp<P>(bias), P(eps), r.n,
                              r.c);
  });
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  check_same("layernorm_backward", {&dinp, &dout, &inp});
  check_master("layernorm_backward", inp, {&dweight, &dbias, &weight, &mean, &rstd});
  Rows r = norm_dims("layernorm_backward", dinp, inp, weight, {&mean, &rstd});
  LATTICE_CHECK(dout.numel() == inp.numel() && dweight.numel() == r.c && dbias.numel() == r.c,
                "ops::layernorm_backward: dout {} dweight {} dbias {} for inp {}", shape_str(dout.shape()),
                shape_str(dweight.shape()), shape_str(dbias.shape()), shape_str(inp.shape()));
  const int dev = dinp.device().index;
  if (cuda_f32(dinp))
    return cuda_backend().layernorm_backward(dev, fp(dinp), fp(dweight), fp(dbias), fp(dout), fp(inp), fp(weight),
                                             fp(mean), fp(rstd), r.n, r.c);
  if (cuda_16(dinp))
    return cuda_backend().layernorm_backward16(dev, dinp.dtype(), dinp.raw(), fp(dweight), fp(dbias), dout.raw(),
                                               inp.raw(), fp(weight), fp(mean), fp(rstd), r.n, r.c);
  on_cpu_act("layernorm_backward", dinp, [&](auto t) {
    using T = decltype(t);
    using P = compute_t<T>;
    cpu::layernorm_backward<T>(sp<T>(dinp), sp<P>(dweight), sp<P>(dbias), sp<T>(dout), sp<T>(inp), sp<P>(weight),
                               sp<P>(mean), sp<P>(rstd), r.n, r.c);
  });
}

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  check_same("rmsnorm_forward", {&out, &inp});
  check_master("rmsnorm_forward", inp, {&rstd, &weight});
  Rows r = norm_dims("rmsnorm_forward", out, inp, weight, {&rstd});
  const int dev = out.device().index;
  if (cuda_f32(out)) return cuda_backend().rmsnorm_forward(dev, fp(out), fp(rstd), fp(inp), fp(weight), eps, r.n, r.c);
  if (cuda_16(out))
    return cuda_backend().rmsnorm_forward16(dev, out.dtype(), out.raw(), fp(rstd), inp.raw(), fp(weight), eps, r.n,
                                            r.c);
  on_cpu_act("rmsnorm_forward", out, [&](auto t) {
    using T = decltype(t);
    using P = compute_t<T>;
    cpu::rmsnorm_forward<T>(sp<T>(out), sp<P>(rstd), sp<T>(inp), sp<P>(weight), P(eps), r.n, r.c);
  });
}

void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd) {
  check_same("rmsnorm_backward", {&dinp, &dout, &inp});
  check_master("rmsnorm_backward", inp, {&dweight, &weight, &rstd});
  Rows r = norm_dims("rmsnorm_backward", dinp, inp, weight, {&rstd});
  LATTICE_CHECK(dout.numel() == inp.numel() && dweight.numel() == r.c,
                "ops::rmsnorm_backward: dout {} dweight {} for inp {}", shape_str(dout.shape()),
                shape_str(dweight.shape()), shape_str(inp.shape()));
  const int dev = dinp.device().index;
  if (cuda_f32(dinp))
    return cuda_backend().rmsnorm_backward(dev, fp(dinp), fp(dweight), fp(dout), fp(inp), fp(weight), fp(rstd), r.n,
                                           r.c);
  if (cuda_16(dinp))
    return cuda_backend().rmsnorm_backward16(dev, dinp.dtype(), dinp.raw(), fp(dweight), dout.raw(), inp.raw(),
                                             fp(weight), fp(rstd), r.n, r.c);
  on_cpu_act("rmsnorm_backward", dinp, [&](auto t) {
    using T = decltype(t);
    using P = compute_t<T>;
    cpu::rmsnorm_backward<T>(sp<T>(dinp), sp<P>(dweight), sp<T>(dout), sp<T>(inp), sp<P>(weight), sp<P>(rstd), r.n,
                             r.c);
  });
}

// ---- activations --------------------------------------------------------

void gelu_forward(Tensor& out, const Tensor& inp) {
  check_same("gelu_forward", {&out, &inp});
  LATTICE_CHECK(out.numel() == inp.numel(), "ops::gelu_forward: out {} for inp {}", shape_str(out.shape()),
                shape_str(inp.shape()));
  if (cuda_f32(out)) return cuda_backend().gelu_forward(out.device().index, fp(out), fp(inp), out.numel());
  if (cuda_16(out))
    return cuda_backend().gelu_forward16(out.device().index, out.dtype(), out.raw(), inp.raw(), out.numel());
  on_cpu_act("gelu_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::gelu_forward<T>(sp<T>(out), sp<T>(inp), out.numel());
  });
}

void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  check_same("gelu_backward", {&dinp, &dout, &inp});
  LATTICE_CHECK(dinp.numel() == inp.numel() && dout.numel() == inp.numel(),
                "ops::gelu_backward: dinp {} dout {} for inp {}", shape_str(dinp.shape()), shape_str(dout.shape()),
                shape_str(inp.shape()));
  if (cuda_f32(dinp))
    return cuda_backend().gelu_backward(dinp.device().index, fp(dinp), fp(dout), fp(inp), dinp.numel());
  if (cuda_16(dinp))
    return cuda_backend().gelu_backward16(dinp.device().index, dinp.dtype(), dinp.raw(), dout.raw(), inp.raw(),
                                          dinp.numel());
  on_cpu_act("gelu_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::gelu_backward<T>(sp<T>(dinp), sp<T>(dout), sp<T>(inp), dinp.numel());
  });
}

namespace {
Rows swiglu_dims(const char* op, const Tensor& y, const Tensor& x) {  // y (N, F), x (N, 2F)
  Rows r = rows_of(x);
  LATTICE_CHECK(r.c % 2 == 0 && y.numel() == x.numel() / 2 && rows_of(y).c == r.c / 2,
                "ops::{}: inp {} (N, 2F) needs out (N, F), got {}", op, shape_str(x.shape()), shape_str(y.shape()));
  return {r.n, r.c / 2};
}
}  // namespace

void swiglu_forward(Tensor& out, const Tensor& inp) {
  check_same("swiglu_forward", {&out, &inp});
  Rows r = swiglu_dims("swiglu_forward", out, inp);
  if (cuda_f32(out)) return cuda_backend().swiglu_forward(out.device().index, fp(out), fp(inp), r.n, r.c);
  if (cuda_16(out))
    return cuda_backend().swiglu_forward16(out.device().index, out.dtype(), out.raw(), inp.raw(), r.n, r.c);
  on_cpu_act("swiglu_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::swiglu_forward<T>(sp<T>(out), sp<T>(inp), r.n, r.c);
  });
}

void swiglu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  check_same("swiglu_backward", {&dinp, &dout, &inp});
  Rows r = swiglu_dims("swiglu_backward", dout, inp);
  LATTICE_CHECK(dinp.numel() == inp.numel(), "ops::swiglu_backward: dinp {} for inp {}", shape_str(dinp.shape()),
                shape_str(inp.shape()));
  if (cuda_f32(dinp)) return cuda_backend().swiglu_backward(dinp.device().index, fp(dinp), fp(dout), fp(inp), r.n, r.c);
  if (cuda_16(dinp))
    return cuda_backend().swiglu_backward16(dinp.device().index, dinp.dtype(), dinp.raw(), dout.raw(), inp.raw(), r.n,
                                            r.c);
  on_cpu_act("swiglu_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::swiglu_backward<T>(sp<T>(dinp), sp<T>(dout), sp<T>(inp), r.n, r.c);
  });
}

void softmax_forward(Tensor& out, const Tensor& inp) {
  check_same("softmax_forward", {&out, &inp});
  LATTICE_CHECK(out.numel() == inp.numel(), "ops::softmax_forward: out {} for inp {}", shape_str(out.shape()),
                shape_str(inp.shape()));
  Rows r = rows_of(inp);
  if (cuda_f32(out)) return cuda_backend().softmax_forward(out.device().index, fp(out), fp(inp), r.n, r.c);
  if (cuda_16(out))
    return cuda_backend().softmax_forward16(out.device().index, out.dtype(), out.raw(), inp.raw(), r.n, r.c);
  on_cpu_act("softmax_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::softmax_forward<T>(sp<T>(out), sp<T>(inp), r.n, r.c);
  });
}

void softmax_backward(Tensor& dinp, const Tensor& dout, const Tensor& out) {
  check_same("softmax_backward", {&dinp, &dout, &out});
  LATTICE_CHECK(dinp.numel() == out.numel() && dout.numel() == out.numel(),
                "ops::softmax_backward: dinp {} dout {} for out {}", shape_str(dinp.shape()), shape_str(dout.shape()),
                shape_str(out.shape()));
  Rows r = rows_of(out);
  if (cuda_f32(dinp))
    return cuda_backend().softmax_backward(dinp.device().index, fp(dinp), fp(dout), fp(out), r.n, r.c);
  if (cuda_16(dinp))
    return cuda_backend().softmax_backward16(dinp.device().index, dinp.dtype(), dinp.raw(), dout.raw(), out.raw(), r.n,
                                             r.c);
  on_cpu_act("softmax_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::softmax_backward<T>(sp<T>(dinp), sp<T>(dout), sp<T>(out), r.n, r.c);
  });
}

// ---- element-wise and reductions --------------------------------------------

namespace {
// The one 16-bit type among tensors that are each f32 or that type, on one
// device (a mixed add); anything else fails.
DType mixed_half(const char* op, std::initializer_list<const Tensor*> ts) {
  DType half = DType::f32;
  bool ok = true;
  const Tensor* first = *ts.begin();
  for (const Tensor* t : ts) {
    LATTICE_CHECK(t->defined(), "ops::{}: an argument tensor is undefined", op);
    ok = ok && t->device() == first->device();
    if (is_16bit(t->dtype()) && half == DType::f32) half = t->dtype();
    ok = ok && (t->dtype() == DType::f32 || t->dtype() == half);
  }
  LATTICE_CHECK(ok && half != DType::f32,
                "ops::{}: mixed tensors {} and {}: mixed dtypes are f32 beside one 16-bit type (bf16 or f16) on "
                "one device",
                op, desc(*first), desc(**std::prev(ts.end())));
  return half;
}

// Calls f(float{}) for an f32 tensor, else f(S{}).
template <typename S, typename F>
void f32_or(const Tensor& t, F&& f) {
  if (t.dtype() == DType::f32)
    f(float{});
  else
    f(S{});
}

// out = narrow(widen(a) + widen(b)) with each of out, a, b f32 or one 16-bit type.
void add_mixed(const char* op, Tensor& out, const Tensor& a, const Tensor& b) {
  const DType half = mixed_half(op, {&out, &a, &b});
  LATTICE_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "ops::{}: out {} = a {} + b {}", op,
                shape_str(out.shape()), shape_str(a.shape()), shape_str(b.shape()));
  if (out.device().is_cuda())
    return cuda_backend().add_mixed(out.device().index, out.raw(), out.dtype(), a.raw(), a.dtype(), b.raw(), b.dtype(),
                                    out.numel());
  with_16bit(op, half, [&](auto s) {
    using S = decltype(s);
    f32_or<S>(out, [&](auto o) {
      f32_or<S>(a, [&](auto x) {
        f32_or<S>(b, [&](auto y) {
          using O = decltype(o);
          using A = decltype(x);
          using B = decltype(y);
          cpu::add<O, A, B>(sp<O>(out), sp<A>(a), sp<B>(b), out.numel());
        });
      });
    });
  });
}
}  // namespace

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype()) return add_mixed("add", out, a, b);
  check_same("add", {&out, &a, &b});
  LATTICE_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "ops::add: out {} = a {} + b {}",
                shape_str(out.shape()), shape_str(a.shape()), shape_str(b.shape()));
  const int dev = out.device().index;
  if (cuda_f32(out)) return cuda_backend().add(dev, fp(out), fp(a), fp(b), out.numel());
  if (cuda_16(out)) return cuda_backend().add16(dev, out.dtype(), out.raw(), a.raw(), b.raw(), out.numel());
  on_cpu_act("add", out, [&](auto t) {
    using S = decltype(t);
    cpu::add<S>(sp<S>(out), sp<S>(a), sp<S>(b), out.numel());
  });
}

void add_inplace(Tensor& acc, const Tensor& x) {
  if (x.dtype() != acc.dtype()) return add_mixed("add_inplace", acc, acc, x);
  check_same("add_inplace", {&acc, &x});
  LATTICE_CHECK(acc.numel() == x.numel(), "ops::add_inplace: acc {} += x {}", shape_str(acc.shape()),
                shape_str(x.shape()));
  const int dev = acc.device().index;
  if (cuda_f32(acc)) return cuda_backend().add(dev, fp(acc), fp(acc), fp(x), acc.numel());
  if (cuda_16(acc)) return cuda_backend().add16(dev, acc.dtype(), acc.raw(), acc.raw(), x.raw(), acc.numel());
  on_cpu_act("add_inplace", acc, [&](auto t) {
    using S = decltype(t);
    cpu::add_inplace<S>(sp<S>(acc), sp<S>(x), acc.numel());
  });
}

void scale_inplace(Tensor& x, double s) {
  check_same("scale_inplace", {&x});
  if (cuda_f32(x)) return cuda_backend().scale(x.device().index, fp(x), float(s), x.numel());
  if (cuda_16(x)) return cuda_backend().scale16(x.device().index, x.dtype(), x.raw(), float(s), x.numel());
  on_cpu_act("scale_inplace", x, [&](auto t) {
    using S = decltype(t);
    cpu::scale_inplace<S>(sp<S>(x), s, x.numel());
  });
}

void sum_into(Tensor& acc, const Tensor& x) {
  LATTICE_CHECK(acc.numel() == 1 && acc.dtype() == DType::f64 && x.dtype() == DType::f32,
                "sum_into: acc must be one f64 and x f32, got {} of {} and {}", acc.numel(), dtype_name(acc.dtype()),
                dtype_name(x.dtype()));
  LATTICE_CHECK(acc.device() == x.device(), "sum_into: acc on {}, x on {}", acc.device().str(), x.device().str());
  if (x.device().is_cuda()) return cuda_backend().sum_into(x.device().index, acc.data<double>(), fp(x), x.numel());
  const float* p = x.data<float>();
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += double(p[i]);
  acc.data<double>()[0] += s;
}

double sum_squares(const Tensor& x) {
  check_same("sum_squares", {&x});
  if (cuda_f32(x)) return cuda_backend().sum_squares(x.device().index, fp(x), x.numel());
  if (cuda_16(x)) return cuda_backend().sum_squares16(x.device().index, x.dtype(), x.raw(), x.numel());
  return on_cpu_act("sum_squares", x, [&](auto t) {
    using S = decltype(t);
    return cpu::sum_squares<S>(sp<S>(x), x.numel());
  });
}

bool all_finite(const Tensor& x) {
  check_same("all_finite", {&x});
  if (cuda_f32(x)) return cuda_backend().all_finite(x.device().index, fp(x), x.numel());
  if (cuda_16(x)) return cuda_backend().all_finite16(x.device().index, x.dtype(), x.raw(), x.numel());
  return on_cpu_act("all_finite", x, [&](auto t) {
    using S = decltype(t);
    return cpu::all_finite<S>(sp<S>(x), x.numel());
  });
}

void round_to_half(Tensor& out, const Tensor& inp) {
  const bool ok = out.defined() && inp.defined() && inp.dtype() == DType::f32 &&
                  (out.dtype() == DType::bf16 || out.dtype() == DType::f16) && out.device() == inp.device() &&
                  out.numel() == inp.numel();
  LATTICE_CHECK(ok,
                "ops::round_to_half: needs an f32 inp and a bf16 or f16 out of its size on its device, got out {} "
                "and inp {}",
                out.defined() ? desc(out) : "undefined", inp.defined() ? desc(inp) : "undefined");
  if (inp.device().is_cuda())
    return cuda_backend().round_to_half(inp.device().index, out.raw(), out.dtype(), fp(inp), inp.numel());
  cpu::round_to_half(out.dtype(), static_cast<uint16_t*>(out.raw()), inp.data<float>(), inp.numel());
}

namespace {
// out of storage O = in of storage I, where they differ (the same dtype is a copy).
template <typename O, typename I>
void convert_as(Tensor& out, const Tensor& in) {
  if constexpr (!std::is_same_v<O, I>) cpu::convert<O, I>(sp<O>(out), sp<I>(in), out.numel());
}
}  // namespace

void convert(Tensor& out, const Tensor& in) {
  auto takes = [](const Tensor& t) { return t.defined() && (t.dtype() == DType::f32 || is_16bit(t.dtype())); };
  LATTICE_CHECK(takes(out) && takes(in) && out.device() == in.device() && out.numel() == in.numel(),
                "ops::convert: needs f32, bf16 or f16 tensors of one size on one device, got out {} and in {}",
                out.defined() ? desc(out) : "undefined", in.defined() ? desc(in) : "undefined");
  if (out.dtype() == in.dtype()) return out.copy_from(in);
  if (out.device().is_cuda())
    return cuda_backend().convert(out.device().index, out.raw(), out.dtype(), in.raw(), in.dtype(), out.numel());
  auto storage = [](DType t, auto&& f) {  // f(float{}), f(Bf16{}) or f(F16{})
    if (t == DType::f32) return f(float{});
    with_16bit("convert", t, f);
  };
  storage(out.dtype(),
          [&](auto o) { storage(in.dtype(), [&](auto i) { convert_as<decltype(o), decltype(i)>(out, in); }); });
}

void copy_rows(Tensor& dst, int64_t dst_off, int64_t dst_ld, const Tensor& src, int64_t src_off, int64_t src_ld,
               int64_t rows, int64_t width) {
  check_same("copy_rows", {&dst, &src});
  LATTICE_CHECK(rows >= 0 && width >= 0 && dst_off >= 0 && src_off >= 0,
                "ops::copy_rows: rows {}, width {}, offsets {} and {} must not be negative", rows, width, dst_off,
                src_off);
  if (rows == 0 || width == 0) return;
  LATTICE_CHECK(rows == 1 || (width <= dst_ld && width <= src_ld),
                "ops::copy_rows: rows of {} elements overlap at row lengths {} (dst) and {} (src)", width, dst_ld,
                src_ld);
  // The element one past the last row of each side; rows == 1 reads no row length.
  const int64_t dst_end = dst_off + (rows - 1) * dst_ld + width, src_end = src_off + (rows - 1) * src_ld + width;
  LATTICE_CHECK(dst_end <= dst.numel() && src_end <= src.numel(),
                "ops::copy_rows: {} rows of {} reach element {} of dst ({}) and {} of src ({})", rows, width, dst_end,
                desc(dst), src_end, desc(src));
  const size_t es = dtype_size(dst.dtype());
  char* d = static_cast<char*>(dst.raw()) + dst_off * es;
  const char* s = static_cast<const char*>(src.raw()) + src_off * es;
  LATTICE_CHECK(d + (dst_end - dst_off) * es <= s || s + (src_end - src_off) * es <= d,
                "ops::copy_rows: the rows of dst and src lie in one span of memory ({} and {})", desc(dst), desc(src));
  if (dst.device().is_cuda())
    return cuda_backend().copy_rows(dst.device().index, d, size_t(dst_ld) * es, s, size_t(src_ld) * es, width * es,
                                    size_t(rows));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * dst_ld * es, s + r * src_ld * es, width * es);
}

// ---- optimizer updates --------------------------------------------------------

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& s) {
  check_same("adamw_update", {&param, &grad, &m, &v});
  LATTICE_CHECK(grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
                "ops::adamw_update: param {}, grad {}, m {}, v {} must have the same size", shape_str(param.shape()),
                shape_str(grad.shape()), shape_str(m.shape()), shape_str(v.shape()));
  LATTICE_CHECK(s.step >= 1, "ops::adamw_update: step is 1-based, got {}", s.step);
  if (cuda_f32(param)) {
    float bc1 = float(1.0 - std::pow(double(s.beta1), double(s.step)));
    float bc2 = float(1.0 - std::pow(double(s.beta2), double(s.step)));
    return cuda_backend().adamw(param.device().index, fp(param), fp(grad), fp(m), fp(v), param.numel(), s.lr, s.beta1,
                                s.beta2, s.eps, s.weight_decay, bc1, bc2, s.grad_scale);
  }
  on_cpu("adamw_update", param, [&](auto t) {
    using T = decltype(t);
    cpu::adamw_update<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), param.numel(), s.lr, s.beta1,
                         s.beta2, s.eps, s.weight_decay, s.step, s.grad_scale);
  });
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum, float lr, float mu, float weight_decay,
                float grad_scale) {
  check_same("sgd_update", {&param, &grad});
  bool use_buf = momentum.defined();
  LATTICE_CHECK(use_buf || mu == 0.0f, "ops::sgd_update: momentum {} needs a momentum buffer", mu);
  if (use_buf) check_same("sgd_update", {&param, &momentum});
  LATTICE_CHECK(grad.numel() == param.numel() && (!use_buf || momentum.numel() == param.numel()),
                "ops::sgd_update: param {}, grad {}, momentum {} must have the same size", shape_str(param.shape()),
                shape_str(grad.shape()), use_buf ? shape_str(momentum.shape()) : "undefined");
  if (cuda_f32(param))
    return cuda_backend().sgd(param.device().index, fp(param), fp(grad), use_buf ? fp(momentum) : nullptr,
                              param.numel(), lr, mu, weight_decay, grad_scale);
  on_cpu("sgd_update", param, [&](auto t) {
    using T = decltype(t);
    cpu::sgd_update<T>(param.data<T>(), grad.data<T>(), use_buf ? momentum.data<T>() : nullptr, param.numel(), lr, mu,
                       weight_decay, grad_scale);
  });
}

}  // namespace lattice::ops
