#include "core/threads.h"

#include <cblas.h>
#include <omp.h>

namespace lattice {

void set_num_threads(int n) {
  // The OpenMP default: OMP_NUM_THREADS if set, else every processor the
  // runtime sees. Read once, before this sets the pool, so a later call with
  // n <= 0 restores it. (It used to be every processor, whatever
  // OMP_NUM_THREADS said: two ranks launched with OMP_NUM_THREADS=1 on two
  // cores then ran four BLAS threads, several times slower.)
  static const int openmp_default = omp_get_max_threads();
  if (n <= 0) n = openmp_default;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

const char* blas_config() { return openblas_get_config(); }

const char* blas_core() { return openblas_get_corename(); }

}  // namespace lattice
