#include "core/threads.h"

#include <cblas.h>
#include <omp.h>

namespace lattice {

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

const char* blas_config() { return openblas_get_config(); }

const char* blas_core() { return openblas_get_corename(); }

}  // namespace lattice
