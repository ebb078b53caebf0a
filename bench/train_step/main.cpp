// bench_train_step: the single-rank training step (zero_grad + forward +
// backward + AdamW) of a Lattice model (GPT-2, LLaMA or BERT, built through the
// registry), next to a PyTorch reference of the same model on the same shapes,
// threads and FLOP model. Prints per-step lines while it runs, then a markdown
// table and raw RESULT lines for BENCHMARKS.md.
//
//   bench_train_step [--arch gpt2|llama|bert|all[,...]] [--config NAME|all|FILE.yaml]
//                    [--threads N[,N...]] [--steps S] [--warmup W] [--torch]
//                    [--reference PATH] [--python PATH] [--peak GFLOPS] [--no-breakdown]
//                    [--precision fp32|bf16|bf16-f32act|bf16-per-call] [--recompute-attention]
//                    [--cpu-attention compact|full]
//
// --arch (default gpt2): gpt2 runs the built-in shapes small and tiny (--config
// small|tiny|all, reference shared/reference/torch_gpt2_bench.py, or
// --reference PATH); llama and bert run configs/<arch>-tiny.yaml (--config
// tiny|all) or the given FILE.yaml, against bench/train_step/torch_<arch>_bench.py,
// which gets the shapes of the config on its command line.
//
// --peak 0 (default) measures the float matmul rate per thread count in this
// run (sgemm; the bf16 gemm under --precision bf16, and named so: RESULT
// lines carry sgemm_GFLOPs or bf16_gemm_GFLOPs) and uses it as the MFU
// denominator; a positive value replaces the measurement.
// Each gpt2 row also gets the step split into phases (matmuls, attention,
// norms, activations, cross-entropy, other: a replay of the ops one at a time,
// op_breakdown.h; optimizer and data: measured in the timed steps) and a
// per-op table; --no-breakdown skips the replay (--breakdown, its old switch,
// is accepted and does nothing). --precision bf16 runs Lattice as
// runtime.precision: bf16 does on the CPU: bf16 matmuls
// (core/kernels/cpu/matmul_bf16.h), weights read from the parameters' bf16
// shadow (core/param.h), activations stored in bf16. bf16-f32act keeps fp32
// activations (the path before 16-bit activations); bf16-per-call also rounds
// the fp32 weights on every call, as before the shadow existed (the same
// bits). For before/after timings in one binary. The PyTorch reference stays
// fp32. --recompute-attention runs Lattice with parallel.recompute_attention
// (the blocks share one buffer of attention probabilities, which backward
// computes again); the activation line gives the context and workspace bytes.
// --cpu-attention picks what the CPU attention kernels keep for backward
// (parallel.cpu_attention: compact, the default, or full).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/blas_core.h"
#include "core/error.h"
#include "core/kernels/cpu/matmul.h"
#include "core/ops.h"
#include "core/param.h"
#include "core/threads.h"
#include "train_step/lattice_run.h"
#include "train_step/op_breakdown.h"
#include "train_step/torch_ref.h"

using namespace lattice;
using namespace lattice::bench;

