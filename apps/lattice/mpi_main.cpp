// run_with_mpi: the MPI lifetime and the failure policy of the multi-rank commands.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "cli.h"
#include "config/config.h"
#include "core/error.h"

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

}  // namespace

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

int run_with_mpi(int* argc, char*** argv, const std::function<int(const comm::MpiRuntime&)>& body) {
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
  comm::MpiRuntime mpi(argc, argv, options);
  if (line.empty()) {
    try {
      return body(mpi);
    } catch (const InputError& e) {  // a ConfigError too
      line = e.message();
    } catch (const Error& e) {
      line = e.describe();
    } catch (const std::exception& e) {
      line = e.what();
    }
  }
  if (mpi.world_size() > 1) fail_job(line, mpi);
  std::fprintf(stderr, "lattice: error: %s\n", line.c_str());
  return 1;
}

}  // namespace lattice::cli
