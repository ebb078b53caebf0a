// lattice train CONFIG [key=value ...] [--print-config]
// One process per rank under mpirun (or srun); a single process without it.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "booster/booster.h"
#include "booster/hybrid_parallel_plugin.h"
#include "booster/run_dir.h"
#include "booster/stop_signal.h"
#include "cli.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/allocator.h"
#include "core/threads.h"
#include "mesh/process_group_mesh.h"

namespace lattice::cli {

namespace {

struct TrainArgs {
  std::string path;
  std::vector<std::string> overrides;
  bool print_config = false;
};

TrainArgs parse_train_args(const Args& args) {
  TrainArgs t;
  for (const std::string& a : args) {
    if (a == "--print-config") {
      t.print_config = true;
    } else if (a.rfind("--", 0) == 0) {
      LATTICE_FAIL("train: unknown option '{}' (usage: lattice train CONFIG [key=value ...] [--print-config])", a);
    } else if (t.path.empty()) {
      t.path = a;
    } else {
      t.overrides.push_back(a);
    }
  }
  if (t.path.empty()) LATTICE_FAIL("train: no config file given (usage: lattice train CONFIG [key=value ...])");
  return t;
}

void print_line(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

int run(const TrainArgs& a, const comm::MpiRuntime& mpi) {
  const bool logger = mpi.world_rank() == 0;
  Config cfg = load_config(a.path, a.overrides);
  if (a.print_config) {
    if (logger) std::fputs(to_yaml(cfg).c_str(), stdout);
    return 0;
  }
  set_num_threads(cfg.runtime.threads);
  const Layout layout = resolve_layout(cfg, mpi.world_size());
  auto mesh = create_job_mesh(cfg, comm::Group(comm::make_world_communicator(cfg.runtime.comm_timeout_s)));
  // The plugin opens and checks the data before the run directory is written.
  auto plugin = std::make_unique<HybridParallelPlugin>(cfg, mesh);
  std::string rank_map = mesh::format_rank_map(mesh, "cpu");  // collective
  std::vector<std::string> notes;
  const std::optional<std::string> resume = resolve_resume(cfg, mesh.world(), &notes);  // collective
  TrainerState resumed;
  if (resume) resumed = plugin->load_checkpoint(*resume);
  std::string metrics_path;
  if (logger) {
    RunInfo info{.world_size = mpi.world_size(), .tp = layout.tp, .pp = layout.pp, .dp = layout.dp,
                 .threads = num_threads()};
    RunDir run = prepare_run_dir(cfg, info, resume ? resumed.step : -1);
    metrics_path = run.metrics_path;
    print_line(fmt::format("lattice train {} | {} | {} rank(s) x {} thread(s) | run dir {}", cfg.source,
                           plugin->describe(), mpi.world_size(), info.threads, run.dir));
    if (mpi.world_size() > 1) std::fputs(rank_map.c_str(), stdout);
    for (const std::string& n : notes) print_line("checkpoint: " + n);
    if (resume)
      print_line(fmt::format("resuming from {} (step {}; written with tp={} pp={} dp={})", *resume, resumed.step,
                             resumed.layout.tp, resumed.layout.pp, resumed.layout.dp));
  }
  install_stop_signal_handlers();  // SIGUSR1 / SIGTERM: checkpoint after the current step, exit 0
  Booster booster(cfg, std::move(plugin), print_line);
  TrainSummary s = booster.train(metrics_path, resumed);
  if (mpi.world_size() > 1) {  // metrics carry the largest rank's peak; here each rank's (per stage)
    Tensor mine = Tensor::from<double>({double(memory_stats(Device::cpu()).peak_bytes)}, {1});
    Tensor all = Tensor::zeros({mpi.world_size()}, DType::f64);
    mesh.world().all_gather(all, mine)->wait();
    std::string line = "peak memory per rank (MiB):";
    for (int r = 0; r < mpi.world_size(); ++r) {
      mesh::Coord c = mesh.coord(r);
      line += fmt::format(" {}[tp{} pp{} dp{}] {:.1f}", r, c.tp, c.pp, c.dp, all.data<double>()[r] / 1048576.0);
    }
    if (logger) print_line(line);
  }
  if (cfg.log.trace) {  // every rank writes its own timeline
    std::filesystem::create_directories(cfg.log.dir + "/trace");
    std::string path = fmt::format("{}/trace/rank_{:05d}.json", cfg.log.dir, mpi.world_rank());
    booster.plugin().write_trace(path);
    if (logger) print_line(fmt::format("timeline of the first steps: {}/trace/rank_*.json (open in ui.perfetto.dev)",
                                       cfg.log.dir));
  }
  if (logger && s.steps_done == resumed.step && resume)
    print_line(fmt::format("nothing to do: the checkpoint is at step {}, the run ends at step {}", resumed.step,
                           cfg.train.stop_at_step > 0 ? cfg.train.stop_at_step : cfg.train.steps));
  else if (logger)
    print_line(fmt::format("{}: step {}, final loss {:.6f}{}", s.stopped ? "stopped" : "done", s.steps_done,
                           s.final_loss,
                           s.last_val_loss >= 0 ? fmt::format(", val_loss {:.6f}", s.last_val_loss) : ""));
  return 0;
}

}  // namespace

int train(int* argc, char*** argv, const Args& args) {
  TrainArgs a = parse_train_args(args);  // command-line errors need no MPI
  return run_with_mpi(argc, argv, [&](const comm::MpiRuntime& mpi) { return run(a, mpi); });
}

}  // namespace lattice::cli
