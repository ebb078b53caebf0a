// bench_zero_gather: what ZeRO-1's optimizer step costs with a 16-bit shadow
// (runtime.precision bf16/fp16), gathering the shadow and the fp32-read
// entries (optim/zero.h) against gathering every fp32 value and rounding the
// whole shadow again (the path before; set_half_gather(false)).
//
//   mpirun -np D bench_zero_gather CONFIG [--repeats N] [--dtype bf16|f16] [--only half|fp32] [key=value ...]
//
// The world is the dp group; the config gives the model (its whole parameter
// table, tp 1, pp 1). Each repeat times one step of each variant, in turn,
// from the updated shard to a current shadow on every rank (AdamW update of
// the shard, the gather(s), and for the fp32 variant refresh_shadow), after a
// barrier; a rank's time is the slowest rank's (--only: one variant, for
// models whose two copies do not fit). Prints the bytes each variant gathers
// (every rank's block counted once: the 16-bit shadow and the broadcast fp32
// entries, or the fp32 values) and the medians.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "booster/booster.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/ops.h"
#include "core/timer.h"
#include "models/registry.h"
#include "mpi_main.h"
#include "optim/zero.h"

using namespace lattice;

namespace {

double slowest(comm::Group& g, double s) {
  Tensor t = Tensor::from<double>({s}, {1});
  g.all_reduce(t, {.op = comm::ReduceOp::max})->wait();
  return t.data<double>()[0];
}

int run(int argc, char** argv, const comm::MpiRuntime& mpi) {
  std::string config, dtype = "bf16", only;
  int repeats = 7;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (a == "--dtype" && i + 1 < argc)
      dtype = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (config.empty())
      config = a;
    else
      overrides.push_back(a);
  }
  LATTICE_CHECK(
      !config.empty() && repeats > 0 && (dtype == "bf16" || dtype == "f16") &&
          (only.empty() || only == "half" || only == "fp32"),
      "usage: bench_zero_gather CONFIG [--repeats N>0] [--dtype bf16|f16] [--only half|fp32] [key=value ...]");
  std::vector<int> variants;  // 0: the 16-bit gather, 1: the fp32 gather and a whole refresh
  if (only != "fp32") variants.push_back(0);
  if (only != "half") variants.push_back(1);
  const Config cfg = load_config(config, overrides);
  comm::Group dp(comm::make_world_communicator(cfg.runtime.comm_timeout_s));
  const int D = dp.size();
  const DType half = dtype == "bf16" ? DType::bf16 : DType::f16;
  std::vector<FlatParams> params(2);
  std::vector<std::unique_ptr<optim::ZeroOptimizer>> zero(2);
  const optim::OptimizerOptions opts{.name = "adamw", .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  for (int v : variants) {
    FlatParams& p = params[size_t(v)];
    p = FlatParams(model_param_specs(cfg.model), DType::f32, Device::cpu(), TpShard{}, D);
    p.enable_shadow(half);
    p.init(cfg.runtime.seed);
    p.refresh_shadow();
    p.grads().copy_from(p.values());  // dense, non-zero gradients
    ops::scale_inplace(p.grads(), 1e-3);
    zero[size_t(v)] = std::make_unique<optim::ZeroOptimizer>(opts, p, dp);
    zero[size_t(v)]->set_half_gather(v == 0);
  }
  const FlatParams& any = params[size_t(variants[0])];
  const int64_t fp32_read = zero[size_t(variants[0])]->half_gather_plan().fp32_total();

  std::vector<double> secs[2];
  for (int r = 0; r <= repeats; ++r)  // repeat 0 warms up (allocations, first touches)
    for (int v : variants) {
      FlatParams& p = params[size_t(v)];
      dp.barrier()->wait();
      Timer t;
      zero[size_t(v)]->step(p, 1e-4, r + 1, 1.0f);
      p.refresh_shadow();  // nothing after the 16-bit gather: the shadow is current
      const double s = slowest(dp, t.seconds());
      if (r > 0) secs[v].push_back(s);
    }
  if (mpi.world_rank() == 0) {
    fmt::print("model {} | {} parameters ({} read in fp32) | dp {} | {} shadow | {} repeats\n",
               enum_name(cfg.model.arch), any.numel(), fp32_read, D, dtype, repeats);
    for (int v : variants) {
      std::string all;
      for (double s : secs[v]) all += fmt::format(" {:.1f}", s * 1e3);
      fmt::print("{:<28} gathers {:8.1f} MB | step ms:{} | median {:.1f} ms\n",
                 v == 0 ? "16-bit shadow + fp32 entries" : "fp32 values + refresh",
                 double(zero[size_t(v)]->gather_bytes(params[size_t(v)])) / 1e6, all, bench::median(secs[v]) * 1e3);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return lattice::bench::mpi_main("bench_zero_gather", argc, argv, run); }
