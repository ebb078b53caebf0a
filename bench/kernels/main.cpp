// bench_kernels: the non-matmul work of a GPT-2 training step, one op at a
// time, at the shapes of bench_train_step's gpt2 configs (small = 124M at
// B = 4, T = 256; tiny). Each op runs once untimed, then --reps timed runs;
// the table gives the median and min in ms. Use it to compare a kernel
// before and after a change: run the two binaries alternately in one shell
// loop and compare the medians (bench/kernels/compare.py does this).
//
//   bench_kernels [--config small|tiny] [--threads N] [--reps R] [--only SUBSTRING]
//                 [--precision fp32|bf16] [--seq-len T] [--batch B]
//
// --seq-len and --batch replace the config's T and B (e.g. attention at
// T = 1024: --seq-len 1024 --batch 1 --only attention).
//
// --precision bf16 routes the float gemms as runtime.precision: bf16 does on
// the CPU (core/kernels/cpu/matmul_bf16.h), e.g. attention's products.
//
// Inputs are random (fixed seeds); the cross-entropy backward overwrites the
// logits in place, so the timed loop restores them first, outside the timer.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/self_communicator.h"
#include "core/blas_core.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/matmul_bf16.h"
#include "core/ops.h"
#include "core/param.h"
#include "core/threads.h"
#include "core/timer.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "tp/cross_entropy.h"
#include "train_step/bench_config.h"

using namespace lattice;
using namespace lattice::bench;

namespace {

struct Options {
  std::string config = "small", only, precision = "fp32";
  int threads = 2, reps = 9;
  int64_t seq_len = 0, batch = 0;  // 0: the config's
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--config")
      o.config = value();
    else if (a == "--threads")
      o.threads = std::stoi(value());
    else if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--only")
      o.only = value();
    else if (a == "--precision")
      o.precision = value();
    else if (a == "--seq-len")
      o.seq_len = std::stoll(value());
    else if (a == "--batch")
      o.batch = std::stoll(value());
    else
      throw std::invalid_argument("unknown option " + a + " (see the header of bench/kernels/main.cpp)");
  }
  if (o.threads < 1 || o.reps < 1) throw std::invalid_argument("--threads and --reps must be >= 1");
  if (o.seq_len < 0 || o.batch < 0) throw std::invalid_argument("--seq-len and --batch must be >= 1 (0: the config's)");
  if (o.precision != "fp32" && o.precision != "bf16")
    throw std::invalid_argument("--precision " + o.precision + ": expected fp32 or bf16");
  return o;
}

// Times `run` (after `prepare`, untimed) reps times after one warm-up.
struct Kernel {
  std::string name;
  std::function<void()> prepare, run;
};

void time_kernel(const Kernel& k, int reps) {
  std::vector<double> ms;
  for (int r = 0; r <= reps; ++r) {
    if (k.prepare) k.prepare();
    Timer t;
    k.run();
    if (r > 0) ms.push_back(t.seconds() * 1e3);
  }
  const Stats s = stats_of(ms);
  std::printf("| %s | %.3f | %.3f |\n", k.name.c_str(), s.median, s.min);
  std::fflush(stdout);
}

// The tensors of one GPT-2 block and head at the config's shapes.
struct Shapes {
  int64_t B, T, C, NH, V, F;
};

