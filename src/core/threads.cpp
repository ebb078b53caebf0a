#include "core/threads.h"

#include <cblas.h>
#include <omp.h>

namespace lattice {

void set_num_threads(int n) {
  // The OpenMP default: OMP_NUM_THREADS if set, else every processor the
  // runtime sees (not omp_get_num_procs, which ignores OMP_NUM_THREADS and
  // oversubscribes ranks launched with one thread each). Read once, before
  // this sets the pool, so a later call with n <= 0 restores it.
  static const int openmp_default = omp_get_max_threads();
  if (n <= 0) n = openmp_default;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

const char* blas_config() { return openblas_get_config(); }

const char* blas_core() { return openblas_get_corename(); }

}  // namespace lattice