namespace {

struct Options {
  std::vector<BenchConfig> configs;
  std::vector<int> threads;
  int steps = 5, warmup = 2;
  bool torch = false, breakdown = true;
  std::string precision = "fp32";
  bool recompute_attention = false;
  std::string cpu_attention = "compact";
  std::string reference = LATTICE_BENCH_REFERENCE, python = "/usr/bin/python3";
  std::string zoo_dir = LATTICE_BENCH_ZOO_DIR;  // the llama / bert reference scripts
  double peak = 0;
};

// The measured float matmul's name, by the operand dtype it runs in
// (cpu::matmul_dtype(), which --precision sets): "sgemm" in fp32, "bf16_gemm"
// under bf16. RESULT lines carry <name>_GFLOPs (the MFU denominator),
// <name>_1024_GFLOPs and <name>_model_GFLOPs; summarize_runs.py reads them.
std::string matmul_rate_name() {
  const DType t = cpu::matmul_dtype();
  return t == DType::f32 ? "sgemm" : std::string(dtype_name(t)) + "_gemm";
}

// The same for prose and table headers: "sgemm", "bf16 gemm".
std::string matmul_rate_label() {
  std::string s = matmul_rate_name();
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

struct Row {
  BenchConfig cfg;
  int threads = 0;
  SgemmRate sgemm;
  double peak = 0;  // MFU denominator, GFLOP/s
  std::string load_before;
  LatticeResult lat;
  std::optional<TorchResult> torch;
  std::string torch_error;
  bool flops_differ = false;  // the reference's FLOP model disagrees with the model's
  std::vector<OpTime> ops;
};

std::vector<int> parse_int_list(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    int v = std::stoi(s.substr(pos, end - pos));
    if (v <= 0) throw std::invalid_argument("thread counts must be positive: " + s);
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

// The configs of `arch` that --config selects.
std::vector<BenchConfig> configs_for(const std::string& arch, const std::string& config) {
  std::vector<BenchConfig> out;
  if (arch == "gpt2") {
    for (const BenchConfig& c : gpt2_bench_configs())
      if (config == "all" || config == c.name) out.push_back(c);
    if (out.empty()) throw std::invalid_argument("--config " + config + ": gpt2 has small, tiny or all");
    return out;
  }
  if (arch != "llama" && arch != "bert")
    throw std::invalid_argument("--arch " + arch + ": expected gpt2, llama, bert or all");
  const bool file = config.size() > 5 && config.substr(config.size() - 5) == ".yaml";
  if (!file && config != "tiny" && config != "all")
    throw std::invalid_argument("--config " + config + ": " + arch + " has tiny, all or a FILE.yaml");
  const std::string path = file ? config : std::string(LATTICE_BENCH_SOURCE_DIR) + "/configs/" + arch + "-tiny.yaml";
  BenchConfig c = bench_config_from_file(file ? arch : arch + "-tiny", path);
  if (std::string(enum_name(c.model.arch)) != arch)
    throw std::invalid_argument(path + " is model.arch " + std::string(enum_name(c.model.arch)) + ", not " + arch);
  c.ref_config = file ? "file" : "tiny";
  out.push_back(c);
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  std::string config = "all", archs = "gpt2";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--config")
      config = value();
    else if (a == "--arch")
      archs = value();
    else if (a == "--threads")
      o.threads = parse_int_list(value());
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--torch")
      o.torch = true;
    else if (a == "--breakdown")
      o.breakdown = true;
    else if (a == "--no-breakdown")
      o.breakdown = false;
    else if (a == "--precision")
      o.precision = value();
    else if (a == "--recompute-attention")
      o.recompute_attention = true;
    else if (a == "--cpu-attention")
      o.cpu_attention = value();
    else if (a == "--reference")
      o.reference = value();
    else if (a == "--python")
      o.python = value();
    else if (a == "--peak")
      o.peak = std::stod(value());
    else
      throw std::invalid_argument("unknown option " + a + " (see the header of bench/train_step/main.cpp)");
  }
  for (const std::string& arch : split_list(archs == "all" ? "gpt2,llama,bert" : archs))
    for (const BenchConfig& c : configs_for(arch, config)) o.configs.push_back(c);
  if (o.threads.empty()) o.threads = {int(std::max(1u, std::thread::hardware_concurrency()))};
  if (o.steps < 1 || o.warmup < 0) throw std::invalid_argument("--steps must be >= 1 and --warmup >= 0");
  if (o.cpu_attention != "compact" && o.cpu_attention != "full")
    throw std::invalid_argument("--cpu-attention " + o.cpu_attention + ": expected compact or full");
  if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "bf16-f32act" && o.precision != "bf16-per-call")
    throw std::invalid_argument("--precision " + o.precision + ": expected fp32, bf16, bf16-f32act or bf16-per-call");
  return o;
}

std::string first_line_with(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return line;
  return "";
}

std::string loadavg() {
  std::string s = first_line_with("/proc/loadavg", "");
  return s.substr(0, s.find(' ', s.find(' ', s.find(' ') + 1) + 1));  // the 1, 5, 15 minute averages
}

void say(const std::string& s) {
  std::fputs((s + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// The reference run for a config: its script and, for the zoo models, the
// shapes of the config on the command line.
TorchRun reference_run(const Options& o, const BenchConfig& cfg, int threads, double peak) {
  TorchRun run{o.python, o.reference, cfg.ref_config, {}, threads, o.steps, o.warmup, peak};
  const ModelConfig& m = cfg.model;
  if (m.arch == ModelArch::gpt2) return run;
  const std::string arch(enum_name(m.arch));
  run.script = o.zoo_dir + "/torch_" + arch + "_bench.py";
  const int64_t rows = padded_vocab(m.vocab_size, TpShard{.rank = 0, .size = 1, .vocab_multiple = m.vocab_multiple});
  auto arg = [&](const std::string& k, const std::string& v) { run.extra_args.insert(run.extra_args.end(), {k, v}); };
  arg("--layers", std::to_string(m.n_layer));
  arg("--d-model", std::to_string(m.d_model));
  arg("--heads", std::to_string(m.n_head));
  arg("--d-ff", std::to_string(m.d_ff));
  arg("--vocab", std::to_string(m.vocab_size));
  arg("--vocab-rows", std::to_string(rows));
  arg("--seq", std::to_string(cfg.T));
  arg("--batch", std::to_string(cfg.B));
  arg("--norm-eps", fmt::format("{}", m.norm_eps));
  if (m.arch == ModelArch::llama) {
    arg("--kv-heads", std::to_string(m.n_kv_head));
    arg("--rope-theta", fmt::format("{}", m.rope_theta));
    if (m.tie_embeddings) run.extra_args.push_back("--tie");
  } else {
    arg("--max-seq-len", std::to_string(m.max_seq_len));
    if (!m.tie_embeddings) run.extra_args.push_back("--untie");
  }
  return run;
}

void run_reference(const Options& o, const BenchConfig& cfg, Row& r) {
  const std::string ttag = fmt::format("[pytorch {} threads={}]", cfg.name, r.threads);
  try {
    r.torch = run_torch(reference_run(o, cfg, r.threads, r.peak), [&](const std::string& l) { say(ttag + " " + l); });
  } catch (const std::exception& e) {
    r.torch_error = e.what();
    say(ttag + " FAILED: " + r.torch_error);
    return;
  }
  auto f = r.torch->fields.find("flops_per_step");  // the zoo scripts print theirs
  if (f == r.torch->fields.end()) return;
  const double theirs = std::stod(f->second), ours = r.lat.flops_per_step;
  r.flops_differ = std::abs(theirs - ours) > 1e-9 * ours;
  if (r.flops_differ)
    say(fmt::format("{} WARNING: FLOP/step {} differs from Lattice's {}: the models differ", ttag, theirs, ours));
}

Row measure(const Options& o, const BenchConfig& cfg, int threads) {
  Row r;
  r.cfg = cfg;
  r.threads = threads;
  set_num_threads(threads);
  r.load_before = loadavg();
  const std::string tag = fmt::format("[lattice {} threads={}]", cfg.name, threads);
  say(fmt::format("{} load average before: {}", tag, r.load_before));
  r.sgemm = measure_sgemm(cfg, 5);
  r.peak = o.peak > 0 ? o.peak : r.sgemm.peak();
  say(fmt::format("{} {} GFLOP/s: 1024^3 {:.1f}, MLP-in shape ({}, {}, {}) {:.1f}; MFU denominator {:.1f}", tag,
                  matmul_rate_label(), r.sgemm.square, cfg.B * cfg.T, cfg.F, cfg.C, r.sgemm.model, r.peak));
  if (!cfg.source.empty()) say(fmt::format("{} model from {} (dropout 0), B {} T {}", tag, cfg.source, cfg.B, cfg.T));
  const HalfMode half{.shadow = o.precision != "bf16-per-call", .act16 = o.precision == "bf16"};
  const StageSpan span{.recompute_attention = o.recompute_attention};
  ops::set_cpu_attention_compact(o.cpu_attention == "compact");
  r.lat = run_lattice(cfg, o.steps, o.warmup, half, span, [&](const std::string& l) { say(tag + " " + l); });
  say(
      fmt::format("{} params {} (N for flops {}), GFLOP/step {:.2f}, scored targets/step {:.0f}, activations "
                  "{:.1f} MiB (context) + {:.1f} MiB (workspace){}",
                  tag, r.lat.n_params, r.lat.n_flop_params, r.lat.flops_per_step / 1e9, r.lat.scored_per_step,
                  double(r.lat.activation_bytes) / (1 << 20), double(r.lat.workspace_bytes) / (1 << 20),
                  o.recompute_attention ? ", attention recomputed" : ""));
  if (o.breakdown && cfg.model.arch == ModelArch::gpt2)
    r.ops = op_breakdown(cfg, 2, half.act16 ? cpu::matmul_dtype() : DType::f32);
  if (o.breakdown && cfg.model.arch != ModelArch::gpt2)
    say(tag + " --breakdown: only the gpt2 op sequence is replayed");
  if (o.torch) run_reference(o, cfg, r);
  return r;
}

double lattice_gflops(const Row& r) { return r.lat.flops_per_step / (r.lat.step_ms.median * 1e-3) / 1e9; }
double lattice_tokens(const Row& r) { return double(r.lat.tokens_per_step) / (r.lat.step_ms.median * 1e-3); }

void print_tables(const std::vector<Row>& rows) {
  say("\n| system | config | threads | median ms/step | min | max | tokens/s | GFLOP/s | MFU | " + matmul_rate_label() +
      " GFLOP/s | torch ms / lattice ms |");
  say("|---|---|---|---|---|---|---|---|---|---|---|");
  for (const Row& r : rows) {
    const double g = lattice_gflops(r);
    std::string ratio = r.torch ? fmt::format("{:.2f}", r.torch->median_ms / r.lat.step_ms.median) : "n/a";
    say(fmt::format("| lattice | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f} | {:.1f} | {:.1f}% | {:.1f} | {} |",
                    r.cfg.name, r.threads, r.lat.step_ms.median, r.lat.step_ms.min, r.lat.step_ms.max,
                    lattice_tokens(r), g, 100 * g / r.peak, r.peak, ratio));
    if (!r.torch) continue;
    const auto& f = r.torch->fields;
    say(fmt::format("| pytorch | {} | {} | {:.1f} | {} | {} | {:.0f} | {:.1f} | {:.1f}% | {:.1f} | |", r.cfg.name,
                    r.threads, r.torch->median_ms, f.at("min_ms"), f.at("max_ms"), r.torch->tokens_per_s,
                    r.torch->gflops, 100 * r.torch->gflops / r.peak, r.peak));
  }
  say("\nLattice step phases (median ms): \n\n| config | threads | zero_grad | forward | backward | adamw | step |");
  say("|---|---|---|---|---|---|---|");
  for (const Row& r : rows)
    say(fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |", r.cfg.name, r.threads,
                    r.lat.zero_ms.median, r.lat.fwd_ms.median, r.lat.bwd_ms.median, r.lat.opt_ms.median,
                    r.lat.step_ms.median));
}

// The step by phase: the replayed ops summed per OpPhase, then the optimizer
// (AdamW + zero_grad) and the batch as measured in the timed steps.
void print_phases(const std::vector<Row>& rows) {
  std::string head = "| config | threads |", rule = "|---|---|";
  for (OpPhase p : kOpPhases) head += std::string(" ") + phase_name(p) + " |", rule += "---|";
  say("\nStep phases, ms per step (forward + backward ops replayed one at a time; optimizer = AdamW + zero_grad "
      "and data = the batch, medians of the timed steps):\n");
  say(head + " optimizer | data | replayed + optimizer | measured step |");
  say(rule + "---|---|---|---|");
  for (const Row& r : rows) {
    if (r.ops.empty()) continue;
    std::string line = fmt::format("| {} | {} |", r.cfg.name, r.threads);
    double sum = 0;
    for (double ms : phase_times(r.ops)) line += fmt::format(" {:.1f} |", ms), sum += ms;
    const double opt = r.lat.opt_ms.median + r.lat.zero_ms.median;
    say(line + fmt::format(" {:.1f} | {:.2f} | {:.1f} | {:.1f} |", opt, r.lat.data_ms.median, sum + opt,
                           r.lat.step_ms.median));
  }
}

// key=value fields of the phases for a RESULT line ("" without a replay).
std::string phase_fields(const Row& r) {
  if (r.ops.empty()) return "";
  std::string out;
  const std::vector<double> ms = phase_times(r.ops);
  for (size_t i = 0; i < ms.size(); ++i) {
    std::string name = phase_name(kOpPhases[i]);
    std::replace(name.begin(), name.end(), '-', '_');
    out += fmt::format(" phase_{}_ms={:.1f}", name, ms[i]);
  }
  return out + fmt::format(" data_ms={:.2f}", r.lat.data_ms.median);
}

void print_breakdown(const Row& r) {
  double total = 0;
  for (const OpTime& e : r.ops) total += e.ms;
  say(fmt::format("\nPer-op time, {} threads={} (forward + backward replay, {:.1f} ms/step in all):\n", r.cfg.name,
                  r.threads, total));
  say("| op | calls/step | ms/step | share | GFLOP/s |\n|---|---|---|---|---|");
  for (const OpTime& e : r.ops) {
    std::string rate = e.flops > 0 ? fmt::format("{:.1f}", e.flops / (e.ms * 1e-3) / 1e9) : "";
    say(fmt::format("| {} | {} | {:.1f} | {:.1f}% | {} |", e.kind, e.calls, e.ms, 100 * e.ms / total, rate));
  }
}

void print_raw(const std::vector<Row>& rows, const std::string& precision, bool recompute_attention) {
  const std::string mm = matmul_rate_name();
  say("");
  for (const Row& r : rows) {
    const double g = lattice_gflops(r);
    std::string torch = r.torch ? fmt::format(" torch_median_ms={:.1f} torch_ms_over_lattice_ms={:.3f}",
                                              r.torch->median_ms, r.torch->median_ms / r.lat.step_ms.median)
                                : "";
    say(fmt::format(
        "RESULT system=lattice arch={} config={} threads={} precision={} median_ms={:.1f} min_ms={:.1f} "
        "max_ms={:.1f} "
        "tokens_per_s={:.0f} achieved_GFLOPs={:.1f} MFU={:.1f}% {}_GFLOPs={:.1f} "
        "{}_1024_GFLOPs={:.1f} {}_model_GFLOPs={:.1f} zero_grad_ms={:.1f} forward_ms={:.1f} "
        "backward_ms={:.1f} adamw_ms={:.1f}{} context_MiB={:.1f} workspace_MiB={:.1f} recompute_attention={} "
        "cpu_attention={} blas_core={} load_before={}{}",
        enum_name(r.cfg.model.arch), r.cfg.name, r.threads, precision, r.lat.step_ms.median, r.lat.step_ms.min,
        r.lat.step_ms.max, lattice_tokens(r), g, 100 * g / r.peak, mm, r.peak, mm, r.sgemm.square, mm, r.sgemm.model,
        r.lat.zero_ms.median, r.lat.fwd_ms.median, r.lat.bwd_ms.median, r.lat.opt_ms.median, phase_fields(r),
        double(r.lat.activation_bytes) / (1 << 20), double(r.lat.workspace_bytes) / (1 << 20), int(recompute_attention),
        ops::cpu_attention_compact() ? "compact" : "full", lattice::blas_core(),
        r.load_before.empty() ? "?" : r.load_before.substr(0, r.load_before.find(' ')), torch));
    if (r.torch) say(r.torch->result_line);
    if (r.flops_differ) say("RESULT system=pytorch config=" + r.cfg.name + " FLOP_MODEL_DIFFERS");
    if (!r.torch_error.empty()) say("RESULT system=pytorch config=" + r.cfg.name + " FAILED: " + r.torch_error);
  }
}

}  // namespace

int main(int argc, char** argv) {
  reexec_for_blas_kernels(argv);  // as lattice does (core/blas_core.h); the PyTorch child inherits OPENBLAS_CORETYPE
  try {
    const Options o = parse_options(argc, argv);
    std::string cmdline = argv[0];
    for (int i = 1; i < argc; ++i) cmdline += std::string(" ") + argv[i];
    say("$ " + cmdline);
    say(fmt::format("cpu: {} | {} | cores online {} | OpenBLAS {} | OpenBLAS core {}",
                    first_line_with("/proc/cpuinfo", "model name"), first_line_with("/proc/meminfo", "MemTotal"),
                    std::thread::hardware_concurrency(), blas_config(), lattice::blas_core()));
    if (const char* ct = std::getenv("OPENBLAS_CORETYPE")) say(std::string("OPENBLAS_CORETYPE=") + ct);
    if (std::string n = blas_core_restart_note(); !n.empty()) say(n);
    const bool bf16 = o.precision != "fp32";
    if (bf16) cpu::set_matmul_dtype(DType::bf16);  // throws where the CPU has no AVX512-BF16
    say("precision: " + o.precision + (bf16 ? " (Lattice's matmuls; PyTorch stays fp32)" : ""));
    std::vector<Row> rows;
    for (const BenchConfig& cfg : o.configs)
      for (int t : o.threads) rows.push_back(measure(o, cfg, t));
    print_tables(rows);
    print_phases(rows);
    for (const Row& r : rows)
      if (!r.ops.empty()) print_breakdown(r);
    print_raw(rows, o.precision, o.recompute_attention);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.describe().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
  }
  return 1;
}
