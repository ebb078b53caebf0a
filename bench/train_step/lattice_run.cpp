#include "train_step/lattice_run.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "comm/self_communicator.h"
#include "core/error.h"
#include "core/kernels/cpu/matmul.h"
#include "core/ops.h"
#include "core/param.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "models/registry.h"
#include "optim/optimizer.h"

namespace lattice::bench {

namespace {

// c (m, n) = a (m, k) @ b (n, k)^T, best GFLOP/s of `reps` runs after a warm-up.
double sgemm_gflops(int64_t m, int64_t n, int64_t k, bool trans_b, int reps) {
  Tensor a = uniform_tensor({m, k}, 1.0f, 1), c = Tensor::zeros({m, n}, DType::f32);
  Tensor b = trans_b ? uniform_tensor({n, k}, 1.0f, 2) : uniform_tensor({k, n}, 1.0f, 2);
  ops::gemm(c, a, b, false, trans_b);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    ops::gemm(c, a, b, false, trans_b);
    best = std::min(best, t.seconds());
  }
  return 2.0 * double(m) * double(n) * double(k) / best / 1e9;
}

// Uniform random token ids in [0, V) for step s: inputs and next-token targets (B, T).
void random_batch(Tensor& x, Tensor& y, int V, int64_t step) {
  RngKey k;
  k.seed = 1;
  k.purpose = RngPurpose::data;
  k.step = uint32_t(step);
  const int64_t B = x.dim(0), T = x.dim(1);
  int32_t *xp = x.data<int32_t>(), *yp = y.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    auto id = [&](int64_t t) {
      return std::min<int32_t>(V - 1, int32_t(rng_uniform(k, uint64_t(b), uint64_t(t)) * float(V)));
    };
    for (int64_t t = 0; t < T; ++t) {
      xp[b * T + t] = id(t);
      yp[b * T + t] = id(t + 1);
    }
  }
}

// N of the FLOP model. For gpt2 it is counted from the parameter table (all
// but wpe) and checked against the model's formula; the other archs report
// the N of their own flops_per_token (the PyTorch scripts check theirs
// against the same formula, and main.cpp compares the two GFLOP/step).
int64_t flop_params(const FlatParams& params, const LanguageModel& model, const BenchConfig& cfg) {
  const double attention = 12.0 * cfg.L * double(cfg.C) * cfg.T, got = model.flops_per_token(cfg.T);
  if (cfg.model.arch != ModelArch::gpt2) return std::llround((got - attention) / 6.0);
  int64_t n = 0;
  for (const ParamEntry& e : params.entries())
    if (e.spec.name != "wpe.weight") n += e.numel;
  double expect = 6.0 * double(n) + attention;
  LATTICE_CHECK(std::fabs(got - expect) <= 1e-9 * expect,
                "bench: Gpt2::flops_per_token({}) = {}, but 6 N + 12 L C T with N = {} gives {}", cfg.T, got, n,
                expect);
  return n;
}

int64_t valid_targets(const Tensor& y) {
  const int32_t* p = y.data<int32_t>();
  return std::count_if(p, p + y.numel(), [](int32_t t) { return t != kIgnoreIndex; });
}

}  // namespace

SgemmRate measure_sgemm(const BenchConfig& cfg, int reps) {
  SgemmRate r;
  r.square = sgemm_gflops(1024, 1024, 1024, false, reps);
  r.model = sgemm_gflops(int64_t(cfg.B) * cfg.T, cfg.F, cfg.C, true, reps);
  return r;
}

LatticeResult run_lattice(const BenchConfig& cfg, int steps, int warmup, HalfMode half, const StageSpan& span,
                          const std::function<void(const std::string&)>& log) {
  const ModelConfig& mcfg = cfg.model;
  const ModelEntry& entry = model_entry(mcfg.arch);
  const TpShard shard{.rank = 0, .size = 1, .vocab_multiple = mcfg.vocab_multiple};  // as the trainer pads
  FlatParams params(model_param_specs(mcfg), DType::f32, Device::cpu(), shard);
  const DType mm = cpu::matmul_dtype();
  if (mm != DType::f32 && half.shadow) params.enable_shadow(mm);
  params.init(1234);
  params.refresh_shadow();
  comm::Group tp = comm::self_group("tp");  // one rank: the tp mappings are no-ops
  std::unique_ptr<LanguageModel> model = build_model(mcfg, params, tp, span);
  if (half.act16) model->set_activation_dtype(mm);
  auto opt = optim::make_optimizer({.name = "adamw", .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1}, params);
  auto ctx = model->make_context(cfg.B, cfg.T);

  LatticeResult res;
  res.n_params = params.numel();
  res.n_flop_params = flop_params(params, *model, cfg);
  res.tokens_per_step = int64_t(cfg.B) * cfg.T;
  res.flops_per_step = model->flops_per_token(cfg.T) * double(res.tokens_per_step);
  res.activation_bytes = ctx->bytes();
  res.workspace_bytes = model->activation_bytes(cfg.B, cfg.T).workspace;

  Tensor x = Tensor::empty({cfg.B, cfg.T}, DType::i32), y = Tensor::empty({cfg.B, cfg.T}, DType::i32);
  std::vector<double> step_s, zero_s, fwd_s, bwd_s, opt_s, data_s;
  int64_t valid_sum = 0;
  for (int i = 0; i < warmup + steps; ++i) {
    const int64_t step = i + 1;
    const StepCoords coords{.seed = 1, .step = step, .sample0 = 0, .train = true};
    Timer data;  // outside the step's time, as in the references
    random_batch(x, y, cfg.data_vocab, i);
    if (entry.prepare_batch) entry.prepare_batch(mcfg, coords, x, y);  // e.g. BERT's masked LM
    const double td = data.seconds();
    const int64_t valid = valid_targets(y);
    LATTICE_CHECK(valid > 0, "bench: step {} has no target to score", i);
    valid_sum += valid;
    double tz = 0, tf = 0, tb = 0, to = 0, loss = 0;
    Timer total;
    {
      ScopedTimer t(tz);
      params.zero_grad();
    }
    {
      ScopedTimer t(tf);
      loss = model->forward(*ctx, x, y, coords) / double(valid);
    }
    {
      ScopedTimer t(tb);
      model->backward(*ctx, 1.0f / float(valid));
    }
    {
      ScopedTimer t(to);
      opt->step(params, 3e-4, step, 1.0f);
      params.refresh_shadow();  // nothing without a shadow
    }
    const double dt = total.seconds();
    const bool timed = i >= warmup;
    log(fmt::format("{} {}: loss {:.4f} {:.1f} ms (zero_grad {:.1f}, forward {:.1f}, backward {:.1f}, adamw {:.1f})",
                    timed ? "step" : "warmup", i, loss, dt * 1e3, tz * 1e3, tf * 1e3, tb * 1e3, to * 1e3));
    if (i == 0) res.first_loss = loss;
    res.last_loss = loss;
    if (!timed) continue;
    step_s.push_back(dt * 1e3), zero_s.push_back(tz * 1e3), fwd_s.push_back(tf * 1e3);
    bwd_s.push_back(tb * 1e3), opt_s.push_back(to * 1e3), data_s.push_back(td * 1e3);
  }
  res.scored_per_step = double(valid_sum) / double(warmup + steps);
  res.step_ms = stats_of(step_s);
  res.zero_ms = stats_of(zero_s), res.fwd_ms = stats_of(fwd_s), res.bwd_ms = stats_of(bwd_s);
  res.opt_ms = stats_of(opt_s), res.data_ms = stats_of(data_s);
  return res;
}

}  // namespace lattice::bench
