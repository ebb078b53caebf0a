// One thread pool per rank.
//
// OpenBLAS is the OpenMP build, so BLAS calls and our own OpenMP loops share
// the same pool; set_num_threads sets both so they never oversubscribe.
#pragma once

namespace lattice {

void set_num_threads(int n);  // n <= 0: the OpenMP default
int num_threads();
const char* blas_config();  // OpenBLAS build string (for run_info.json)

}  // namespace lattice
