// The op dispatch layer, part two (see ops.h): dropout, attention, embedding
// and loss. Part one (ops.cpp) holds matmul, norms, activations, element-wise
// ops and optimizer updates.
#include <atomic>

#include "core/backend.h"
#include "core/cuda/sdpa_plan.h"
#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/attention_cached.h"
#include "core/kernels/cpu/attention_masked.h"
#include "core/kernels/cpu/dropout.h"
#include "core/kernels/cpu/embedding.h"
#include "core/kernels/cpu/gelu_erf.h"
#include "core/kernels/cpu/loss.h"
#include "core/kernels/cpu/loss_shard.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/rope.h"
#include "core/ops.h"
#include "core/ops_internal.h"

namespace lattice::ops {

using namespace detail;

// ---- dropout ------------------------------------------------------------

namespace {
// The shared map of forward (inp -> out) and backward (dout -> dinp).
void dropout_apply(const char* op, Tensor& y, const Tensor& x, const Dropout& d) {
  check_same(op, {&y, &x});
  LATTICE_CHECK(y.numel() == x.numel(), "ops::{}: {} and {} differ in size", op, shape_str(y.shape()),
                shape_str(x.shape()));
  LATTICE_CHECK(d.p >= 0.0f && d.p < 1.0f, "ops::{}: p = {} must lie in [0, 1)", op, d.p);
  int64_t B = x.ndim() ? x.dim(0) : 1, S = B ? x.numel() / B : 0;
  const bool cuda = cuda_f32(y) || cuda_16(y);
  if (cuda && d.p == 0.0f) {
    if (y.raw() != x.raw()) y.copy_from(x);
    return;
  }
  if (cuda_f32(y)) return cuda_backend().dropout(y.device().index, fp(y), fp(x), d.key, d.sample0, d.p, B, S);
  if (cuda) return cuda_backend().dropout16(y.device().index, y.dtype(), y.raw(), x.raw(), d.key, d.sample0, d.p, B, S);
  on_cpu_act(op, y, [&](auto t) {
    using T = decltype(t);
    cpu::dropout_forward<T>(sp<T>(y), sp<T>(x), d.key, d.sample0, d.p, B, S);
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
// The fused path's view of calls of this shape on activations `act` (its sizes do not depend on the io type).
cuda::SdpaShape sdpa_view(const AttentionCalls& c, DType act) {
  return cuda::SdpaShape{.B = c.B,
                         .T = c.T,
                         .NH = c.NH,
                         .HS = c.HS,
                         .causal = c.causal,
                         .key_mask = c.key_mask,
                         .p = c.p,
                         .act16 = is_16bit(act)};
}

// The shape of one call's att and scratch. att may be compact
// (attention_state_shape): on the CPU, the kernels' row statistics (any
// attention op); on CUDA, the state cuDNN's fused attention takes, which
// `compact` (given by the causal ops only) receives.
cpu::AttentionDims attention_dims(const char* op, const Tensor& y, const Tensor& att, const Tensor& qkv, int n_head,
                                  const Dropout& d, int head_offset, bool* compact = nullptr) {
  LATTICE_CHECK(qkv.ndim() == 3 && n_head > 0 && qkv.dim(2) % (3 * int64_t(n_head)) == 0,
                "ops::{}: qkv {} must be (B, T, 3 * NH * HS) with NH = {}", op, shape_str(qkv.shape()), n_head);
  int64_t B = qkv.dim(0), T = qkv.dim(1), HS = qkv.dim(2) / (3 * n_head);
  // A compact state is 1-D (its count can equal B NH T T at a tiny T, where the shape decides).
  const bool full = att.numel() == B * n_head * T * T && att.ndim() != 1;
  const bool cpu_compact = !full && att.device().is_cpu() && att.ndim() == 1 &&
                           att.numel() == cpu::attention_compact_elems(att.dtype(), B, n_head, T);
  const bool cuda_compact = compact && !full && attention_state_on(att.device()) == AttentionState::fused_cuda &&
                            att.numel() == cuda::sdpa_saved_elems(sdpa_view({B, T, n_head, HS}, att.dtype()));
  LATTICE_CHECK((!y.defined() || y.numel() == B * T * n_head * HS) && (full || cpu_compact || cuda_compact),
                "ops::{}: qkv {} needs (B, T, C) = ({}, {}, {}) and att (B, NH, T, T) or the compact state "
                "(ops::attention_state_shape), got {} and {}",
                op, shape_str(qkv.shape()), B, T, n_head * HS, y.defined() ? shape_str(y.shape()) : "no output",
                shape_str(att.shape()));
  LATTICE_CHECK(d.p >= 0.0f && d.p < 1.0f && head_offset >= 0, "ops::{}: p = {} must lie in [0, 1), head_offset {}", op,
                d.p, head_offset);
  LATTICE_CHECK(std::max(T, 3 * n_head * HS) <= INT_MAX, "ops::{}: qkv {} exceeds the BLAS int range", op,
                shape_str(qkv.shape()));
  if (compact) *compact = cuda_compact;
  return {B, T, n_head, HS, head_offset, cpu_compact};
}

// A key mask (null: none): i32, one flag per (b, t).
void check_key_mask(const char* op, const Tensor* key_mask, const Tensor& qkv, const cpu::AttentionDims& ad) {
  if (!key_mask) return;
  check_ids(op, *key_mask, qkv);
  LATTICE_CHECK(key_mask->numel() == ad.B * ad.T, "ops::{}: key_mask {} for (B, T) = ({}, {})", op,
                shape_str(key_mask->shape()), ad.B, ad.T);
}

// dqkv as qkv; scratch as att, or on the CPU (whose kernels never read it)
// also empty (attention_scratch_shape).
void check_backward_buffers(const char* op, const Tensor& dqkv, const Tensor& scratch, const Tensor& qkv,
                            const Tensor& att) {
  const bool scratch_ok = scratch.numel() == att.numel() || (scratch.device().is_cpu() && scratch.numel() == 0);
  LATTICE_CHECK(dqkv.numel() == qkv.numel() && scratch_ok,
                "ops::{}: dqkv {} scratch {} for qkv {} att {} (scratch: att's shape{})", op, shape_str(dqkv.shape()),
                shape_str(scratch.shape()), shape_str(qkv.shape()), shape_str(att.shape()),
                scratch.device().is_cpu() ? ", or empty on the CPU" : "");
}

// 16-bit attention hands its 16-bit operands to the matmuls as they are, so
// the matmuls must run in that type (runtime.precision).
void check_attention_matmuls(const char* op, const Tensor& act) {
  if (!is_16bit(act.dtype())) return;
  const DType mm = act.device().is_cuda() ? cuda_backend().matmul_dtype() : cpu::matmul_dtype();
  LATTICE_CHECK(mm == act.dtype(),
                "ops::{}: {} activations on {} need the matmuls in {} (runtime.precision {}), but they run in {}", op,
                dtype_name(act.dtype()), act.device().str(), dtype_name(act.dtype()),
                act.dtype() == DType::bf16 ? "bf16" : "fp16", dtype_name(mm));
}

// The backend's description of one attention call.
CudaAttentionArgs cuda_attention(const cpu::AttentionDims& ad, const Dropout& d, bool causal, const Tensor* key_mask,
                                 bool compact = false) {
  CudaAttentionArgs a;
  a.B = ad.B, a.T = ad.T, a.NH = ad.NH, a.HS = ad.HS, a.head_offset = ad.head_offset;
  a.causal = causal;
  a.compact_state = compact;
  a.key_mask = key_mask ? ip(*key_mask) : nullptr;  // (B, T) i32 on the device (Tensor::data is host-only)
  a.key = d.key, a.sample0 = d.sample0, a.p = d.p;
  return a;
}
}  // namespace

Shape attention_state_shape(const AttentionCalls& c, DType act, AttentionState where) {
  LATTICE_CHECK(c.B > 0 && c.T > 0 && c.NH > 0 && c.HS > 0,
                "ops::attention_state_shape: empty shape B {} T {} NH {} HS {}", c.B, c.T, c.NH, c.HS);
  if (where == AttentionState::compact_cpu) return {cpu::attention_compact_elems(act, c.B, c.NH, c.T)};
  // Only the causal ops take CUDA's compact state (attention_masked_*'s backward reads the key mask from P).
  const cuda::SdpaShape s = sdpa_view(c, act);
  if (where != AttentionState::fused_cuda || !c.causal || !cuda::sdpa_supported(s, nullptr))
    return {c.B, c.NH, c.T, c.T};
  return {cuda::sdpa_saved_elems(s)};
}

Shape attention_scratch_shape(const AttentionCalls& c, DType act, AttentionState where) {
  if (where == AttentionState::full_cpu || where == AttentionState::compact_cpu) return {0};
  return attention_state_shape(c, act, where);
}

namespace {
std::atomic<bool> g_cpu_attention_compact{true};
}  // namespace

void set_cpu_attention_compact(bool compact) { g_cpu_attention_compact = compact; }
bool cpu_attention_compact() { return g_cpu_attention_compact; }

AttentionState attention_state_of(DeviceType dev, bool matmuls_16bit, bool cpu_compact) {
  if (dev == DeviceType::cuda) return matmuls_16bit ? AttentionState::fused_cuda : AttentionState::full_cuda;
  return cpu_compact ? AttentionState::compact_cpu : AttentionState::full_cpu;
}

AttentionState attention_state_on(Device dev) {
  return attention_state_of(dev.type, dev.is_cuda() && is_16bit(cuda_backend().matmul_dtype()),
                            cpu_attention_compact());
}

namespace {
// attention_forward and attention_masked_forward, and with out null their
// _probs twins (att alone, the full state only). key_mask: masked only.
void attention_forward_any(const char* op, Tensor* out, Tensor& att, const Tensor& qkv, bool causal,
                           const Tensor* key_mask, int n_head, const Dropout& d, int head_offset) {
  if (out)
    check_same(op, {out, &att, &qkv});
  else
    check_same(op, {&att, &qkv});
  bool compact = false;
  // Only the causal ops take CUDA's compact state (attention_masked_*'s backward reads the key mask from P).
  cpu::AttentionDims ad =
      attention_dims(op, out ? *out : Tensor(), att, qkv, n_head, d, head_offset, causal ? &compact : nullptr);
  LATTICE_CHECK(out || (!ad.compact_state && !compact),
                "ops::{}: att {} must be the full (B, NH, T, T) state: a compact one holds no probabilities", op,
                shape_str(att.shape()));
  check_key_mask(op, key_mask, qkv, ad);
  check_attention_matmuls(op, att);
  if (cuda_f32(att))
    return cuda_backend().attention_forward(att.device().index, out ? fp(*out) : nullptr, fp(att), fp(qkv),
                                            cuda_attention(ad, d, causal, key_mask, compact));
  if (cuda_16(att))
    return cuda_backend().attention_forward16(att.device().index, att.dtype(), out ? out->raw() : nullptr, att.raw(),
                                              qkv.raw(), cuda_attention(ad, d, causal, key_mask, compact));
  const int32_t* mask = key_mask ? key_mask->data<int32_t>() : nullptr;
  on_cpu_act(op, att, [&](auto t) {
    using T = decltype(t);
    T* o = out ? sp<T>(*out) : nullptr;
    if (causal)
      cpu::attention_forward<T>(o, sp<T>(att), sp<T>(qkv), d.key, d.sample0, d.p, ad);
    else
      cpu::attention_masked_forward<T>(o, sp<T>(att), sp<T>(qkv), mask, d.key, d.sample0, d.p, ad);
  });
}
}  // namespace

void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int n_head, const Dropout& d, int head_offset) {
  attention_forward_any("attention_forward", &out, att, qkv, true, nullptr, n_head, d, head_offset);
}

void attention_probs(Tensor& att, const Tensor& qkv, int n_head, const Dropout& d, int head_offset) {
  attention_forward_any("attention_probs", nullptr, att, qkv, true, nullptr, n_head, d, head_offset);
}

void attention_cached(Tensor& out, Tensor& cache, const Tensor& qkv, int n_head, int64_t pos0, int n_kv_head) {
  check_same("attention_cached", {&out, &cache, &qkv});
  LATTICE_CHECK(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0 && n_head > 0 && qkv.dim(2) / 3 % n_head == 0,
                "ops::attention_cached: qkv {} must be (B, Tn, 3 C) with C divisible by n_head {}",
                shape_str(qkv.shape()), n_head);
  const int64_t B = qkv.dim(0), Tn = qkv.dim(1), C = qkv.dim(2) / 3;
  const int KV = n_kv_head == 0 ? n_head : n_kv_head;
  LATTICE_CHECK(KV > 0 && n_head % KV == 0, "ops::attention_cached: n_head {} is not a multiple of n_kv_head {}",
                n_head, KV);
  const int64_t KVW = 2 * KV * (C / n_head);  // a cache row
  LATTICE_CHECK(out.shape() == (Shape{B, Tn, C}), "ops::attention_cached: out {} must be ({}, {}, {})",
                shape_str(out.shape()), B, Tn, C);
  LATTICE_CHECK(cache.ndim() == 3 && cache.dim(0) == B && cache.dim(2) == KVW,
                "ops::attention_cached: cache {} must be ({}, capacity, {})", shape_str(cache.shape()), B, KVW);
  LATTICE_CHECK(pos0 >= 0 && pos0 + Tn <= cache.dim(1),
                "ops::attention_cached: positions [{}, {}) do not fit a cache of {} positions", pos0, pos0 + Tn,
                cache.dim(1));
  const cpu::CachedAttentionDims cd{B, Tn, n_head, C / n_head, KV, cache.dim(1), pos0};
  on_cpu("attention_cached", out, [&](auto t) {
    using T = decltype(t);
    cpu::attention_cached<T>(sp<T>(out), sp<T>(cache), sp<T>(qkv), cd);
  });
}

void attention_backward(Tensor& dqkv, Tensor& scratch, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int n_head, const Dropout& d, int head_offset) {
  check_same("attention_backward", {&dqkv, &scratch, &dout, &qkv, &att});
  bool compact = false;
  cpu::AttentionDims ad = attention_dims("attention_backward", dout, att, qkv, n_head, d, head_offset, &compact);
  check_backward_buffers("attention_backward", dqkv, scratch, qkv, att);
  check_attention_matmuls("attention_backward", dqkv);
  if (cuda_f32(dqkv))
    return cuda_backend().attention_backward(dqkv.device().index, fp(dqkv), fp(scratch), fp(dout), fp(qkv), fp(att),
                                             cuda_attention(ad, d, true, nullptr, compact));
  if (cuda_16(dqkv))
    return cuda_backend().attention_backward16(dqkv.device().index, dqkv.dtype(), dqkv.raw(), scratch.raw(), dout.raw(),
                                               qkv.raw(), att.raw(), cuda_attention(ad, d, true, nullptr, compact));
  on_cpu_act("attention_backward", dqkv, [&](auto t) {
    using T = decltype(t);
    cpu::attention_backward<T>(sp<T>(dqkv), sp<T>(dout), sp<T>(qkv), sp<T>(att), d.key, d.sample0, d.p, ad);
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
  check_same("embedding_forward", {&out});
  check_master("embedding_forward", out, {&weight});
  Rows r = embedding_dims("embedding_forward", out, ids, weight);
  if (cuda_f32(out))
    return cuda_backend().embedding_forward(out.device().index, fp(out), ip(ids), fp(weight), vocab_start, r.n,
                                            weight.dim(0), r.c);
  if (cuda_16(out))
    return cuda_backend().embedding_forward16(out.device().index, out.dtype(), out.raw(), ip(ids), fp(weight),
                                              vocab_start, r.n, weight.dim(0), r.c);
  on_cpu_act("embedding_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::embedding_forward<T>(sp<T>(out), ids.data<int32_t>(), sp<compute_t<T>>(weight), vocab_start, r.n,
                              weight.dim(0), r.c);
  });
}

void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids, int64_t vocab_start) {
  check_same("embedding_backward", {&dout});
  check_master("embedding_backward", dout, {&dweight});
  Rows r = embedding_dims("embedding_backward", dout, ids, dweight);
  if (cuda_f32(dout))
    return cuda_backend().embedding_backward(dweight.device().index, fp(dweight), fp(dout), ip(ids), vocab_start, r.n,
                                             dweight.dim(0), r.c);
  if (cuda_16(dout))
    return cuda_backend().embedding_backward16(dout.device().index, dout.dtype(), fp(dweight), dout.raw(), ip(ids),
                                               vocab_start, r.n, dweight.dim(0), r.c);
  on_cpu_act("embedding_backward", dout, [&](auto t) {
    using T = decltype(t);
    cpu::embedding_backward<T>(sp<compute_t<T>>(dweight), sp<T>(dout), ids.data<int32_t>(), vocab_start, r.n,
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
  // CPU targets are checked here; GPU targets are not copied back for it (a
  // device-to-host sync per call): the kernels read no logit for an
  // out-of-range target and give that row a NaN loss instead.
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

void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets, int ignore_index) {
  check_same("cross_entropy_forward", {&logits});
  check_master("cross_entropy_forward", logits, {&losses, &lse});
  Rows r = cross_entropy_dims("cross_entropy_forward", logits, targets, ignore_index);
  LATTICE_CHECK(losses.numel() == r.n && lse.numel() == r.n, "ops::cross_entropy_forward: losses {} lse {} for N = {}",
                shape_str(losses.shape()), shape_str(lse.shape()), r.n);
  if (cuda_f32(logits))
    return cuda_backend().cross_entropy_forward(logits.device().index, fp(losses), fp(lse), fp(logits), ip(targets),
                                                ignore_index, r.n, r.c);
  if (cuda_16(logits))
    return cuda_backend().cross_entropy_forward16(logits.device().index, logits.dtype(), fp(losses), fp(lse),
                                                  logits.raw(), ip(targets), ignore_index, r.n, r.c);
  on_cpu_act("cross_entropy_forward", logits, [&](auto t) {
    using T = decltype(t);
    using F = compute_t<T>;
    cpu::cross_entropy_forward<T>(sp<F>(losses), sp<F>(lse), sp<T>(logits), targets.data<int32_t>(), ignore_index, r.n,
                                  r.c);
  });
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float dloss, int ignore_index) {
  check_same("cross_entropy_backward", {&dlogits, &logits});
  check_master("cross_entropy_backward", logits, {&lse});
  Rows r = cross_entropy_dims("cross_entropy_backward", logits, targets, ignore_index);
  LATTICE_CHECK(dlogits.numel() == logits.numel() && lse.numel() == r.n,
                "ops::cross_entropy_backward: dlogits {} lse {} for logits {}", shape_str(dlogits.shape()),
                shape_str(lse.shape()), shape_str(logits.shape()));
  if (cuda_f32(logits))
    return cuda_backend().shard_cross_entropy_backward(logits.device().index, fp(dlogits), fp(logits), fp(lse),
                                                       ip(targets), dloss, 0, r.c, ignore_index, r.n, r.c);
  if (cuda_16(logits))
    return cuda_backend().shard_cross_entropy_backward16(logits.device().index, logits.dtype(), dlogits.raw(),
                                                         logits.raw(), fp(lse), ip(targets), dloss, 0, r.c,
                                                         ignore_index, r.n, r.c);
  on_cpu_act("cross_entropy_backward", logits, [&](auto t) {
    using T = decltype(t);
    using F = compute_t<T>;
    cpu::cross_entropy_backward<T>(sp<T>(dlogits), sp<T>(logits), sp<F>(lse), targets.data<int32_t>(), F(dloss),
                                   ignore_index, r.n, r.c);
  });
}

// ---- cross-entropy over a column shard ----------------------------------

namespace {
// Checks logits (N, K), i32 targets (N) and the per-row tensors; returns (N, K).
Rows shard_loss_dims(const char* op, const Tensor& logits, const Tensor& targets,
                     std::initializer_list<std::pair<const Tensor*, int64_t>> per_row) {
  check_ids(op, targets, logits);
  Rows r = rows_of(logits);
  LATTICE_CHECK(targets.numel() == r.n, "ops::{}: targets {} for logits {} (N, K)", op, shape_str(targets.shape()),
                shape_str(logits.shape()));
  for (auto [t, rows] : per_row)
    LATTICE_CHECK(t->numel() == rows * r.n, "ops::{}: a per-row tensor is {}, expected {} x N = {} elements", op,
                  shape_str(t->shape()), rows, rows * r.n);
  return r;
}
}  // namespace

void shard_row_max(Tensor& row_max, const Tensor& logits, int64_t n_valid) {
  check_same("shard_row_max", {&logits});
  check_master("shard_row_max", logits, {&row_max});
  Rows r = rows_of(logits);
  LATTICE_CHECK(row_max.numel() == r.n, "ops::shard_row_max: row_max {} for logits {}", shape_str(row_max.shape()),
                shape_str(logits.shape()));
  if (cuda_f32(logits))
    return cuda_backend().shard_row_max(logits.device().index, fp(row_max), fp(logits), n_valid, r.n, r.c);
  if (cuda_16(logits))
    return cuda_backend().shard_row_max16(logits.device().index, logits.dtype(), fp(row_max), logits.raw(), n_valid,
                                          r.n, r.c);
  on_cpu_act("shard_row_max", logits, [&](auto t) {
    using T = decltype(t);
    cpu::shard_row_max<T>(sp<compute_t<T>>(row_max), sp<T>(logits), n_valid, r.n, r.c);
  });
}

void shard_softmax_partials(Tensor& sums, const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                            int64_t col_start, int64_t n_valid) {
  check_same("shard_softmax_partials", {&logits});
  check_master("shard_softmax_partials", logits, {&sums, &row_max});
  Rows r = shard_loss_dims("shard_softmax_partials", logits, targets, {{&sums, 2}, {&row_max, 1}});
  if (cuda_f32(logits))
    return cuda_backend().shard_softmax_partials(logits.device().index, fp(sums), fp(logits), fp(row_max), ip(targets),
                                                 col_start, n_valid, r.n, r.c);
  if (cuda_16(logits))
    return cuda_backend().shard_softmax_partials16(logits.device().index, logits.dtype(), fp(sums), logits.raw(),
                                                   fp(row_max), ip(targets), col_start, n_valid, r.n, r.c);
  on_cpu_act("shard_softmax_partials", logits, [&](auto t) {
    using T = decltype(t);
    using F = compute_t<T>;
    cpu::shard_softmax_partials<T>(sp<F>(sums), sp<T>(logits), sp<F>(row_max), targets.data<int32_t>(), col_start,
                                   n_valid, r.n, r.c);
  });
}

void shard_softmax_stats(Tensor& row_max, Tensor& sums, const Tensor& logits, const Tensor& targets, int64_t col_start,
                         int64_t n_valid) {
  check_same("shard_softmax_stats", {&logits});
  check_master("shard_softmax_stats", logits, {&row_max, &sums});
  Rows r = shard_loss_dims("shard_softmax_stats", logits, targets, {{&sums, 2}, {&row_max, 1}});
  if (logits.device().is_cuda()) {  // the two kernels back to back
    shard_row_max(row_max, logits, n_valid);
    return shard_softmax_partials(sums, logits, row_max, targets, col_start, n_valid);
  }
  on_cpu_act("shard_softmax_stats", logits, [&](auto t) {
    using T = decltype(t);
    using F = compute_t<T>;
    cpu::shard_softmax_stats<T>(sp<F>(row_max), sp<F>(sums), sp<T>(logits), targets.data<int32_t>(), col_start, n_valid,
                                r.n, r.c);
  });
}

void cross_entropy_from_partials(Tensor& losses, Tensor& lse, const Tensor& row_max, const Tensor& sums,
                                 const Tensor& targets, int ignore_index) {
  check_same("cross_entropy_from_partials", {&losses, &lse, &row_max, &sums});
  check_ids("cross_entropy_from_partials", targets, losses);
  const int64_t N = targets.numel();
  LATTICE_CHECK(losses.numel() == N && lse.numel() == N && row_max.numel() == N && sums.numel() == 2 * N,
                "ops::cross_entropy_from_partials: losses {} lse {} row_max {} sums {} for targets {} (N)",
                shape_str(losses.shape()), shape_str(lse.shape()), shape_str(row_max.shape()), shape_str(sums.shape()),
                shape_str(targets.shape()));
  if (cuda_f32(losses))
    return cuda_backend().cross_entropy_from_partials(losses.device().index, fp(losses), fp(lse), fp(row_max), fp(sums),
                                                      ip(targets), ignore_index, N);
  on_cpu("cross_entropy_from_partials", losses, [&](auto t) {
    using T = decltype(t);
    cpu::cross_entropy_from_partials<T>(losses.data<T>(), lse.data<T>(), row_max.data<T>(), sums.data<T>(),
                                        targets.data<int32_t>(), ignore_index, N);
  });
}

void shard_cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                  float dloss, int64_t col_start, int64_t n_valid, int ignore_index) {
  check_same("shard_cross_entropy_backward", {&dlogits, &logits});
  check_master("shard_cross_entropy_backward", logits, {&lse});
  Rows r = shard_loss_dims("shard_cross_entropy_backward", logits, targets, {{&lse, 1}});
  LATTICE_CHECK(dlogits.numel() == logits.numel(), "ops::shard_cross_entropy_backward: dlogits {} for logits {}",
                shape_str(dlogits.shape()), shape_str(logits.shape()));
  if (cuda_f32(logits))
    return cuda_backend().shard_cross_entropy_backward(logits.device().index, fp(dlogits), fp(logits), fp(lse),
                                                       ip(targets), dloss, col_start, n_valid, ignore_index, r.n, r.c);
  if (cuda_16(logits))
    return cuda_backend().shard_cross_entropy_backward16(logits.device().index, logits.dtype(), dlogits.raw(),
                                                         logits.raw(), fp(lse), ip(targets), dloss, col_start, n_valid,
                                                         ignore_index, r.n, r.c);
  on_cpu_act("shard_cross_entropy_backward", logits, [&](auto t) {
    using T = decltype(t);
    using F = compute_t<T>;
    cpu::shard_cross_entropy_backward<T>(sp<T>(dlogits), sp<T>(logits), sp<F>(lse), targets.data<int32_t>(), F(dloss),
                                         col_start, n_valid, ignore_index, r.n, r.c);
  });
}

// ---- BERT: bidirectional attention with a key padding mask, exact GELU ----

void attention_masked_forward(Tensor& out, Tensor& att, const Tensor& qkv, const Tensor* key_mask, int n_head,
                              const Dropout& d, int head_offset) {
  attention_forward_any("attention_masked_forward", &out, att, qkv, false, key_mask, n_head, d, head_offset);
}

void attention_masked_probs(Tensor& att, const Tensor& qkv, const Tensor* key_mask, int n_head, const Dropout& d,
                            int head_offset) {
  attention_forward_any("attention_masked_probs", nullptr, att, qkv, false, key_mask, n_head, d, head_offset);
}

void attention_masked_backward(Tensor& dqkv, Tensor& scratch, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                               const Tensor* key_mask, int n_head, const Dropout& d, int head_offset) {
  check_same("attention_masked_backward", {&dqkv, &scratch, &dout, &qkv, &att});
  cpu::AttentionDims ad = attention_dims("attention_masked_backward", dout, att, qkv, n_head, d, head_offset);
  check_key_mask("attention_masked_backward", key_mask, qkv, ad);
  check_backward_buffers("attention_masked_backward", dqkv, scratch, qkv, att);
  check_attention_matmuls("attention_masked_backward", dqkv);
  if (cuda_f32(dqkv))  // backward reads the mask from P (zero where masked)
    return cuda_backend().attention_backward(dqkv.device().index, fp(dqkv), fp(scratch), fp(dout), fp(qkv), fp(att),
                                             cuda_attention(ad, d, false, nullptr));
  if (cuda_16(dqkv))
    return cuda_backend().attention_backward16(dqkv.device().index, dqkv.dtype(), dqkv.raw(), scratch.raw(), dout.raw(),
                                               qkv.raw(), att.raw(), cuda_attention(ad, d, false, nullptr));
  const int32_t* mask = key_mask ? key_mask->data<int32_t>() : nullptr;
  on_cpu_act("attention_masked_backward", dqkv, [&](auto t) {
    using T = decltype(t);
    cpu::attention_masked_backward<T>(sp<T>(dqkv), sp<T>(dout), sp<T>(qkv), sp<T>(att), mask, d.key, d.sample0, d.p,
                                      ad);
  });
}

void gelu_erf_forward(Tensor& out, const Tensor& inp) {
  check_same("gelu_erf_forward", {&out, &inp});
  LATTICE_CHECK(out.numel() == inp.numel(), "ops::gelu_erf_forward: out {} for inp {}", shape_str(out.shape()),
                shape_str(inp.shape()));
  if (cuda_f32(out)) return cuda_backend().gelu_erf_forward(out.device().index, fp(out), fp(inp), out.numel());
  if (cuda_16(out))
    return cuda_backend().gelu_erf_forward16(out.device().index, out.dtype(), out.raw(), inp.raw(), out.numel());
  on_cpu_act("gelu_erf_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::gelu_erf_forward<T>(sp<T>(out), sp<T>(inp), out.numel());
  });
}

void gelu_erf_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  check_same("gelu_erf_backward", {&dinp, &dout, &inp});
  LATTICE_CHECK(dinp.numel() == inp.numel() && dout.numel() == inp.numel(),
                "ops::gelu_erf_backward: dinp {} dout {} for inp {}", shape_str(dinp.shape()), shape_str(dout.shape()),
                shape_str(inp.shape()));
  if (cuda_f32(dinp))
    return cuda_backend().gelu_erf_backward(dinp.device().index, fp(dinp), fp(dout), fp(inp), dinp.numel());
  if (cuda_16(dinp))
    return cuda_backend().gelu_erf_backward16(dinp.device().index, dinp.dtype(), dinp.raw(), dout.raw(), inp.raw(),
                                              dinp.numel());
  on_cpu_act("gelu_erf_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::gelu_erf_backward<T>(sp<T>(dinp), sp<T>(dout), sp<T>(inp), dinp.numel());
  });
}

// ---- rotary position embeddings and grouped k/v heads ---------------------

namespace {
cpu::RopeDims rope_dims(const char* op, const Tensor& y, const Tensor& x, int n_rot, int64_t HS, double theta) {
  LATTICE_CHECK(x.ndim() == 3 && y.numel() == x.numel(), "ops::{}: inp {} must be (B, T, W), out {} alike", op,
                shape_str(x.shape()), shape_str(y.shape()));
  LATTICE_CHECK(HS > 0 && HS % 2 == 0 && n_rot >= 0 && n_rot * HS <= x.dim(2) && theta > 0,
                "ops::{}: {} heads of size {} (even) must fit in {} columns, theta {} > 0", op, n_rot, HS, x.dim(2),
                theta);
  return {x.dim(0), x.dim(1), x.dim(2), n_rot, HS, theta};
}

struct KvDims {
  int64_t N, NH, KV, HS;
};
KvDims kv_dims(const char* op, const Tensor& packed, const Tensor& expanded, int NH, int KV) {
  LATTICE_CHECK(NH > 0 && KV > 0 && NH % KV == 0, "ops::{}: n_head {} is not a multiple of n_kv_head {}", op, NH, KV);
  Rows r = rows_of(expanded);
  LATTICE_CHECK(r.c % (3 * int64_t(NH)) == 0, "ops::{}: {} is not (N, 3 NH HS) with NH = {}", op,
                shape_str(expanded.shape()), NH);
  const int64_t HS = r.c / (3 * int64_t(NH));
  LATTICE_CHECK(packed.numel() == r.n * (NH + 2 * KV) * HS, "ops::{}: {} is not (N, (NH + 2 KV) HS) = ({}, {})", op,
                shape_str(packed.shape()), r.n, (NH + 2 * KV) * HS);
  return {r.n, NH, KV, HS};
}
}  // namespace

void rope_forward(Tensor& out, const Tensor& inp, int n_rot, int64_t head_size, double theta, int64_t pos0) {
  check_same("rope_forward", {&out, &inp});
  cpu::RopeDims d = rope_dims("rope_forward", out, inp, n_rot, head_size, theta);
  LATTICE_CHECK(pos0 >= 0, "ops::rope_forward: position {} of row 0 must be >= 0", pos0);
  d.pos0 = pos0;
  if (cuda_f32(out)) return cuda_backend().rope(out.device().index, fp(out), fp(inp), d, 1.0);
  if (cuda_16(out)) return cuda_backend().rope16(out.device().index, out.dtype(), out.raw(), inp.raw(), d, 1.0);
  on_cpu_act("rope_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::rope_forward<T>(sp<T>(out), sp<T>(inp), d);
  });
}