std::vector<Kernel> block_kernels(const Shapes& d) {
  const int64_t B = d.B, T = d.T, C = d.C, NH = d.NH, F = d.F, N = B * T;
  static std::vector<Tensor> keep;  // buffers alive for the lambdas
  auto t = [&](Shape s, float scale, uint64_t seed) {
    keep.push_back(uniform_tensor(std::move(s), scale, seed));
    return keep.back();
  };
  Tensor fch = t({N, F}, 6.0f, 1), fg = t({N, F}, 1.0f, 2), dfg = t({N, F}, 1.0f, 3), dfch = t({N, F}, 1.0f, 4);
  Tensor sw_y = t({N, F / 2}, 1.0f, 25), sw_dy = t({N, F / 2}, 1.0f, 26);
  Tensor x = t({N, C}, 2.0f, 5), y = t({N, C}, 1.0f, 6), dy = t({N, C}, 1.0f, 7), dx = t({N, C}, 1.0f, 8);
  Tensor w = t({C}, 1.0f, 9), b = t({C}, 0.1f, 10), dw = t({C}, 0.0f, 11), db = t({C}, 0.0f, 12);
  Tensor mean = t({N}, 0.0f, 13), rstd = t({N}, 0.0f, 14);
  Tensor qkv = t({B, T, 3 * C}, 2.0f, 15), dqkv = t({B, T, 3 * C}, 1.0f, 16), att = t({B, NH, T, T}, 0.0f, 17);
  Tensor att_c = t(ops::attention_state_shape({.B = B, .T = T, .NH = NH, .HS = C / NH}, DType::f32,
                                              ops::AttentionState::compact_cpu),
                   0.0f, 27);
  Tensor scratch = t({B, NH, T, T}, 0.0f, 18), atty = t({B, T, C}, 1.0f, 19), datty = t({B, T, C}, 1.0f, 20);
  Tensor sm_in = t({B * NH * T, T}, 8.0f, 21), sm_out = t({B * NH * T, T}, 0.0f, 22);
  Tensor sm_dy = t({B * NH * T, T}, 1.0f, 23), sm_dx = t({B * NH * T, T}, 0.0f, 24);
  ops::Dropout none;
  return {
      {"gelu fwd", nullptr, [=]() mutable { ops::gelu_forward(fg, fch); }},
      {"gelu bwd", nullptr, [=]() mutable { ops::gelu_backward(dfch, dfg, fch); }},
      // BERT's exact GELU and LLaMA's SwiGLU at the same (N, F) (SwiGLU reads gate|up of (N, F)).
      {"gelu_erf fwd", nullptr, [=]() mutable { ops::gelu_erf_forward(fg, fch); }},
      {"gelu_erf bwd", nullptr, [=]() mutable { ops::gelu_erf_backward(dfch, dfg, fch); }},
      {"swiglu fwd", nullptr, [=]() mutable { ops::swiglu_forward(sw_y, fch); }},
      {"swiglu bwd", nullptr, [=]() mutable { ops::swiglu_backward(dfch, sw_dy, fch); }},
      {"layernorm fwd", nullptr, [=]() mutable { ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f); }},
      {"layernorm bwd", nullptr, [=]() mutable { ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd); }},
      {"residual add", nullptr, [=]() mutable { ops::add(y, x, dx); }},
      {"dropout(p=0) bwd copy", nullptr, [=]() mutable { ops::dropout_backward(dx, dy, none); }},
      {"attention fwd", nullptr, [=]() mutable { ops::attention_forward(atty, att, qkv, int(NH), none); }},
      {"attention bwd", nullptr,
       [=]() mutable { ops::attention_backward(dqkv, scratch, datty, qkv, att, int(NH), none); }},
      {"attention fwd compact", nullptr, [=]() mutable { ops::attention_forward(atty, att_c, qkv, int(NH), none); }},
      {"attention bwd compact", nullptr,
       [=]() mutable { ops::attention_backward(dqkv, att_c, datty, qkv, att_c, int(NH), none); }},
      {"softmax fwd (B*NH*T, T)", nullptr, [=]() mutable { ops::softmax_forward(sm_out, sm_in); }},
      {"softmax bwd (B*NH*T, T)", nullptr, [=]() mutable { ops::softmax_backward(sm_dx, sm_dy, sm_out); }},
  };
}

