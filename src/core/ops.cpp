// The op dispatch layer (see ops.h): check shapes, dtypes and devices, then
// call the CPU kernel for f32/f64 or the CUDA backend for f32. Every failure
// names the op and the offending shapes, dtypes or device.
#include "core/ops.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>

#include "core/backend.h"
#include "core/kernels/cpu/activation.h"
#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/dropout.h"
#include "core/kernels/cpu/elementwise.h"
#include "core/kernels/cpu/embedding.h"
#include "core/kernels/cpu/loss.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/norm.h"
#include "core/kernels/cpu/optimizer.h"

namespace lattice::ops {

namespace {

std::string desc(const Tensor& t) {
  return fmt::format("{} {} on {}", shape_str(t.shape()), dtype_name(t.dtype()), t.device().str());
}

[[noreturn]] void no_kernel(const char* op, const Tensor& t) {
  if (t.device().is_cuda())
    LATTICE_FAIL("ops::{}: no CUDA kernel yet ({} on {})", op, dtype_name(t.dtype()), t.device().str());
  LATTICE_FAIL("ops::{}: no CPU kernel for {} (CPU kernels take f32 and f64)", op, dtype_name(t.dtype()));
}

// Every tensor is defined and shares the dtype and device of the first.
void check_same(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = *ts.begin();
  for (const Tensor* t : ts) {
    LATTICE_CHECK(t->defined(), "ops::{}: an argument tensor is undefined", op);
    LATTICE_CHECK(t->dtype() == first->dtype() && t->device() == first->device(),
                  "ops::{}: mixed tensors {} and {}", op, desc(*first), desc(*t));
  }
}

void check_ids(const char* op, const Tensor& ids, const Tensor& like) {
  LATTICE_CHECK(ids.defined() && ids.dtype() == DType::i32, "ops::{}: ids/targets must be i32, got {}", op,
                ids.defined() ? desc(ids) : "undefined");
  LATTICE_CHECK(ids.device() == like.device(), "ops::{}: ids on {} but data on {}", op, ids.device().str(),
                like.device().str());
}

// Rows and columns of the (N, C) folding of t (C = the last dim).
struct Rows {
  int64_t n, c;
};
Rows rows_of(const Tensor& t) {
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

bool cuda_f32(const Tensor& t) { return t.device().is_cuda() && t.dtype() == DType::f32; }
float* fp(const Tensor& t) { return static_cast<float*>(t.raw()); }
template <typename T>
T* ptr(const Tensor* t) {
  return t ? t->data<T>() : nullptr;
}

}  // namespace

// ---- matmul -------------------------------------------------------------

void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  check_same("gemm", {&c, &a, &b});
  LATTICE_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "ops::gemm: needs 2-D tensors, got a {} b {} c {}",
                shape_str(a.shape()), shape_str(b.shape()), shape_str(c.shape()));
  int64_t m = trans_a ? a.dim(1) : a.dim(0), k = trans_a ? a.dim(0) : a.dim(1);
  int64_t kb = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
  LATTICE_CHECK(k == kb && c.dim(0) == m && c.dim(1) == n,
                "ops::gemm: op(a) {}{} times op(b) {}{} does not give c {}", shape_str(a.shape()),
                trans_a ? "^T" : "", shape_str(b.shape()), trans_b ? "^T" : "", shape_str(c.shape()));
  if (cuda_f32(c))
    return cuda_backend().gemm(c.device().index, trans_a, trans_b, m, n, k, alpha, fp(a), fp(b), beta, fp(c));
  on_cpu("gemm", c, [&](auto t) {
    using T = decltype(t);
    cpu::gemm<T>(trans_a, trans_b, m, n, k, T(alpha), a.data<T>(), b.data<T>(), T(beta), c.data<T>());
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
}  // namespace

void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias) {
  check_same("linear_forward", {&out, &inp, &weight});
  LinearDims d = linear_dims("linear_forward", out, inp, weight);
  if (bias) {
    check_same("linear_forward", {&out, bias});
    LATTICE_CHECK(bias->numel() == d.OC, "ops::linear_forward: bias {} for OC = {}", shape_str(bias->shape()), d.OC);
  }
  if (cuda_f32(out)) {
    CudaBackend& cb = cuda_backend();
    int dev = out.device().index;
    cb.gemm(dev, false, true, d.N, d.OC, d.C, 1.0f, fp(inp), fp(weight), 0.0f, fp(out));
    if (bias) cb.add_bias(dev, fp(out), fp(*bias), d.N, d.OC);
    return;
  }
  on_cpu("linear_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::linear_forward<T>(out.data<T>(), inp.data<T>(), weight.data<T>(), ptr<T>(bias), d.N, d.C, d.OC);
  });
}

