#include "booster/peak_flops.h"

#include <algorithm>

#include "core/ops.h"
#include "core/timer.h"

namespace lattice {

double measure_sgemm_flops() {
  const int64_t n = 1024;
  Tensor a = Tensor::zeros({n, n}, DType::f32), b = Tensor::zeros({n, n}, DType::f32),
         c = Tensor::zeros({n, n}, DType::f32);
  for (int64_t i = 0; i < n * n; ++i) {
    a.data<float>()[i] = float(i % 7) * 0.1f;
    b.data<float>()[i] = float(i % 5) * 0.1f;
  }
  ops::gemm(c, a, b, false, false);  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    Timer t;
    ops::gemm(c, a, b, false, false);
    best = std::min(best, t.seconds());
  }
  return 2.0 * double(n) * double(n) * double(n) / best;
}

}  // namespace lattice
