#include "train_step/op_breakdown.h"

#include "comm/self_communicator.h"
#include "core/kernels/cpu/matmul.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/timer.h"
#include "models/model.h"
#include "tp/cross_entropy.h"

namespace lattice::bench {

namespace {

// Accumulates time, calls and FLOPs per op kind, keeping first-seen order.
class OpClock {
 public:
  template <typename F>
  void time(const std::string& kind, OpPhase phase, double flops, F&& f) {
    OpTime& e = at(kind, phase);
    const double t0 = now_seconds();
    f();
    e.ms += (now_seconds() - t0) * 1e3;
    e.flops += flops;
    e.calls += 1;
  }
  std::vector<OpTime>& entries() { return entries_; }

 private:
  OpTime& at(const std::string& kind, OpPhase phase) {
    for (OpTime& e : entries_)
      if (e.kind == kind) return e;
    entries_.push_back({kind, phase, 0, 0, 0});
    return entries_.back();
  }
  std::vector<OpTime> entries_;
};

// Buffers of one block plus the embedding and head, with the shapes of gpt2.cpp.
struct Buffers {
  int64_t B, T, C, F, NH, V;
  Tensor ids, wte, dwte, wpe;                                   // (B, T), (V, C), (V, C), (T, C)
  Tensor x, ln, mean, rstd, qkv, att, atty, tmp, res, fch, fg;  // activations
  Tensor w_qkv, b_qkv, w_proj, b_proj, w_fc, b_fc, w_fp, b_fp, ln_w, ln_b;
  Tensor m_qkv, m_proj, m_fc, m_fp, m_wte;  // the weights as the matmuls read them (16-bit under bf16)
  Tensor dw_qkv, db_qkv, dw_proj, db_proj, dw_fc, db_fc, dw_fp, db_fp, dln_w, dln_b;
  Tensor dx, dres, c1, c3, f1, f2, dqkv, datt, logits, losses, lse;

  // Activations in `act` (16-bit as the model stores them under bf16/fp16),
  // statistics and gradients of parameters f32.
  Buffers(const BenchConfig& cfg, DType act_dtype)
      : B(cfg.B), T(cfg.T), C(cfg.C), F(4 * int64_t(cfg.C)), NH(cfg.NH), V(cfg.V) {
    ids = Tensor::empty({B, T}, DType::i32);
    RngKey k;
    k.seed = 3;
    k.purpose = RngPurpose::data;
    for (int64_t i = 0; i < B * T; ++i) ids.data<int32_t>()[i] = int32_t(rng_uniform(k, 0, uint64_t(i)) * float(V - 1));
    uint64_t seed = 10;
    auto w = [&](Shape s) { return uniform_tensor(std::move(s), 0.04f, seed++); };
    auto stat = [&](Shape s) { return uniform_tensor(std::move(s), 2.0f, seed++); };
    auto act = [&](Shape s) { return stat(std::move(s)).to(act_dtype); };
    wte = w({V, C}), dwte = Tensor::zeros({V, C}, DType::f32), wpe = w({T, C});
    x = act({B, T, C}), ln = act({B, T, C}), mean = stat({B, T}), rstd = stat({B, T}), qkv = act({B, T, 3 * C});
    att = Tensor::zeros({B, NH, T, T}, act_dtype), atty = act({B, T, C}), tmp = act({B, T, C});
    res = act({B, T, C}), fch = act({B, T, F}), fg = act({B, T, F});
    w_qkv = w({3 * C, C}), b_qkv = w({3 * C}), w_proj = w({C, C}), b_proj = w({C});
    w_fc = w({F, C}), b_fc = w({F}), w_fp = w({C, F}), b_fp = w({C}), ln_w = w({C}), ln_b = w({C});
    dw_qkv = Tensor::zeros(w_qkv.shape(), DType::f32), db_qkv = Tensor::zeros(b_qkv.shape(), DType::f32);
    dw_proj = Tensor::zeros(w_proj.shape(), DType::f32), db_proj = Tensor::zeros(b_proj.shape(), DType::f32);
    dw_fc = Tensor::zeros(w_fc.shape(), DType::f32), db_fc = Tensor::zeros(b_fc.shape(), DType::f32);
    dw_fp = Tensor::zeros(w_fp.shape(), DType::f32), db_fp = Tensor::zeros(b_fp.shape(), DType::f32);
    dln_w = Tensor::zeros({C}, DType::f32), dln_b = Tensor::zeros({C}, DType::f32);
    dx = act({B, T, C}), dres = act({B, T, C}), c1 = act({B, T, C}), c3 = act({B, T, C});
    f1 = act({B, T, F}), f2 = act({B, T, F}), dqkv = act({B, T, 3 * C}), datt = act({B, NH, T, T});
    logits = act({B, T, V}), losses = stat({B, T}), lse = stat({B, T});
    m_qkv = matmul_weight(w_qkv), m_proj = matmul_weight(w_proj), m_fc = matmul_weight(w_fc);
    m_fp = matmul_weight(w_fp), m_wte = matmul_weight(wte);
  }