void linear_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight) {
  check_same("linear_backward", {&dout, &inp, &weight});
  LinearDims d = linear_dims("linear_backward", dout, inp, weight);
  if (dinp) {
    check_same("linear_backward", {&dout, dinp});
    LATTICE_CHECK(dinp->numel() == inp.numel(), "ops::linear_backward: dinp {} for inp {}",
                  shape_str(dinp->shape()), shape_str(inp.shape()));
  }
  if (dweight) {
    check_same("linear_backward", {&dout, dweight});
    LATTICE_CHECK(dweight->numel() == weight.numel(), "ops::linear_backward: dweight {} for weight {}",
                  shape_str(dweight->shape()), shape_str(weight.shape()));
  }
  if (dbias) {
    check_same("linear_backward", {&dout, dbias});
    LATTICE_CHECK(dbias->numel() == d.OC, "ops::linear_backward: dbias {} for OC = {}", shape_str(dbias->shape()),
                  d.OC);
  }
  if (cuda_f32(dout)) {
    CudaBackend& cb = cuda_backend();
    int dev = dout.device().index;
    if (dinp) cb.gemm(dev, false, false, d.N, d.C, d.OC, 1.0f, fp(dout), fp(weight), 0.0f, fp(*dinp));
    if (dweight) cb.gemm(dev, true, false, d.OC, d.C, d.N, 1.0f, fp(dout), fp(inp), 1.0f, fp(*dweight));
    if (dbias) cb.bias_backward(dev, fp(*dbias), fp(dout), d.N, d.OC);
    return;
  }
  on_cpu("linear_backward", dout, [&](auto t) {
    using T = decltype(t);
    cpu::linear_backward<T>(ptr<T>(dinp), ptr<T>(dweight), ptr<T>(dbias), dout.data<T>(), inp.data<T>(),
                            weight.data<T>(), d.N, d.C, d.OC);
  });
}

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
  check_same("layernorm_forward", {&out, &mean, &rstd, &inp, &weight, &bias});
  Rows r = norm_dims("layernorm_forward", out, inp, weight, {&mean, &rstd});
  LATTICE_CHECK(bias.numel() == r.c, "ops::layernorm_forward: bias {} for C = {}", shape_str(bias.shape()), r.c);
  on_cpu("layernorm_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::layernorm_forward<T>(out.data<T>(), mean.data<T>(), rstd.data<T>(), inp.data<T>(), weight.data<T>(),
                              bias.data<T>(), T(eps), r.n, r.c);
  });
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  check_same("layernorm_backward", {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd});
  Rows r = norm_dims("layernorm_backward", dinp, inp, weight, {&mean, &rstd});
  LATTICE_CHECK(dout.numel() == inp.numel() && dweight.numel() == r.c && dbias.numel() == r.c,
                "ops::layernorm_backward: dout {} dweight {} dbias {} for inp {}", shape_str(dout.shape()),
                shape_str(dweight.shape()), shape_str(dbias.shape()), shape_str(inp.shape()));
  on_cpu("layernorm_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::layernorm_backward<T>(dinp.data<T>(), dweight.data<T>(), dbias.data<T>(), dout.data<T>(), inp.data<T>(),
                               weight.data<T>(), mean.data<T>(), rstd.data<T>(), r.n, r.c);
  });
}

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  check_same("rmsnorm_forward", {&out, &rstd, &inp, &weight});
  Rows r = norm_dims("rmsnorm_forward", out, inp, weight, {&rstd});
  on_cpu("rmsnorm_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::rmsnorm_forward<T>(out.data<T>(), rstd.data<T>(), inp.data<T>(), weight.data<T>(), T(eps), r.n, r.c);
  });
}

void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd) {
  check_same("rmsnorm_backward", {&dinp, &dweight, &dout, &inp, &weight, &rstd});
  Rows r = norm_dims("rmsnorm_backward", dinp, inp, weight, {&rstd});
  LATTICE_CHECK(dout.numel() == inp.numel() && dweight.numel() == r.c,
                "ops::rmsnorm_backward: dout {} dweight {} for inp {}", shape_str(dout.shape()),
                shape_str(dweight.shape()), shape_str(inp.shape()));
  on_cpu("rmsnorm_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::rmsnorm_backward<T>(dinp.data<T>(), dweight.data<T>(), dout.data<T>(), inp.data<T>(), weight.data<T>(),
                             rstd.data<T>(), r.n, r.c);
  });
}

