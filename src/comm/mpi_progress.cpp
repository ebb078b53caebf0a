#include "comm/mpi_progress.h"

#include <mpi.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "comm/mpi_runtime.h"
#include "core/error.h"

namespace lattice::comm {

MpiProgress::MpiProgress(std::chrono::microseconds interval) {
  if (interval.count() <= 0 || !mpi_active()) return;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) return;
  thread_ = std::thread([this, interval] {
    while (!stop_.load(std::memory_order_relaxed)) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
      polls_.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(interval);
    }
  });
}

MpiProgress::~MpiProgress() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::chrono::microseconds mpi_progress_interval() {
  const char* s = std::getenv("LATTICE_MPI_PROGRESS_US");
  if (!s || !*s) return std::chrono::microseconds(0);
  long us = 0;
  const char* end = s + std::strlen(s);
  auto [p, ec] = std::from_chars(s, end, us);
  LATTICE_CHECK(ec == std::errc() && p == end && us >= 0,
                "LATTICE_MPI_PROGRESS_US: '{}' is not a whole number of microseconds >= 0; unset it (no progress "
                "thread) or set e.g. 50",
                s);
  return std::chrono::microseconds(us);
}

}  // namespace lattice::comm