std::vector<Kernel> loss_kernels(const Shapes& d) {
  const int64_t N = d.B * d.T, V = d.V;
  static std::vector<Tensor> keep;
  static comm::Group tp = comm::self_group("tp");
  Tensor pristine = uniform_tensor({N, V}, 16.0f, 30), logits = uniform_tensor({N, V}, 16.0f, 30);
  Tensor targets = Tensor::empty({N}, DType::i32), losses = Tensor::empty({N}, DType::f32);
  Tensor lse = Tensor::empty({N}, DType::f32);
  for (int64_t n = 0; n < N; ++n) targets.data<int32_t>()[n] = int32_t((n * 7919) % V);
  keep.insert(keep.end(), {pristine, logits, targets, losses, lse});
  auto restore = [=]() mutable { logits.copy_from(pristine); };
  const float dloss = 1.0f / float(N);
  return {
      {"cross-entropy fwd (vocab-parallel, the model's)", restore,
       [=]() mutable { tp::vocab_parallel_cross_entropy_forward(losses, lse, logits, targets, 0, V, -100, tp); }},
      {"cross-entropy bwd (vocab-parallel, in place)", restore,
       [=]() mutable { tp::vocab_parallel_cross_entropy_backward(logits, logits, lse, targets, dloss, 0, V, -100); }},
      {"cross-entropy fwd (ops, full rows)", restore,
       [=]() mutable { ops::cross_entropy_forward(losses, lse, logits, targets, -100); }},
      {"cross-entropy bwd (ops, in place)", restore,
       [=]() mutable { ops::cross_entropy_backward(logits, logits, lse, targets, dloss, -100); }},
  };
}

// The operand type a float gemm runs with under --precision (cpu::gemm<float>
// follows cpu::set_matmul_dtype), as rows name it.
std::string gemm_dtype_label() {
  const DType mode = cpu::matmul_dtype();
  return mode == DType::f32 ? "fp32" : std::string(dtype_name(mode));
}

// The linear backward of the MLP's first layer and of the LM head (matmuls,
// but under --precision bf16 they also round their inputs to bf16: the
// packing is the non-matmul part), labelled with the dtype they run in.
std::vector<Kernel> linear_kernels(const Shapes& d) {
  const int64_t N = d.B * d.T, C = d.C;
  static std::vector<Tensor> keep;
  std::vector<Kernel> out;
  for (const auto& [name, OC] : {std::pair<std::string, int64_t>{"fc", d.F}, {"lm_head", d.V}}) {
    Tensor dout = uniform_tensor({N, OC}, 1.0f, 60), inp = uniform_tensor({N, C}, 1.0f, 61);
    Tensor w = uniform_tensor({OC, C}, 0.1f, 62), dw = uniform_tensor({OC, C}, 0.0f, 63);
    Tensor dinp = uniform_tensor({N, C}, 0.0f, 64);
    keep.insert(keep.end(), {dout, inp, w, dw, dinp});
    out.push_back({fmt::format("linear bwd {} {} ({} x {} -> {})", name, gemm_dtype_label(), N, C, OC), nullptr,
                   [=]() mutable { ops::linear_backward(&dinp, &dw, nullptr, dout, inp, w); }});
  }
  return out;
}

// AdamW and zero_grad over the model's whole flat buffer, as run_lattice runs them.
std::vector<Kernel> optimizer_kernels(const BenchConfig& cfg) {
  static std::unique_ptr<FlatParams> params;
  static std::unique_ptr<optim::Optimizer> opt;
  const TpShard shard{.rank = 0, .size = 1, .vocab_multiple = cfg.model.vocab_multiple};
  params = std::make_unique<FlatParams>(model_param_specs(cfg.model), DType::f32, Device::cpu(), shard);
  Tensor g = params->grads();
  Tensor r = uniform_tensor({std::min<int64_t>(g.numel(), 1 << 20)}, 1e-3f, 40);
  for (int64_t i = 0; i < g.numel(); i += r.numel()) {
    const int64_t len = std::min(r.numel(), g.numel() - i);
    Tensor dst = g.view(i, {len});
    dst.copy_from(r.view(0, {len}));
  }
  opt = optim::make_optimizer({.name = "adamw", .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1}, *params);
  static int64_t step = 0;
  return {
      {fmt::format("adamw ({} params)", params->numel()), nullptr, [] { opt->step(*params, 3e-4, ++step, 1.0f); }},
      {"zero_grad", nullptr, [] { params->zero_grad(); }},
  };
}

