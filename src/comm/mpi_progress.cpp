#include "comm/mpi_progress.h"

#include <mpi.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "comm/mpi_runtime.h"
#include "core/error.h"

namespace lattice::comm {

MpiProgress::MpiProgress(std::chrono::microseconds interval) : interval_(interval) {
  LATTICE_CHECK(interval.count() > 0, "MpiProgress: the interval must be positive, got {} us", interval.count());
  LATTICE_CHECK(mpi_active(), "MpiProgress: MPI is not initialised");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  LATTICE_CHECK(level >= MPI_THREAD_MULTIPLE,
                "the MPI progress thread needs MPI_THREAD_MULTIPLE, but MPI runs at thread level {} — unset "
                "LATTICE_MPI_PROGRESS_US or use an MPI library built with thread support",
                level);
  thread_ = std::thread([this] { run(); });
}

MpiProgress::~MpiProgress() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void MpiProgress::hold() {
  {
    std::lock_guard lock(mu_);
    ++holders_;
  }
  wake_.notify_all();
}

void MpiProgress::release() {
  std::lock_guard lock(mu_);
  LATTICE_CHECK(holders_ > 0, "MpiProgress: release() without a hold()");
  --holders_;
}

void MpiProgress::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (holders_ == 0) {  // idle: blocked until a hold() or the end
      wake_.wait(lock, [this] { return stop_ || holders_ > 0; });
      continue;
    }
    lock.unlock();
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    polls_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stop_; });  // the end need not wait out the interval
  }
}

std::chrono::microseconds parse_mpi_progress_us(const char* value) {
  if (!value || !*value) return std::chrono::microseconds(0);
  constexpr long kMax = 1000000;  // polling less often than once a second would not help any bucket
  long us = -1;
  const char* end = value + std::strlen(value);
  auto [p, ec] = std::from_chars(value, end, us);
  LATTICE_CHECK(ec == std::errc() && p == end && us >= 0 && us <= kMax,
                "LATTICE_MPI_PROGRESS_US='{}': expected a whole number of microseconds in [0, {}] — unset it (no "
                "MPI progress thread, the default) or set e.g. LATTICE_MPI_PROGRESS_US=50",
                value, kMax);
  return std::chrono::microseconds(us);
}

std::chrono::microseconds mpi_progress_interval() {
  return parse_mpi_progress_us(std::getenv("LATTICE_MPI_PROGRESS_US"));
}

}  // namespace lattice::comm
