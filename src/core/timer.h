// Wall-clock timers. ScopedTimer adds the elapsed seconds of its scope to a
// double it was given (so several scopes can accumulate into one counter).
#pragma once

#include <chrono>

namespace lattice {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

class Timer {
 public:
  Timer() : start_(now_seconds()) {}
  void reset() { start_ = now_seconds(); }
  double seconds() const { return now_seconds() - start_; }

 private:
  double start_;
};

class ScopedTimer {
 public:
  explicit ScopedTimer(double& accumulator) : acc_(accumulator), start_(now_seconds()) {}
  ~ScopedTimer() { acc_ += now_seconds() - start_; }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& acc_;
  double start_;
};

}  // namespace lattice