// One head's gemm shapes inside attention (row block 128 of T, head size HS),
// the B * NH heads spread over the threads as attention spreads them, so each
// gemm runs single-threaded: the gemm attention calls (labelled with the
// dtype it runs in: fp32 OpenBLAS, or bf16 under --precision bf16) and, when
// that is not already bf16, the bf16 path next to it.
std::vector<Kernel> attention_gemm_kernels(const Shapes& d) {
  const int64_t T = d.T, HS = d.C / d.NH, rows = std::min<int64_t>(128, T), heads = d.B * d.NH;
  static std::vector<Tensor> keep;
  Tensor q = uniform_tensor({T, HS}, 1.0f, 50), k = uniform_tensor({T, HS}, 1.0f, 51),
         s = uniform_tensor({heads, rows, T}, 0.0f, 53);
  keep.insert(keep.end(), {q, k, s});
  auto qk = [=](bool bf16) mutable {
    const float *qp = q.data<float>(), *kp = k.data<float>();
    float* sp = s.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < heads; ++h) {
      if (bf16)
        cpu::gemm_bf16(false, true, rows, T, HS, 1.0f, qp, HS, kp, HS, 0.0f, sp + h * rows * T, T);
      else
        cpu::gemm<float>(false, true, rows, T, HS, 1.0f, qp, HS, kp, HS, 0.0f, sp + h * rows * T, T);
    }
  };
  const std::string shape = fmt::format("({}x{}x{}) x {} heads", rows, T, HS, heads);
  std::vector<Kernel> out = {
      {"attention q k^T gemm " + gemm_dtype_label() + " " + shape, nullptr, [=]() mutable { qk(false); }}};
  if (cpu::matmul_dtype() != DType::bf16 && cpu::bf16_matmul_available())
    out.push_back({"attention q k^T gemm bf16 " + shape, nullptr, [=]() mutable { qk(true); }});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  reexec_for_blas_kernels(argv);  // the kernels lattice runs (core/blas_core.h)
  try {
    const Options o = parse_options(argc, argv);
    set_num_threads(o.threads);
    cpu::set_matmul_dtype(o.precision == "bf16" ? DType::bf16 : DType::f32);
    const BenchConfig* cfg = nullptr;
    for (const BenchConfig& c : gpt2_bench_configs())
      if (c.name == o.config) cfg = &c;
    if (!cfg) throw std::invalid_argument("--config " + o.config + ": expected small or tiny");
    const Shapes d{o.batch ? o.batch : cfg->B, o.seq_len ? o.seq_len : cfg->T, cfg->C, cfg->NH, cfg->V, cfg->F};
    std::printf("bench_kernels config=%s threads=%d reps=%d precision=%s (B %ld T %ld C %ld NH %ld V %ld F %ld)\n\n",
                o.config.c_str(), o.threads, o.reps, o.precision.c_str(), long(d.B), long(d.T), long(d.C), long(d.NH),
                long(d.V), long(d.F));
    std::printf("| kernel | median ms | min ms |\n|---|---|---|\n");
    std::vector<Kernel> all = block_kernels(d);
    for (auto* more : {&loss_kernels, &attention_gemm_kernels, &linear_kernels})
      for (Kernel& k : (*more)(d)) all.push_back(std::move(k));
    for (Kernel& k : optimizer_kernels(*cfg)) all.push_back(std::move(k));
    for (const Kernel& k : all)
      if (o.only.empty() || k.name.find(o.only) != std::string::npos) time_kernel(k, o.reps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
  }
  return 1;
}