  // w as the trainer's matmuls read it: its 16-bit shadow under 16-bit
  // matmuls (core/param.h), else w itself.
  static Tensor matmul_weight(const Tensor& w) {
    if (cpu::matmul_dtype() == DType::f32) return w;
    Tensor half = Tensor::empty(w.shape(), cpu::matmul_dtype());
    ops::round_to_half(half, w);
    return half;
  }
};

double lin_flops(const Buffers& b, int64_t oc, int64_t ic) { return 2.0 * double(b.B * b.T) * double(oc * ic); }

void block_forward(OpClock& k, Buffers& b) {
  const double af = 4.0 * double(b.B) * double(b.T * b.T) * double(b.C);
  ops::Dropout none;
  k.time("layernorm fwd", OpPhase::norms, 0,
         [&] { ops::layernorm_forward(b.ln, b.mean, b.rstd, b.x, b.ln_w, b.ln_b, 1e-5f); });
  k.time("linear fwd (blocks)", OpPhase::matmuls, lin_flops(b, 3 * b.C, b.C),
         [&] { ops::linear_forward(b.qkv, b.ln, b.m_qkv, &b.b_qkv); });
  k.time("attention fwd", OpPhase::attention, af,
         [&] { ops::attention_forward(b.atty, b.att, b.qkv, int(b.NH), none); });
  k.time("linear fwd (blocks)", OpPhase::matmuls, lin_flops(b, b.C, b.C),
         [&] { ops::linear_forward(b.tmp, b.atty, b.m_proj, &b.b_proj); });
  k.time("dropout(p=0) + residual", OpPhase::other, 0, [&] {
    ops::dropout_forward(b.tmp, b.tmp, none);
    ops::add(b.res, b.x, b.tmp);
  });
  k.time("layernorm fwd", OpPhase::norms, 0,
         [&] { ops::layernorm_forward(b.ln, b.mean, b.rstd, b.res, b.ln_w, b.ln_b, 1e-5f); });
  k.time("linear fwd (blocks)", OpPhase::matmuls, lin_flops(b, b.F, b.C),
         [&] { ops::linear_forward(b.fch, b.ln, b.m_fc, &b.b_fc); });
  k.time("gelu fwd", OpPhase::activations, 0, [&] { ops::gelu_forward(b.fg, b.fch); });
  k.time("linear fwd (blocks)", OpPhase::matmuls, lin_flops(b, b.C, b.F),
         [&] { ops::linear_forward(b.tmp, b.fg, b.m_fp, &b.b_fp); });
  k.time("dropout(p=0) + residual", OpPhase::other, 0, [&] {
    ops::dropout_forward(b.tmp, b.tmp, none);
    ops::add(b.dx, b.res, b.tmp);
  });
}

void block_backward(OpClock& k, Buffers& b) {
  const double af = 8.0 * double(b.B) * double(b.T * b.T) * double(b.C);
  ops::Dropout none;
  k.time("dropout(p=0) + residual", OpPhase::other, 0, [&] { ops::dropout_backward(b.c1, b.dres, none); });
  k.time("linear bwd (blocks)", OpPhase::matmuls, 2 * lin_flops(b, b.C, b.F),
         [&] { ops::linear_backward(&b.f1, &b.dw_fp, &b.db_fp, b.c1, b.fg, b.m_fp); });
  k.time("gelu bwd", OpPhase::activations, 0, [&] { ops::gelu_backward(b.f2, b.f1, b.fch); });
  k.time("linear bwd (blocks)", OpPhase::matmuls, 2 * lin_flops(b, b.F, b.C),
         [&] { ops::linear_backward(&b.c1, &b.dw_fc, &b.db_fc, b.f2, b.ln, b.m_fc); });
  k.time("layernorm bwd", OpPhase::norms, 0,
         [&] { ops::layernorm_backward(b.c3, b.dln_w, b.dln_b, b.c1, b.res, b.ln_w, b.mean, b.rstd); });
  k.time("dropout(p=0) + residual", OpPhase::other, 0, [&] {
    ops::add_inplace(b.c3, b.dres);
    ops::dropout_backward(b.c1, b.c3, none);
  });
  k.time("linear bwd (blocks)", OpPhase::matmuls, 2 * lin_flops(b, b.C, b.C),
         [&] { ops::linear_backward(&b.tmp, &b.dw_proj, &b.db_proj, b.c1, b.atty, b.m_proj); });
  k.time("attention bwd", OpPhase::attention, af,
         [&] { ops::attention_backward(b.dqkv, b.datt, b.tmp, b.qkv, b.att, int(b.NH), none); });
  k.time("linear bwd (blocks)", OpPhase::matmuls, 2 * lin_flops(b, 3 * b.C, b.C),
         [&] { ops::linear_backward(&b.c1, &b.dw_qkv, &b.db_qkv, b.dqkv, b.ln, b.m_qkv); });
  k.time("layernorm bwd", OpPhase::norms, 0,
         [&] { ops::layernorm_backward(b.dx, b.dln_w, b.dln_b, b.c1, b.x, b.ln_w, b.mean, b.rstd); });
  k.time("dropout(p=0) + residual", OpPhase::other, 0, [&] { ops::add_inplace(b.dx, b.c3); });
}

void one_step(OpClock& k, Buffers& b, int L) {
  const int64_t N = b.B * b.T;
  const double head = lin_flops(b, b.V, b.C);
  k.time("embedding fwd+bwd", OpPhase::other, 0, [&] {
    ops::embedding_forward(b.x, b.ids, b.wte);
    for (int64_t r = 0; r < b.B; ++r) {
      Tensor row = b.x.view(r * b.T * b.C, {b.T, b.C});
      ops::add_inplace(row, b.wpe);
    }
  });
  for (int l = 0; l < L; ++l) block_forward(k, b);
  k.time("layernorm fwd", OpPhase::norms, 0,
         [&] { ops::layernorm_forward(b.ln, b.mean, b.rstd, b.x, b.ln_w, b.ln_b, 1e-5f); });
  k.time("lm_head fwd", OpPhase::matmuls, head, [&] { ops::linear_forward(b.logits, b.ln, b.m_wte, nullptr); });
  const Tensor& y = b.ids;
  static comm::Group tp = comm::self_group("tp");
  k.time("cross-entropy fwd+bwd", OpPhase::cross_entropy, 0,
         [&] { tp::vocab_parallel_cross_entropy_forward(b.losses, b.lse, b.logits, y, 0, b.V, kIgnoreIndex, tp); });
  k.time("cross-entropy fwd+bwd", OpPhase::cross_entropy, 0, [&] {
    tp::vocab_parallel_cross_entropy_backward(b.logits, b.logits, b.lse, y, 1.0f / float(N), 0, b.V, kIgnoreIndex);
  });
  k.time("lm_head bwd", OpPhase::matmuls, 2 * head,
         [&] { ops::linear_backward(&b.c1, &b.dwte, nullptr, b.logits, b.ln, b.m_wte); });
  k.time("layernorm bwd", OpPhase::norms, 0,
         [&] { ops::layernorm_backward(b.dres, b.dln_w, b.dln_b, b.c1, b.x, b.ln_w, b.mean, b.rstd); });
  for (int l = 0; l < L; ++l) block_backward(k, b);
  k.time("embedding fwd+bwd", OpPhase::other, 0, [&] { ops::embedding_backward(b.dwte, b.dx, b.ids); });
}

}  // namespace

const char* phase_name(OpPhase p) {
  switch (p) {
    case OpPhase::matmuls:
      return "matmuls";
    case OpPhase::attention:
      return "attention";
    case OpPhase::norms:
      return "norms";
    case OpPhase::activations:
      return "activations";
    case OpPhase::cross_entropy:
      return "cross-entropy";
    case OpPhase::other:
      return "other";
  }
  return "?";
}

std::vector<double> phase_times(const std::vector<OpTime>& ops) {
  std::vector<double> ms(std::size(kOpPhases), 0.0);
  for (const OpTime& e : ops) ms[size_t(e.phase)] += e.ms;
  return ms;
}

std::vector<OpTime> op_breakdown(const BenchConfig& cfg, int reps, DType act_dtype) {
  Buffers b(cfg, act_dtype);
  OpClock warm, clock;
  one_step(warm, b, cfg.L);
  for (int r = 0; r < reps; ++r) one_step(clock, b, cfg.L);
  std::vector<OpTime> out = clock.entries();
  for (OpTime& e : out) {
    e.calls /= reps;
    e.ms /= reps;
    e.flops /= reps;
  }
  return out;
}

}  // namespace lattice::bench
