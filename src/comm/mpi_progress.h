// MpiProgress: one thread per process that drives MPI's progress engine while
// some caller holds it, and sleeps otherwise.
//
// Open MPI advances a non-blocking collective (libnbc's schedule of rounds)
// only inside MPI calls. A rank busy in backward makes none between layer
// boundaries, so a dp bucket all-reduce started there sits idle until the
// next call, and its remaining rounds end up exposed after backward. While
// held (hold() more often than release()), the thread calls MPI_Iprobe on
// MPI_COMM_SELF (where no message ever arrives) every `interval`: each call
// runs the progress engine for every pending request without touching the
// requests, which their owner still tests and waits. Released, it blocks on a
// condition variable and costs no CPU; it is started once, by MpiRuntime, and
// joined when MPI ends (comm/mpi_runtime.h: mpi_progress()).
//
// It needs MPI_THREAD_MULTIPLE: MpiRuntime asks for that level only when the
// thread is on ($LATTICE_MPI_PROGRESS_US > 0), and the constructor refuses a
// lower level.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace lattice::comm {

class MpiProgress {
 public:
  // interval > 0; MPI initialised with MPI_THREAD_MULTIPLE (throws otherwise).
  explicit MpiProgress(std::chrono::microseconds interval);
  ~MpiProgress();
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  // The thread polls while holds outnumber releases (callers pair them).
  void hold();
  void release();

  std::chrono::microseconds interval() const { return interval_; }
  long polls() const { return polls_.load(); }  // MPI_Iprobe calls made so far

 private:
  void run();

  const std::chrono::microseconds interval_;
  std::mutex mu_;
  std::condition_variable wake_;
  int holders_ = 0;  // guarded by mu_
  bool stop_ = false;
  std::atomic<long> polls_{0};
  std::thread thread_;
};

// The progress thread's interval from the value of $LATTICE_MPI_PROGRESS_US
// (null or "" when unset): a whole number of microseconds in [0, 1000000];
// 0, the default, turns the thread off. Anything else throws lattice::Error
// with one line naming the variable, the value and the fix. On the 2-core
// development machine (2 ranks x 1 thread, bench/dp) the thread at 50 us left
// the exposed dp sync where the per-layer polling already had it (2-6% of the
// step) and cost 5-10% of throughput, so it is opt-in (BENCHMARKS.md, bench/dp).
std::chrono::microseconds parse_mpi_progress_us(const char* value);

// parse_mpi_progress_us of the environment. Read once, before MPI starts
// (it decides the thread level): apps/lattice/mpi_main.cpp, the MPI test main.
std::chrono::microseconds mpi_progress_interval();

}  // namespace lattice::comm