// ---- activations --------------------------------------------------------

void gelu_forward(Tensor& out, const Tensor& inp) {
  check_same("gelu_forward", {&out, &inp});
  LATTICE_CHECK(out.numel() == inp.numel(), "ops::gelu_forward: out {} for inp {}", shape_str(out.shape()),
                shape_str(inp.shape()));
  if (cuda_f32(out)) return cuda_backend().gelu_forward(out.device().index, fp(out), fp(inp), out.numel());
  on_cpu("gelu_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::gelu_forward<T>(out.data<T>(), inp.data<T>(), out.numel());
  });
}

void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  check_same("gelu_backward", {&dinp, &dout, &inp});
  LATTICE_CHECK(dinp.numel() == inp.numel() && dout.numel() == inp.numel(),
                "ops::gelu_backward: dinp {} dout {} for inp {}", shape_str(dinp.shape()), shape_str(dout.shape()),
                shape_str(inp.shape()));
  if (cuda_f32(dinp))
    return cuda_backend().gelu_backward(dinp.device().index, fp(dinp), fp(dout), fp(inp), dinp.numel());
  on_cpu("gelu_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::gelu_backward<T>(dinp.data<T>(), dout.data<T>(), inp.data<T>(), dinp.numel());
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
  on_cpu("swiglu_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::swiglu_forward<T>(out.data<T>(), inp.data<T>(), r.n, r.c);
  });
}

void swiglu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  check_same("swiglu_backward", {&dinp, &dout, &inp});
  Rows r = swiglu_dims("swiglu_backward", dout, inp);
  LATTICE_CHECK(dinp.numel() == inp.numel(), "ops::swiglu_backward: dinp {} for inp {}", shape_str(dinp.shape()),
                shape_str(inp.shape()));
  on_cpu("swiglu_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::swiglu_backward<T>(dinp.data<T>(), dout.data<T>(), inp.data<T>(), r.n, r.c);
  });
}

void softmax_forward(Tensor& out, const Tensor& inp) {
  check_same("softmax_forward", {&out, &inp});
  LATTICE_CHECK(out.numel() == inp.numel(), "ops::softmax_forward: out {} for inp {}", shape_str(out.shape()),
                shape_str(inp.shape()));
  Rows r = rows_of(inp);
  on_cpu("softmax_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::softmax_forward<T>(out.data<T>(), inp.data<T>(), r.n, r.c);
  });
}

void softmax_backward(Tensor& dinp, const Tensor& dout, const Tensor& out) {
  check_same("softmax_backward", {&dinp, &dout, &out});
  LATTICE_CHECK(dinp.numel() == out.numel() && dout.numel() == out.numel(),
                "ops::softmax_backward: dinp {} dout {} for out {}", shape_str(dinp.shape()), shape_str(dout.shape()),
                shape_str(out.shape()));
  Rows r = rows_of(out);
  on_cpu("softmax_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::softmax_backward<T>(dinp.data<T>(), dout.data<T>(), out.data<T>(), r.n, r.c);
  });
}

// ---- dropout ------------------------------------------------------------

namespace {
// The shared map of forward (inp -> out) and backward (dout -> dinp).
void dropout_apply(const char* op, Tensor& y, const Tensor& x, const Dropout& d) {
  check_same(op, {&y, &x});
  LATTICE_CHECK(y.numel() == x.numel(), "ops::{}: {} and {} differ in size", op, shape_str(y.shape()),
                shape_str(x.shape()));
  LATTICE_CHECK(d.p >= 0.0f && d.p < 1.0f, "ops::{}: p = {} must lie in [0, 1)", op, d.p);
  int64_t B = x.ndim() ? x.dim(0) : 1, S = B ? x.numel() / B : 0;
  on_cpu(op, y, [&](auto t) {
    using T = decltype(t);
    cpu::dropout_forward<T>(y.data<T>(), x.data<T>(), d.key, d.sample0, d.p, B, S);
  });
}
}  // namespace

void dropout_forward(Tensor& out, const Tensor& inp, const Dropout& d) {
  dropout_apply("dropout_forward", out, inp, d);
}
void dropout_backward(Tensor& dinp, const Tensor& dout, const Dropout& d) {
  dropout_apply("dropout_backward", dinp, dout, d);
}

// ---- attention ----------------------------------------------------------

