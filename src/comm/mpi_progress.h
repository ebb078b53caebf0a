// MpiProgress: a thread that drives MPI's progress engine while it lives.
//
// Open MPI advances a non-blocking collective (libnbc's schedule of rounds)
// only inside MPI calls. A rank busy in backward makes none between layer
// boundaries, so a dp bucket all-reduce started there sits idle until the
// next call, and its remaining rounds end up exposed after backward. While an
// MpiProgress exists, its thread calls MPI_Iprobe on MPI_COMM_SELF (where no
// message ever arrives) every `interval`: each call runs the progress engine
// for every pending request without touching the requests, which their owner
// still tests and waits. It needs MPI_THREAD_MULTIPLE (MpiRuntime asks for it);
// under a lower thread level, or without MPI, no thread starts and active()
// is false.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace lattice::comm {

class MpiProgress {
 public:
  explicit MpiProgress(std::chrono::microseconds interval);
  ~MpiProgress();
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  bool active() const { return thread_.joinable(); }
  long polls() const { return polls_.load(); }  // MPI_Iprobe calls made so far

 private:
  std::atomic<bool> stop_{false};
  std::atomic<long> polls_{0};
  std::thread thread_;
};

// The interval of the progress thread: $LATTICE_MPI_PROGRESS_US microseconds;
// 0, the default, turns the thread off. On the 2-core development machine
// (2 ranks x 1 thread, bench/dp) the thread at 50 us left the exposed dp sync
// where the per-layer polling already had it (2-6% of the step) and cost
// 5-10% of throughput, so it is opt-in (BENCHMARKS.md, bench/dp).
std::chrono::microseconds mpi_progress_interval();

}  // namespace lattice::comm
