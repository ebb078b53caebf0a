// Polling with a deadline and a gentle backoff, shared by the MPI and NCCL
// Work handles and the CUDA backend's waits for its compute stream.
//
// Why a backoff: ranks of one job often share cores (tests run 4 ranks on 2
// cores with --oversubscribe), and a rank that spins in MPI_Test takes the
// core from the rank it waits for. The first ~50 us poll tightly (small
// messages finish there), then the poller yields, then sleeps with a delay
// that doubles up to 100 us. Every poll also drives MPI progress, so the
// ceiling stays small: a long sleep would stall multi-round collectives.
#pragma once

#include <chrono>
#include <limits>
#include <thread>

namespace lattice {

using Clock = std::chrono::steady_clock;

// A deadline `timeout_s` from now; timeout_s <= 0 or infinite: none.
inline Clock::time_point deadline_after(double timeout_s) {
  if (!(timeout_s > 0) || timeout_s > 1e9) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
}

// Calls done() until it returns true (-> true) or the deadline passes (-> false).
template <typename Done>
bool poll_until(Done&& done, Clock::time_point deadline) {
  using namespace std::chrono;
  const auto start = Clock::now();
  auto delay = microseconds(1);
  for (long polls = 0;; ++polls) {
    if (done()) return true;
    auto now = Clock::now();
    if (now >= deadline) return false;
    auto waited = now - start;
    if (waited < microseconds(50)) continue;
    if (waited < microseconds(500)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(delay);
    if (delay < microseconds(100)) delay *= 2;
  }
}

}  // namespace lattice
