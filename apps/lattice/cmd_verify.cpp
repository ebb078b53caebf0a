// lattice verify-layout CONFIG [key=value ...] [--tolerance X]
//
// Trains the configured layout (under mpirun) and the single-rank reference
// (every rank runs it on its own, with a one-rank mesh) on identical data and
// seeds for train.steps steps, prints per-step loss and grad-norm differences
// on rank 0, and exits 1 when a relative loss difference exceeds the tolerance
// (by default the contract's for the config's precision: 1e-5 in fp32, 1e-3
// under bf16/fp16, config.h layout_loss_tolerance).
//
// SIGUSR1 or SIGTERM (booster/stop_signal.h) ends the layout run after the
// step in progress (the ranks agree on it at each step, as training does),
// the reference then runs as many steps, and the table and verdict cover the
// steps both ran, saying so. It used to end the job with no output.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "args.h"
#include "booster/booster.h"
#include "booster/hybrid_parallel_plugin.h"
#include "booster/metrics.h"
#include "booster/run_dir.h"
#include "booster/stop_signal.h"
#include "cli.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "core/threads.h"

namespace lattice::cli {

namespace {

struct Trace {
  std::vector<double> loss, norm;
  std::vector<bool> skipped;  // fp16: the step's gradients were not finite, no update (loss scale backed off)
};

// Up to `steps` steps; a stop request ends the run after the step in
// progress, agreed over mesh.world() (every rank of the run stops after the
// same step). init_dir: the step directory whose model weights both runs
// start from (checkpoint.init_from), "" for the config's own initialisation.
Trace run_steps(const Config& cfg, mesh::ProcessGroupMesh& mesh, const std::string& init_dir, int64_t steps,
                std::optional<RankPlacement> placement, RankPlacement* placed = nullptr) {
  HybridParallelPlugin plugin(cfg, mesh, placement);
  if (placed) *placed = plugin.placement();
  if (!init_dir.empty()) plugin.load_model(init_dir);
  const optim::LrSchedule schedule = lr_schedule(cfg);
  Trace t;
  for (int64_t step = 1; step <= steps; ++step) {
    StepStats s = plugin.execute_pipeline(step);
    UpdateStats u = plugin.optimizer_step(step, optim::learning_rate(schedule, step));
    t.loss.push_back(s.valid_tokens > 0 ? s.loss_sum / double(s.valid_tokens) : 0.0);
    t.norm.push_back(u.grad_norm);
    t.skipped.push_back(u.skipped);
    if (step < steps && comm::all_reduce_scalar(mesh.world(), stop_requested() ? 1 : 0, comm::ReduceOp::max) > 0) break;
  }
  return t;
}

double rel(double a, double ref) { return std::fabs(a - ref) / std::max(std::fabs(ref), 1e-30); }

int verify(const std::string& path, const std::vector<std::string>& overrides, std::optional<double> tolerance_opt,
           const comm::MpiRuntime& mpi) {
  Config cfg = load_config(path, overrides);
  check_data_paths(cfg);        // as train does: located at their keys, before any MPI work
  check_same_config(cfg, mpi);  // collective: the first
  const double tolerance = tolerance_opt.value_or(layout_loss_tolerance(cfg.runtime.precision));
  set_num_threads(cfg.runtime.threads);
  const Layout layout = resolve_layout(cfg, mpi.world_size());  // the layout must fit the job
  auto mesh = create_job_mesh(cfg, comm::Group(comm::make_world_communicator(cfg.runtime.comm_timeout_s)));
  // checkpoint.init_from: both runs start from its weights, the step
  // directory rank 0 picks (as train does). It was ignored: a fine-tuning
  // config was verified from fresh weights without a word.
  const std::string init_dir = cfg.checkpoint.init_from.empty() ? "" : picked_on_rank_zero(mesh.world(), [&] {
    return step_dir_of("checkpoint.init_from", cfg.checkpoint.init_from);
  });
  RankPlacement placement;
  Trace got = run_steps(cfg, mesh, init_dir, cfg.train.steps, std::nullopt, &placement);

  Config ref_cfg = cfg;
  ref_cfg.parallel.tp = ref_cfg.parallel.pp = ref_cfg.parallel.dp = 1;
  ref_cfg.parallel.microbatches = 0;
  ref_cfg.parallel.virtual_stages = 1;
  ref_cfg.parallel.schedule = PipeSchedule::one_f_one_b;
  ref_cfg.parallel.layers_per_stage = {};
  ref_cfg.parallel.recompute_layers_per_stage = {};
  ref_cfg.parallel.recompute_attention = false;
  ref_cfg.parallel.head_chunk_tokens = 0;
  ref_cfg.parallel.zero = 0;
  auto ref_mesh = create_job_mesh(ref_cfg, comm::self_group("world"));
  // On this rank's own device, as many steps as the layout ran; a stop
  // request during it ends each rank's reference at its own step, so the
  // ranks then compare the steps every one of them ran.
  // A request that ended the layout run is answered; only a new one ends the reference early.
  if (int64_t(got.loss.size()) < cfg.train.steps) clear_stop_request();
  Trace ref = run_steps(ref_cfg, ref_mesh, init_dir, int64_t(got.loss.size()), placement);
  const auto compared = int64_t(comm::all_reduce_scalar(mesh.world(), double(ref.loss.size()), comm::ReduceOp::min));
  for (Trace* t : {&got, &ref}) {
    t->loss.resize(size_t(compared)), t->norm.resize(size_t(compared)), t->skipped.resize(size_t(compared));
  }
  const std::string stopped = compared < cfg.train.steps ? fmt::format(
                                                               " (stopped by a stop request, SIGUSR1 or SIGTERM, after "
                                                               "step {} of {}: the comparison covers those steps)",
                                                               compared, cfg.train.steps)
                                                         : "";

  // fp16 adds which run skipped each step: a step one run skips and the
  // other applies makes every later loss differ, and the table then says why.
  const bool fp16 = cfg.runtime.precision == Precision::fp16;
  auto skip_text = [&](size_t i) {
    const bool a = ref.skipped[i], b = got.skipped[i];
    return a && b ? "both" : a ? "1 rank" : b ? "layout" : "-";
  };
  // A loss that is not finite on either side fails the check: NaN compares
  // false, and std::max would drop it (a diverged run read as PASS).
  double worst = 0;
  auto take = [&](double d) { worst = std::isnan(d) || std::isnan(worst) ? NAN : std::max(worst, d); };
  std::string table =
      fmt::format("{:>5}  {:>14}  {:>14}  {:>9}  {:>12}  {:>12}  {:>9}{}\n", "step", "loss (1 rank)", "loss (layout)",
                  "rel diff", "norm (1)", "norm (layout)", "rel diff", fp16 ? "  skipped" : "");
  std::string skips_differ;  // the steps skipped by one run only
  for (size_t i = 0; i < ref.loss.size(); ++i) {
    take(std::isfinite(got.loss[i]) && std::isfinite(ref.loss[i]) ? rel(got.loss[i], ref.loss[i]) : NAN);
    // A value that is not finite (a skipped fp16 step's norm, a diverged
    // loss) prints '-', as the progress lines do ("-nan" before).
    table += fmt::format("{:>5}  {:>14}  {:>14}  {:>9}  {:>12}  {:>12}  {:>9}{}\n", i + 1,
                         finite_or_dash(ref.loss[i], "{:.9g}"), finite_or_dash(got.loss[i], "{:.9g}"),
                         finite_or_dash(rel(got.loss[i], ref.loss[i]), "{:.2e}"), finite_or_dash(ref.norm[i], "{:.6g}"),
                         finite_or_dash(got.norm[i], "{:.6g}"), finite_or_dash(rel(got.norm[i], ref.norm[i]), "{:.2e}"),
                         fp16 ? fmt::format("  {:>7}", skip_text(i)) : "");
    if (ref.skipped[i] != got.skipped[i])
      skips_differ += fmt::format("{}{} ({})", skips_differ.empty() ? "" : ", ", i + 1, skip_text(i));
  }
  if (!skips_differ.empty())
    table += fmt::format(
        "fp16: step {} skipped by one run only (non-finite gradients on one side of a 16-bit rounding): the runs "
        "apply different updates from there on\n",
        skips_differ);
  // Step 1's gradients come from the same weights on both sides: their norm
  // checks backward, which the losses (forward's) see only from step 2 on. A
  // step both runs skipped (fp16) has no norm to compare.
  const double norm1 = ref.skipped[0] && got.skipped[0]                           ? 0.0
                       : std::isfinite(got.norm[0]) && std::isfinite(ref.norm[0]) ? rel(got.norm[0], ref.norm[0])
                                                                                  : NAN;
  const bool ok = worst <= tolerance && norm1 <= tolerance;
  if (mpi.world_rank() == 0) {
    std::fputs(
        fmt::format(
            "verify-layout {}: tp={} pp={} dp={} against one rank, {} steps{}{}\n{}", cfg.source, layout.tp, layout.pp,
            layout.dp, compared, stopped,
            init_dir.empty() ? "" : fmt::format(", both from the weights of {} (checkpoint.init_from)", init_dir),
            table)
            .c_str(),
        stdout);
    std::fputs(
        fmt::format("{}: largest relative loss difference {:.2e}{}, step 1 grad norm {:.2e} (tolerance {:.0e}){}\n",
                    ok ? "PASS" : "FAIL", worst,
                    compared < cfg.train.steps ? fmt::format(" over {} of {} steps", compared, cfg.train.steps) : "",
                    norm1, tolerance,
                    std::isnan(worst) || std::isnan(norm1)
                        ? " — a loss or norm is not finite: the runs diverged, and the comparison says "
                          "nothing (lower optimizer.lr, or look at the data)"
                        : "")
            .c_str(),
        stdout);
  }
  return ok ? 0 : 1;
}

}  // namespace

int verify_layout(int* argc, char*** argv, const Args& args) {
  install_stop_signal_handlers();  // from the start, as train: a request during start-up stops after step 1
  std::optional<double> tolerance;
  ArgReader r("verify-layout", "lattice verify-layout CONFIG [key=value ...] [--tolerance X]", args);
  const ConfigArgs c = read_config_args(r, [&](ArgReader& o) {
    if (!o.is("--tolerance")) return false;
    // inf (or NaN) could never fail
    tolerance = o.number(std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max(),
                         "a positive finite number");
    return true;
  });
  return run_with_mpi(argc, argv, start_timeout_s(c.path, c.overrides), [&](const comm::MpiRuntime& mpi) {
    install_stop_signal_handlers();  // again, now that MPI has started
    return verify(c.path, c.overrides, tolerance, mpi);
  });
}

}  // namespace lattice::cli
