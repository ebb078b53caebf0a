// One thread pool per rank.
//
// OpenBLAS is the OpenMP build, so BLAS calls and our own OpenMP loops share
// the same pool; set_num_threads sets both so they never oversubscribe.
#pragma once

namespace lattice {

void set_num_threads(int n);  // n <= 0: the OpenMP default (OMP_NUM_THREADS, else every processor)
int num_threads();
const char* blas_config();  // OpenBLAS build string (for run_info.json)
// The kernel set OpenBLAS chose at load time (e.g. "SkylakeX", or "Prescott"
// when it does not know the CPU model; OPENBLAS_CORETYPE overrides it).
const char* blas_core();

}  // namespace lattice
