// lattice train CONFIG [key=value ...] [--print-config]
// One process per rank under mpirun (or srun); a single process without it.
#include <fmt/format.h>
#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "args.h"
#include "booster/booster.h"
#include "booster/hybrid_parallel_plugin.h"
#include "booster/metrics.h"
#include "booster/plan.h"
#include "booster/run_dir.h"
#include "booster/stop_signal.h"
#include "checkpoint/atomic_dir.h"
#include "cli.h"
#include "comm/gather_strings.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/shard.h"
#include "mesh/process_group_mesh.h"

namespace lattice::cli {

namespace {

struct TrainArgs {
  ConfigArgs config;
  bool print_config = false;
};

TrainArgs parse_train_args(const Args& args) {
  TrainArgs t;
  ArgReader r("train", "lattice train CONFIG [key=value ...] [--print-config]", args);
  t.config = read_config_args(r, [&](ArgReader& o) {
    if (!o.flag("--print-config")) return false;
    t.print_config = true;
    return true;
  });
  return t;
}

}  // namespace

void check_structure(const Config& cfg, const Layout& layout) {
  const pipeline::StageLayout stages = pipeline::make_stage_layout(stage_config_of(cfg, layout));
  for (int stage = 0; stage < layout.pp; ++stage) {
    train_plan_of(cfg, layout, stage);
    stage_spans(cfg, stages, stage);
  }
}

namespace {

void print_line(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// What start-up found: the checkpoint to resume from, if any, and its state.
struct Start {
  std::optional<std::string> resume;
  TrainerState resumed;
};

// log.per_rank: this rank's log, opened once rank 0 has accepted the run
// directory (a barrier), so no rank writes into the directory of an earlier run.
std::shared_ptr<RankLog> open_rank_log(const Config& cfg, mesh::ProcessGroupMesh& mesh, const Plugin& plugin,
                                       const Start& start) {
  if (!cfg.log.per_rank) return nullptr;
  mesh.world().barrier()->wait();
  const int rank = mesh.this_rank();
  auto log = std::make_shared<RankLog>(rank_log_path(cfg, rank), start.resume.has_value());
  const mesh::Coord c = mesh.coord(rank);
  log->line(fmt::format("lattice train {} | rank {} of {} | tp{} pp{} dp{} | host {} | pid {} | {} thread(s)",
                        cfg.source, rank, mesh.world_size(), c.tp, c.pp, c.dp, host_name(), ::getpid(), num_threads()));
  std::string layout = plugin.describe();
  while (!layout.empty() && layout.back() == '\n') layout.pop_back();
  log->line(layout);
  if (start.resume) log->line(fmt::format("resuming from {} (step {})", *start.resume, start.resumed.step));
  return log;
}

// The rank's own error as the last line of its log, then on to the one-line report.
template <class F>
auto logging_errors(const std::shared_ptr<RankLog>& log, F&& body) {
  try {
    return body();
  } catch (const InputError& e) {  // a ConfigError too
    if (log) log->line("error: " + e.message());
    throw;
  } catch (const Error& e) {
    if (log) log->line("error: " + e.describe());
    throw;
  } catch (const std::exception& e) {
    if (log) log->line("error: " + describe_exception(e));
    throw;
  }
}

std::string summary_line(const Config& cfg, const TrainSummary& s, const Start& start) {
  if (s.steps_done == start.resumed.step && start.resume)
    return fmt::format("nothing to do: the checkpoint is at step {}, the run ends at step {}", start.resumed.step,
                       cfg.train.stop_at_step > 0 ? cfg.train.stop_at_step : cfg.train.steps);
  return fmt::format("{}: step {}, final loss {}{}", s.stopped ? "stopped" : "done", s.steps_done,
                     finite_or_dash(s.final_loss, "{:.6f}"),
                     s.last_val_loss >= 0 ? fmt::format(", val_loss {:.6f}", s.last_val_loss) : "");
}

int train_and_report(const Config& cfg, const comm::MpiRuntime& mpi, mesh::ProcessGroupMesh& mesh, Booster& booster,
                     const std::string& metrics_path, const Start& start, RankLog* rank_log) {
  const bool logger = mpi.world_rank() == 0;
  TrainSummary s = booster.train(metrics_path, start.resumed);
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
    std::string path = fmt::format("{}/trace/rank_{:05d}.json", cfg.log.dir, mpi.world_rank());
    const bool wrote = booster.plugin().write_trace(path);
    if (logger)
      print_line(wrote ? fmt::format("timeline of the first steps: {}/trace/rank_*.json (open in ui.perfetto.dev)",
                                     cfg.log.dir)
                       : fmt::format("log.trace: this run traced no step (it resumed after step {}); the timeline "
                                     "in {}/trace is an earlier run's",
                                     start.resumed.step, cfg.log.dir));
  }
  const std::string summary = summary_line(cfg, s, start);
  if (logger) print_line(summary);
  if (logger && s.steps_run > 0 && s.steps_skipped == s.steps_run)
    print_line(
        fmt::format("warning: all {} step(s) this run ran were skipped (non-finite gradients), so the model did "
                    "not change — under fp16, lower runtime.loss_scale.initial/max; else look for bad data or "
                    "a too large optimizer.lr",
                    s.steps_run));
  if (rank_log) rank_log->line(summary);
  return 0;
}

// More threads on a host than it has processors (threads per rank times its
// ranks there), or a rank's threads above the processors it is bound to:
// OpenMP regions then wait on descheduled threads, several times slower
// (BENCHMARKS.md, runtime.threads). "" when neither; collective.
std::string oversubscription_note(comm::Group& world) {
  cpu_set_t bound;
  CPU_ZERO(&bound);
  const int mine = sched_getaffinity(0, sizeof bound, &bound) == 0 ? CPU_COUNT(&bound) : get_nprocs();
  const std::vector<std::string> all =
      comm::all_gather_strings(world, fmt::format("{} {} {} {}", num_threads(), mine, get_nprocs(), host_name()));
  std::map<std::string, std::pair<int, int>> hosts;  // host -> (threads of its ranks, processors)
  for (size_t r = 0; r < all.size(); ++r) {
    std::istringstream in(all[r]);
    int threads = 0, bound_to = 0, procs = 0;
    std::string host;
    in >> threads >> bound_to >> procs >> host;
    if (threads > bound_to && bound_to < procs)  // bound to part of the host (mpirun --bind-to core)
      return fmt::format(
          "note: rank {} runs {} threads on the {} processor(s) it is bound to — launch with "
          "--bind-to none (or bind each rank to runtime.threads cores), or lower runtime.threads",
          r, threads, bound_to);
    hosts[host].first += threads;
    hosts[host].second = procs;
  }
  for (const auto& [host, use] : hosts)
    if (use.first > use.second)
      return fmt::format(
          "note: host {} runs {} threads on {} processors (ranks there x runtime.threads): "
          "each step waits on descheduled threads — lower runtime.threads or the ranks per host",
          host, use.first, use.second);
  return "";
}

int run(const TrainArgs& a, const comm::MpiRuntime& mpi) {
  install_stop_signal_handlers();  // again, now that MPI has started (train() installed them first)
  const bool logger = mpi.world_rank() == 0;
  Config cfg = load_config(a.config.path, a.config.overrides);
  if (a.print_config) {
    if (logger) std::fputs(to_yaml(cfg).c_str(), stdout);
    return 0;
  }
  check_same_config(cfg, mpi);                                 // collective: the first
  if (mpi.world_rank() != 0) data::set_fault_report_delay(5);  // a shrunk shard: rank 0's line, once
  set_num_threads(cfg.runtime.threads);
  const Layout layout = resolve_layout(cfg, mpi.world_size());
  check_structure(cfg, layout);
  check_run_paths(cfg);  // every rank, before anything is allocated
  // Rank 0 holds log.dir and checkpoint.dir for the job's life: a second job on them is refused.
  const std::vector<DirLock> locks = mpi.world_rank() == 0 ? lock_run_dirs(cfg) : std::vector<DirLock>{};
  auto mesh = create_job_mesh(cfg, comm::Group(comm::make_world_communicator(cfg.runtime.comm_timeout_s)));
  check_checkpoint_dir_shared(cfg, mesh.world());  // collective, after rank 0's locks
  // The plugin opens and checks the data before the run directory is written.
  auto plugin = std::make_unique<HybridParallelPlugin>(cfg, mesh);
  std::string rank_map = mesh::format_rank_map(mesh, plugin->device().str());  // collective
  const std::string oversubscribed = oversubscription_note(mesh.world());      // collective
  std::vector<std::string> notes;
  Start start;
  start.resume = resolve_resume(cfg, mesh.world(), &notes);  // collective
  if (start.resume) start.resumed = plugin->load_checkpoint(*start.resume);
  // A new run (nothing of its own to resume) from another run's weights: rank
  // 0 picks the step directory and every rank loads that one.
  std::string init_dir;
  std::optional<TrainerState> init;
  if (!start.resume && !cfg.checkpoint.init_from.empty()) {
    init_dir = picked_on_rank_zero(mesh.world(),
                                   [&] { return step_dir_of("checkpoint.init_from", cfg.checkpoint.init_from); });
    init = plugin->load_model(init_dir);
  }
  std::string metrics_path;
  if (logger) {
    const comm::MpiProgress* progress = comm::mpi_progress();
    RunInfo info{.world_size = mpi.world_size(),
                 .tp = layout.tp,
                 .pp = layout.pp,
                 .dp = layout.dp,
                 .threads = num_threads(),
                 .device = plugin->device().str(),
                 .mpi_progress_us = progress ? int64_t(progress->interval().count()) : 0};
    // The metrics continue (cut back to the step) only when the run resumes
    // from its own checkpoint.dir; from a checkpoint elsewhere (a converted
    // model, another run's step) log.dir starts empty like a fresh run's.
    const bool own = start.resume && checkpoint::is_entry_of(*start.resume, cfg.checkpoint.dir);
    RunDir run = prepare_run_dir(cfg, info, own ? start.resumed.step : -1);
    metrics_path = run.metrics_path;
    print_line(fmt::format("lattice train {} | {} | {} rank(s) x {} thread(s){} | run dir {}", cfg.source,
                           plugin->describe(), mpi.world_size(), info.threads,
                           progress ? fmt::format(" | MPI progress thread every {} us", info.mpi_progress_us) : "",
                           run.dir));
    if (mpi.world_size() > 1) std::fputs(rank_map.c_str(), stdout);
    if (std::string map = plugin->stage_map(); !map.empty())
      std::fputs((map.back() == '\n' ? map : map + "\n").c_str(), stdout);
    if (!run.note.empty()) print_line(run.note);
    if (!oversubscribed.empty()) print_line(oversubscribed);
    for (const std::string& n : notes) print_line(n);  // each begins "checkpoint <path>"
    if (start.resume)
      print_line(fmt::format("resuming from {} (step {}; written with tp={} pp={} dp={})", *start.resume,
                             start.resumed.step, start.resumed.layout.tp, start.resumed.layout.pp,
                             start.resumed.layout.dp));
    if (init)
      print_line(
          fmt::format("initialized from {} (checkpoint.init_from; step {} of its run): its model weights, a "
                      "fresh optimizer, from step 1",
                      init_dir, init->step));
  }
  const std::shared_ptr<RankLog> rank_log = open_rank_log(cfg, mesh, *plugin, start);
  for (const std::string& n : notes)
    if (rank_log) rank_log->line(n);
  std::unique_ptr<Plugin> p = std::move(plugin);
  if (rank_log) p = with_rank_log(std::move(p), cfg, rank_log);
  Booster booster(cfg, std::move(p), print_line);
  return logging_errors(rank_log,
                        [&] { return train_and_report(cfg, mpi, mesh, booster, metrics_path, start, rank_log.get()); });
}

}  // namespace

int train(int* argc, char*** argv, const Args& args) {
  // SIGUSR1 / SIGTERM: checkpoint after the current step and exit 0, from the
  // start: a request during start-up (model init, data, checkpoint load, which
  // take seconds on a large model) stops the job after its first step.
  install_stop_signal_handlers();
  TrainArgs a = parse_train_args(args);  // command-line errors need no MPI
  // Starting MPI is most of the time a bad config takes to report, so a single
  // process checks its config first. Under a launcher every rank would print
  // its own line, so there the same checks run after MPI starts (one line).
  if (!under_mpi_launcher()) {
    Config cfg = load_config(a.config.path, a.config.overrides);
    if (!a.print_config) {
      check_structure(cfg, resolve_layout(cfg, 1));
      check_run_paths(cfg);
    }
  }
  return run_with_mpi(argc, argv, start_timeout_s(a.config.path, a.config.overrides),
                      [&](const comm::MpiRuntime& mpi) { return run(a, mpi); });
}

}  // namespace lattice::cli
