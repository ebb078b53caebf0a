// bench_checkpoint: save and load throughput of a training checkpoint (model
// + AdamW state, logical tensors, docs/checkpoint-format.md) through the same
// code `lattice train` uses (booster/checkpointing.h), on any layout.
//
//   mpirun -np R bench_checkpoint CONFIG [--dir DIR] [--repeats N] [key=value ...]
//
// Builds this rank's stage of the config's model (parameters initialised,
// optimizer state filled with values so nothing is sparse), then times
// N saves (each a new step directory, fsynced and committed) and N loads, and
// prints per-repeat seconds and MB/s (MB = 1e6 bytes of checkpoint files) and
// the medians. A load right after a save reads from the page cache unless the
// caller drops it (bench/checkpoint/run.sh does, when it can).
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "booster/booster.h"
#include "booster/checkpointing.h"
#include "booster/plan.h"
#include "checkpoint/atomic_dir.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/allocator.h"
#include "core/timer.h"
#include "models/registry.h"
#include "mpi_main.h"
#include "optim/optimizer.h"

using namespace lattice;
namespace fs = std::filesystem;

namespace {

uint64_t dir_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

int run(int argc, char** argv, const comm::MpiRuntime& mpi) {
  std::string config, dir = "/tmp/lattice-bench-checkpoint";
  int repeats = 3;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--repeats" && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (config.empty())
      config = a;
    else
      overrides.push_back(a);
  }
  LATTICE_CHECK(!config.empty(), "usage: bench_checkpoint CONFIG [--dir DIR] [--repeats N] [key=value ...]");
  overrides.push_back("checkpoint.dir=" + dir);
  Config cfg = load_config(config, overrides);
  const Layout layout = resolve_layout(cfg, mpi.world_size());
  auto mesh = create_job_mesh(cfg, comm::Group(comm::make_world_communicator(cfg.runtime.comm_timeout_s)));
  const int stage = mesh.this_coord().pp;
  auto stages = pipeline::make_stage_layout(stage_config_of(cfg, layout));
  std::vector<StageSpan> spans = stage_spans(cfg, stages, stage);
  TpShard shard{.rank = mesh.tp().rank(), .size = mesh.tp().size(), .vocab_multiple = cfg.model.vocab_multiple};
  FlatParams params(select_stage_params(model_param_specs(cfg.model), spans, cfg.model.n_layer), DType::f32,
                    Device::cpu(), shard);
  params.init(cfg.runtime.seed);
  optim::OptimizerOptions o;
  auto opt = optim::make_optimizer(o, params);
  for (auto& [name, buf] : opt->state()) buf->copy_from(params.values());  // dense, non-zero state
  RankState rs{params, *opt, nullptr, mesh};
  if (mpi.world_rank() == 0) fs::remove_all(dir);
  mesh.world().barrier()->wait();

  std::vector<double> save_s, load_s;
  uint64_t bytes = 0;
  const int64_t live = memory_stats(Device::cpu()).live_bytes;
  reset_peak_memory(Device::cpu());
  for (int r = 1; r <= repeats; ++r) {
    const std::string step_dir = dir + "/" + checkpoint::step_dir_name(r);
    TrainerState st;
    st.step = r;
    st.config = to_yaml(cfg);
    mesh.world().barrier()->wait();
    Timer t;
    save_checkpoint(step_dir, rs, st, 0);
    save_s.push_back(t.seconds());
    bytes = dir_bytes(step_dir);
  }
  // What the saves allocated above the parameters and state, the most over the ranks.
  double save_peak = double(memory_stats(Device::cpu()).peak_bytes - live);
  MPI_Allreduce(MPI_IN_PLACE, &save_peak, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (int r = 1; r <= repeats; ++r) {
    const std::string step_dir = dir + "/" + checkpoint::step_dir_name(r);
    mesh.world().barrier()->wait();
    Timer t;
    load_checkpoint(step_dir, rs);
    mesh.world().barrier()->wait();  // the load ends when the slowest rank has its state
    load_s.push_back(t.seconds());
  }
  if (mpi.world_rank() == 0) {
    const double mb = double(bytes) / 1e6;
    fmt::print("layout tp={} pp={} dp={} | checkpoint {:.1f} MB ({} parameters + AdamW state) in {}\n", layout.tp,
               layout.pp, layout.dp, mb, params.numel(), dir);
    for (int r = 0; r < repeats; ++r)
      fmt::print("  repeat {}: save {:.2f} s ({:.0f} MB/s), load {:.2f} s ({:.0f} MB/s)\n", r + 1, save_s[r],
                 mb / save_s[r], load_s[r], mb / load_s[r]);
    fmt::print("median: save {:.2f} s = {:.0f} MB/s | load {:.2f} s = {:.0f} MB/s\n", bench::median(save_s),
               mb / bench::median(save_s), bench::median(load_s), mb / bench::median(load_s));
    fmt::print("save: {:.1f} MB allocated above the parameters and optimizer state (most of any rank)\n",
               save_peak / 1e6);
  }
  if (mpi.world_rank() == 0) fs::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return lattice::bench::mpi_main("bench_checkpoint", argc, argv, run); }