namespace {
cpu::AttentionDims attention_dims(const char* op, const Tensor& y, const Tensor& att, const Tensor& qkv, int n_head,
                                  const Dropout& d, int head_offset) {
  LATTICE_CHECK(qkv.ndim() == 3 && n_head > 0 && qkv.dim(2) % (3 * int64_t(n_head)) == 0,
                "ops::{}: qkv {} must be (B, T, 3 * NH * HS) with NH = {}", op, shape_str(qkv.shape()), n_head);
  int64_t B = qkv.dim(0), T = qkv.dim(1), HS = qkv.dim(2) / (3 * n_head);
  LATTICE_CHECK(y.numel() == B * T * n_head * HS && att.numel() == B * n_head * T * T,
                "ops::{}: qkv {} needs (B, T, C) = ({}, {}, {}) and att (B, NH, T, T), got {} and {}", op,
                shape_str(qkv.shape()), B, T, n_head * HS, shape_str(y.shape()), shape_str(att.shape()));
  LATTICE_CHECK(d.p >= 0.0f && d.p < 1.0f && head_offset >= 0, "ops::{}: p = {} must lie in [0, 1), head_offset {}",
                op, d.p, head_offset);
  LATTICE_CHECK(std::max(T, 3 * n_head * HS) <= INT_MAX, "ops::{}: qkv {} exceeds the BLAS int range", op,
                shape_str(qkv.shape()));
  return {B, T, n_head, HS, head_offset};
}
}  // namespace

void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int n_head, const Dropout& d, int head_offset) {
  check_same("attention_forward", {&out, &att, &qkv});
  cpu::AttentionDims ad = attention_dims("attention_forward", out, att, qkv, n_head, d, head_offset);
  on_cpu("attention_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::attention_forward<T>(out.data<T>(), att.data<T>(), qkv.data<T>(), d.key, d.sample0, d.p, ad);
  });
}

void attention_backward(Tensor& dqkv, Tensor& scratch, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int n_head, const Dropout& d, int head_offset) {
  check_same("attention_backward", {&dqkv, &scratch, &dout, &qkv, &att});
  cpu::AttentionDims ad = attention_dims("attention_backward", dout, att, qkv, n_head, d, head_offset);
  LATTICE_CHECK(dqkv.numel() == qkv.numel() && scratch.numel() == att.numel(),
                "ops::attention_backward: dqkv {} scratch {} for qkv {} att {}", shape_str(dqkv.shape()),
                shape_str(scratch.shape()), shape_str(qkv.shape()), shape_str(att.shape()));
  on_cpu("attention_backward", dqkv, [&](auto t) {
    using T = decltype(t);
    cpu::attention_backward<T>(dqkv.data<T>(), scratch.data<T>(), dout.data<T>(), qkv.data<T>(), att.data<T>(), d.key,
                               d.sample0, d.p, ad);
  });
}

// ---- embedding ----------------------------------------------------------

namespace {
Rows embedding_dims(const char* op, const Tensor& rows, const Tensor& ids, const Tensor& weight) {
  check_ids(op, ids, weight);
  LATTICE_CHECK(weight.ndim() == 2 && rows.numel() == ids.numel() * weight.dim(1),
                "ops::{}: weight {} must be (V, C) and rows {} (N, C) for ids {}", op, shape_str(weight.shape()),
                shape_str(rows.shape()), shape_str(ids.shape()));
  return {ids.numel(), weight.dim(1)};
}
}  // namespace

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& weight, int64_t vocab_start) {
  check_same("embedding_forward", {&out, &weight});
  Rows r = embedding_dims("embedding_forward", out, ids, weight);
  on_cpu("embedding_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::embedding_forward<T>(out.data<T>(), ids.data<int32_t>(), weight.data<T>(), vocab_start, r.n,
                              weight.dim(0), r.c);
  });
}

void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids, int64_t vocab_start) {
  check_same("embedding_backward", {&dweight, &dout});
  Rows r = embedding_dims("embedding_backward", dout, ids, dweight);
  on_cpu("embedding_backward", dweight, [&](auto t) {
    using T = decltype(t);
    cpu::embedding_backward<T>(dweight.data<T>(), dout.data<T>(), ids.data<int32_t>(), vocab_start, r.n,
                               dweight.dim(0), r.c);
  });
}

// ---- loss ---------------------------------------------------------------

