// What the MPI benchmark programs (bench_checkpoint, bench_zero_gather,
// bench_nccl_busbw) share: the median of their repeats, and a main that
// starts MPI, runs the program and takes the whole job down, with one line
// naming the program and the rank, when a rank throws.
#pragma once

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "comm/mpi_runtime.h"

namespace lattice::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <typename Run>  // int run(int argc, char** argv, const comm::MpiRuntime&)
int mpi_main(const char* name, int argc, char** argv, Run&& run) {
  comm::MpiRuntime mpi(&argc, &argv);
  try {
    return run(argc, argv, mpi);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: %s\n", name, mpi.world_rank(), e.what());
    comm::MpiRuntime::abort_job(1);
  }
  return 1;
}

}  // namespace lattice::bench
