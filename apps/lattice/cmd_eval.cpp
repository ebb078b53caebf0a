// lattice eval CONFIG [key=value ...] [--checkpoint PATH] [--batches N]
//
// A checkpoint's loss on the validation shards: the evaluation `lattice
// train` runs every train.eval_every steps, on its own. The config says the
// model, the data (data.val), the batch and the layout; under mpirun any
// layout evaluates any layout's checkpoint (checkpoints hold the logical
// model). The checkpoint is --checkpoint PATH (a step, checkpoint or run
// directory, as for sample) or the newest intact one in checkpoint.dir; its
// model.* and data.tokenizer must be the config's, the rest may differ (a
// model from `convert --from-hf` is checked by its tensor names). Batches:
// --batches N, else train.eval_steps, else (0) the whole validation set,
// each window once. Only data.val is read (data.train need not exist), and
// no optimizer state is allocated (PluginUse::evaluate). Nothing is written:
// not the run directory, not a lock.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "args.h"
#include "booster/booster.h"
#include "booster/hybrid_parallel_plugin.h"
#include "booster/run_dir.h"
#include "checkpoint/atomic_dir.h"
#include "cli.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/threads.h"
#include "mesh/process_group_mesh.h"

namespace lattice::cli {

namespace {

struct EvalArgs {
  ConfigArgs config;
  std::string checkpoint;
  std::optional<int64_t> batches;
};

EvalArgs parse_eval_args(const Args& args) {
  EvalArgs e;
  ArgReader r("eval", "lattice eval CONFIG [key=value ...] [--checkpoint PATH] [--batches N]", args);
  e.config = read_config_args(r, [&](ArgReader& o) {
    if (o.is("--checkpoint")) {
      e.checkpoint = o.path();
    } else if (o.is("--batches")) {
      e.batches =
          o.number<int64_t>(0, std::numeric_limits<int64_t>::max(), "an integer >= 0 (0: the whole validation set)");
    } else {
      return false;
    }
    return true;
  });
  // eval never evaluates on a schedule: without this, the training checks
  // of eval_every answered for it ("data.val is not set — set ... eval_every:
  // 0" for an empty data.val; train.eval_steps: 0, the whole set, refused).
  e.config.overrides.push_back("train.eval_every=0");
  return e;
}

// The config's checks that need no MPI: the key, the structure and the paths.
void check_eval_config(const Config& cfg, const Layout& layout) {
  if (cfg.data.val.empty())
    config_fail(cfg, "data.val", "is empty: eval scores the validation shards — set data.val=GLOB");
  check_structure(cfg, layout);
  check_data_paths(cfg, /*train=*/false);  // eval reads data.val only
}

// --checkpoint PATH, else the newest complete checkpoint of checkpoint.dir.
std::string pick_step_dir(const Config& cfg, const std::string& given) {
  if (!given.empty()) return step_dir_of("eval --checkpoint", given);
  std::error_code ec;
  if (!std::filesystem::is_directory(cfg.checkpoint.dir, ec) || !checkpoint::find_latest_complete(cfg.checkpoint.dir))
    config_fail(cfg, "checkpoint.dir",
                fmt::format("'{}' holds no complete checkpoint — train first, or pass --checkpoint PATH (a step, "
                            "checkpoint or run directory)",
                            cfg.checkpoint.dir));
  return step_dir_of("eval", cfg.checkpoint.dir);
}

int run(const EvalArgs& a, const comm::MpiRuntime& mpi) {
  const Config cfg = load_config(a.config.path, a.config.overrides);
  check_same_config(cfg, mpi);  // collective: the first
  set_num_threads(cfg.runtime.threads);
  const Layout layout = resolve_layout(cfg, mpi.world_size());
  check_eval_config(cfg, layout);
  auto mesh = create_job_mesh(cfg, comm::Group(comm::make_world_communicator(cfg.runtime.comm_timeout_s)));
  // Rank 0 picks the step directory and every rank loads that one (a
  // checkpoint written meanwhile must not split the job).
  const std::string step_dir = picked_on_rank_zero(mesh.world(), [&] { return pick_step_dir(cfg, a.checkpoint); });
  HybridParallelPlugin plugin(cfg, mesh, std::nullopt, HalfWeights::shadow, PluginUse::evaluate);
  const TrainerState st = plugin.load_model(step_dir);
  const int64_t batches = a.batches.value_or(cfg.train.eval_steps);
  // Only --batches 0 masks the rows past the last window; N batches of global_batch read N * global_batch windows.
  const int64_t windows = plugin.val_windows(), full = windows / cfg.train.global_batch;
  if (mpi.world_rank() == 0) {  // before the evaluation, which may take a while
    std::printf("lattice eval %s | %s | %d rank(s) x %d thread(s)\n", cfg.source.c_str(), plugin.describe().c_str(),
                mpi.world_size(), num_threads());
    std::printf("checkpoint %s (step %lld)\n", step_dir.c_str(), static_cast<long long>(st.step));
    if (a.batches && batches > full)  // it wraps around data.val (data/loader.h)
      std::printf("%s\n", fmt::format("note: --batches {} x global batch {} windows, but data.val holds {}: the "
                                      "evaluation wraps around and reads some of them more than once — --batches 0 "
                                      "reads each window once{}",
                                      batches, cfg.train.global_batch, windows,
                                      full > 0 ? fmt::format(" ({} batches read none twice)", full) : "")
                              .c_str());
    std::fflush(stdout);
  }
  const double loss = plugin.evaluate(batches);
  if (mpi.world_rank() == 0) {
    const std::string what =
        batches > 0 ? fmt::format("{} batch(es) of {} x {} tokens", batches, cfg.train.global_batch, cfg.train.seq_len)
                    : "the whole set";
    std::printf("%s\n", fmt::format("val_loss {:.9g}, perplexity {:.6g} ({} of data.val '{}'){}", loss, std::exp(loss),
                                    what, cfg.data.val,
                                    std::isfinite(loss) ? ""
                                                        : " — not finite: the checkpoint diverged, or no target in "
                                                          "these batches is scored")
                            .c_str());
  }
  return std::isfinite(loss) ? 0 : 1;
}

}  // namespace

int eval(int* argc, char*** argv, const Args& args) {
  EvalArgs a = parse_eval_args(args);  // command-line errors need no MPI
  // A single process checks its config before MPI starts (as train does);
  // under a launcher the same checks run after it, for one line per job.
  if (!under_mpi_launcher()) {
    Config cfg = load_config(a.config.path, a.config.overrides);
    check_eval_config(cfg, resolve_layout(cfg, 1));
  }
  return run_with_mpi(argc, argv, start_timeout_s(a.config.path, a.config.overrides),
                      [&](const comm::MpiRuntime& mpi) { return run(a, mpi); });
}

}  // namespace lattice::cli
