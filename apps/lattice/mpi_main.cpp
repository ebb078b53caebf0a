// run_with_mpi: the MPI lifetime and the failure policy of the multi-rank commands.
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli.h"
#include "config/config.h"
#include "core/error.h"

namespace lattice::cli {

namespace {

// One line for the failing rank, then the whole job ends. Every rank usually
// fails alike (a bad config): rank 0 reports at once and ends the job; other
// ranks wait a moment first, so the same line is not printed once per rank,
// but a failure on one rank alone is still reported within seconds.
[[noreturn]] void fail_job(const std::string& line, const comm::MpiRuntime& mpi) {
  if (mpi.world_rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  std::fprintf(stderr, "lattice: error: %s\n", line.c_str());
  std::fflush(stderr);
  comm::MpiRuntime::abort_job(1);
}

}  // namespace

int run_with_mpi(int* argc, char*** argv, const std::function<int(const comm::MpiRuntime&)>& body) {
  comm::MpiRuntime mpi(argc, argv);
  std::string line;
  try {
    return body(mpi);
  } catch (const ConfigError& e) {
    line = e.message();
  } catch (const Error& e) {
    line = e.describe();
  } catch (const std::exception& e) {
    line = e.what();
  }
  if (mpi.world_size() > 1) fail_job(line, mpi);
  std::fprintf(stderr, "lattice: error: %s\n", line.c_str());
  return 1;
}

}  // namespace lattice::cli