void rope_backward(Tensor& dinp, const Tensor& dout, int n_rot, int64_t head_size, double theta) {
  check_same("rope_backward", {&dinp, &dout});
  cpu::RopeDims d = rope_dims("rope_backward", dinp, dout, n_rot, head_size, theta);
  if (cuda_f32(dinp)) return cuda_backend().rope(dinp.device().index, fp(dinp), fp(dout), d, -1.0);
  if (cuda_16(dinp)) return cuda_backend().rope16(dinp.device().index, dinp.dtype(), dinp.raw(), dout.raw(), d, -1.0);
  on_cpu_act("rope_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::rope_backward<T>(sp<T>(dinp), sp<T>(dout), d);
  });
}

void repeat_kv_forward(Tensor& out, const Tensor& inp, int n_head, int n_kv_head) {
  check_same("repeat_kv_forward", {&out, &inp});
  KvDims d = kv_dims("repeat_kv_forward", inp, out, n_head, n_kv_head);
  if (cuda_f32(out))
    return cuda_backend().repeat_kv_forward(out.device().index, fp(out), fp(inp), d.N, d.NH, d.KV, d.HS);
  if (cuda_16(out))
    return cuda_backend().repeat_kv_forward16(out.device().index, out.dtype(), out.raw(), inp.raw(), d.N, d.NH, d.KV,
                                              d.HS);
  on_cpu_act("repeat_kv_forward", out, [&](auto t) {
    using T = decltype(t);
    cpu::repeat_kv_forward<T>(sp<T>(out), sp<T>(inp), d.N, d.NH, d.KV, d.HS);
  });
}

void repeat_kv_backward(Tensor& dinp, const Tensor& dout, int n_head, int n_kv_head) {
  check_same("repeat_kv_backward", {&dinp, &dout});
  KvDims d = kv_dims("repeat_kv_backward", dinp, dout, n_head, n_kv_head);
  if (cuda_f32(dinp))
    return cuda_backend().repeat_kv_backward(dinp.device().index, fp(dinp), fp(dout), d.N, d.NH, d.KV, d.HS);
  if (cuda_16(dinp))
    return cuda_backend().repeat_kv_backward16(dinp.device().index, dinp.dtype(), dinp.raw(), dout.raw(), d.N, d.NH,
                                               d.KV, d.HS);
  on_cpu_act("repeat_kv_backward", dinp, [&](auto t) {
    using T = decltype(t);
    cpu::repeat_kv_backward<T>(sp<T>(dinp), sp<T>(dout), d.N, d.NH, d.KV, d.HS);
  });
}

}  // namespace lattice::ops
