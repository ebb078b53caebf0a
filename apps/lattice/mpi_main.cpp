// run_with_mpi: the MPI lifetime and the failure policy of the multi-rank commands.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "cli.h"
#include "comm/gather_strings.h"
#include "comm/mpi_communicator.h"
#include "config/config.h"
#include "core/error.h"
#include "core/poll.h"

namespace lattice::cli {

namespace {

// One line for the failing rank, then the whole job ends. Every rank usually
// fails alike (a bad config): rank 0 reports at once and ends the job; other
// ranks wait a moment first, so the same line is not printed once per rank,
// but a failure on one rank alone is still reported within seconds. (2 s
// was too short once for rank 0's abort to reach a rank of a loaded 2-core
// machine: the line came twice.)
[[noreturn]] void fail_job(const std::string& line, const comm::MpiRuntime& mpi) {
  if (mpi.world_rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(5));
  std::fprintf(stderr, "lattice: error: %s\n", line.c_str());
  std::fflush(stderr);
  comm::MpiRuntime::abort_job(1);
}

// MPI_Init waits for every rank of the job: one that never arrives (stopped,
// swapping, its node unreachable) would keep the others there for ever, and
// runtime.comm_timeout_s bounds only what comes after. This bounds the start
// by the same limit: one line, then this process exits, which ends the job
// (the launcher ends every rank when one exits without MPI_Finalize). Other
// ranks than 0 wait a moment longer, as fail_job does, so one line is printed.
class StartWatchdog {
 public:
  StartWatchdog(double timeout_s, LaunchedAs as) {
    if (as.size <= 1 || !(timeout_s > 0)) return;
    thread_ = std::thread([this, timeout_s, as] {
      std::unique_lock lock(mutex_);
      // deadline_after: a limit past 1e9 s waits for ever (wait_for's own
      // conversion to nanoseconds overflowed and timed out at once).
      const auto deadline = deadline_after(timeout_s + (as.rank == 0 ? 0.0 : 5.0));
      if (done_cv_.wait_until(lock, deadline, [this] { return done_; })) return;
      std::fprintf(stderr,
                   "lattice: error: rank %d: MPI start-up did not complete within %g s (runtime.comm_timeout_s): a "
                   "rank of the job is stalled or cannot be reached — check the job's hosts and their network, or "
                   "raise runtime.comm_timeout_s if start-up is this slow\n",
                   as.rank, timeout_s);
      std::fflush(stderr);
      std::_Exit(1);
    });
  }
  ~StartWatchdog() { disarm(); }
  void disarm() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

double start_timeout_s(const std::string& path, const std::vector<std::string>& overrides) {
  try {
    return load_config(path, overrides).runtime.comm_timeout_s;
  } catch (const std::exception&) {  // reported after MPI starts, once for the job
    return Config{}.runtime.comm_timeout_s;
  }
}

bool under_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_PROCID"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

LaunchedAs launched_as() {
  const std::pair<const char*, const char*> vars[] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                                      {"PMI_SIZE", "PMI_RANK"},
                                                      {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID"}};
  for (const auto& [size, rank] : vars)
    if (const char* n = std::getenv(size); n != nullptr && std::atoi(n) > 1) {
      const char* r = std::getenv(rank);
      return {std::atoi(n), r ? std::atoi(r) : 0};
    }
  return {};
}

std::string picked_on_rank_zero(comm::Group& world, const std::function<std::string()>& pick) {
  return comm::all_gather_strings(world, world.rank() == 0 ? pick() : std::string()).front();
}

void check_same_config(const Config& cfg, const comm::MpiRuntime& mpi) {
  if (mpi.world_size() == 1) return;
  comm::Group world(comm::make_world_communicator(cfg.runtime.comm_timeout_s));
  const std::string mine = to_yaml(cfg);
  // Small digests first; the whole texts only when some differ.
  const std::vector<std::string> digests =
      comm::all_gather_strings(world, std::to_string(std::hash<std::string>{}(mine)));
  if (std::all_of(digests.begin(), digests.end(), [&](const std::string& d) { return d == digests[0]; })) return;
  const std::vector<std::string> texts = comm::all_gather_strings(world, mine);
  const Config first = parse_config(texts[0], "rank 0's config");
  for (int r = 1; r < mpi.world_size(); ++r) {
    const auto d = first_difference(first, parse_config(texts[size_t(r)], fmt::format("rank {}'s config", r)));
    if (!d) continue;
    config_fail(cfg, d->key,
                fmt::format("{} on rank 0 but {} on rank {} — every rank must run the same config: give each the same "
                            "file and overrides (a relative path is read in each rank's working directory)",
                            d->a, d->b, r));
  }
}

int run_with_mpi(int* argc, char*** argv, double start_timeout_s,
                 const std::function<int(const comm::MpiRuntime&)>& body) {
  // $LATTICE_MPI_PROGRESS_US decides MPI's thread level, so it is read here,
  // once, before MPI starts. A bad value is reported like a bad config: at
  // once by a single process; under a launcher once for the job, after MPI
  // starts at its plain thread level.
  std::string line;  // the one error line
  comm::MpiRuntimeOptions options;
  try {
    options.progress_interval = comm::mpi_progress_interval();
  } catch (const Error& e) {
    line = e.message();
    if (!under_mpi_launcher()) {
      std::fprintf(stderr, "lattice: error: %s\n", line.c_str());
      return 1;
    }
  }
  StartWatchdog watchdog(start_timeout_s, launched_as());
  comm::MpiRuntime mpi(argc, argv, options);
  watchdog.disarm();
  if (line.empty()) {
    try {
      return body(mpi);
    } catch (const InputError& e) {  // a ConfigError too
      line = e.message();
    } catch (const Error& e) {
      line = e.describe();
    } catch (const std::exception& e) {
      line = describe_exception(e);
    }
  }
  if (mpi.world_size() > 1) fail_job(line, mpi);
  std::fprintf(stderr, "lattice: error: %s\n", line.c_str());
  return 1;
}

}  // namespace lattice::cli