namespace {
Rows cross_entropy_dims(const char* op, const Tensor& logits, const Tensor& targets, int ignore_index) {
  check_ids(op, targets, logits);
  Rows r = rows_of(logits);
  LATTICE_CHECK(targets.numel() == r.n, "ops::{}: targets {} for logits {} (N, V)", op, shape_str(targets.shape()),
                shape_str(logits.shape()));
  if (targets.device().is_cpu()) {
    const int32_t* t = targets.data<int32_t>();
    for (int64_t n = 0; n < r.n; ++n)
      LATTICE_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < r.c),
                    "ops::{}: target {} of row {} is outside [0, {}) and not ignore_index ({})", op, t[n], n, r.c,
                    ignore_index);
  }
  return r;
}
}  // namespace

void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets,
                           int ignore_index) {
  check_same("cross_entropy_forward", {&losses, &lse, &logits});
  Rows r = cross_entropy_dims("cross_entropy_forward", logits, targets, ignore_index);
  LATTICE_CHECK(losses.numel() == r.n && lse.numel() == r.n, "ops::cross_entropy_forward: losses {} lse {} for N = {}",
                shape_str(losses.shape()), shape_str(lse.shape()), r.n);
  on_cpu("cross_entropy_forward", logits, [&](auto t) {
    using T = decltype(t);
    cpu::cross_entropy_forward<T>(losses.data<T>(), lse.data<T>(), logits.data<T>(), targets.data<int32_t>(),
                                  ignore_index, r.n, r.c);
  });
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float dloss, int ignore_index) {
  check_same("cross_entropy_backward", {&dlogits, &logits, &lse});
  Rows r = cross_entropy_dims("cross_entropy_backward", logits, targets, ignore_index);
  LATTICE_CHECK(dlogits.numel() == logits.numel() && lse.numel() == r.n,
                "ops::cross_entropy_backward: dlogits {} lse {} for logits {}", shape_str(dlogits.shape()),
                shape_str(lse.shape()), shape_str(logits.shape()));
  on_cpu("cross_entropy_backward", logits, [&](auto t) {
    using T = decltype(t);
    cpu::cross_entropy_backward<T>(dlogits.data<T>(), logits.data<T>(), lse.data<T>(), targets.data<int32_t>(),
                                   T(dloss), ignore_index, r.n, r.c);
  });
}

// ---- element-wise and reductions --------------------------------------------

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  check_same("add", {&out, &a, &b});
  LATTICE_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "ops::add: out {} = a {} + b {}",
                shape_str(out.shape()), shape_str(a.shape()), shape_str(b.shape()));
  if (cuda_f32(out)) return cuda_backend().add(out.device().index, fp(out), fp(a), fp(b), out.numel());
  on_cpu("add", out, [&](auto t) {
    using T = decltype(t);
    cpu::add<T>(out.data<T>(), a.data<T>(), b.data<T>(), out.numel());
  });
}

void add_inplace(Tensor& acc, const Tensor& x) {
  check_same("add_inplace", {&acc, &x});
  LATTICE_CHECK(acc.numel() == x.numel(), "ops::add_inplace: acc {} += x {}", shape_str(acc.shape()),
                shape_str(x.shape()));
  if (cuda_f32(acc)) return cuda_backend().add(acc.device().index, fp(acc), fp(acc), fp(x), acc.numel());
  on_cpu("add_inplace", acc, [&](auto t) {
    using T = decltype(t);
    cpu::add_inplace<T>(acc.data<T>(), x.data<T>(), acc.numel());
  });
}

void scale_inplace(Tensor& x, double s) {
  check_same("scale_inplace", {&x});
  on_cpu("scale_inplace", x, [&](auto t) {
    using T = decltype(t);
    cpu::scale_inplace<T>(x.data<T>(), s, x.numel());
  });
}

double sum_squares(const Tensor& x) {
  check_same("sum_squares", {&x});
  return on_cpu("sum_squares", x, [&](auto t) {
    using T = decltype(t);
    return cpu::sum_squares<T>(x.data<T>(), x.numel());
  });
}

bool all_finite(const Tensor& x) {
  check_same("all_finite", {&x});
  return on_cpu("all_finite", x, [&](auto t) {
    using T = decltype(t);
    return cpu::all_finite<T>(x.data<T>(), x.numel());
  });
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
    return cuda_backend().adamw(param.device().index, fp(param), fp(grad), fp(m), fp(v), param.numel(), s.lr,
                                s.beta1, s.beta2, s.eps, s.weight_decay, bc1, bc2, s.grad_scale);
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
  on_cpu("sgd_update", param, [&](auto t) {
    using T = decltype(t);
    cpu::sgd_update<T>(param.data<T>(), grad.data<T>(), use_buf ? momentum.data<T>() : nullptr, param.numel(), lr,
                       mu, weight_decay, grad_scale);
  });
}

}  // namespace lattice::ops
