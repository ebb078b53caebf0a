// GPU erf GELU and SwiGLU (src/core/cuda/kernels.cu) against the CPU kernels.
// Tolerance: f32 (erff/expf may differ from the host's in the last ulp); see
// cuda_test_support.h.
#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

TEST_F(CudaOps, GeluErfForwardBackwardMatchCpu) {
  expect_activation_matches_cpu(ops::gelu_erf_forward, ops::gelu_erf_backward, {5, 301}, {5, 301}, 1, 4.0);
}

TEST_F(CudaOps, SwigluForwardBackwardMatchCpu) {
  const int64_t N = 7, F = 93;
  expect_activation_matches_cpu(ops::swiglu_forward, ops::swiglu_backward, {N, 2 * F}, {N, F}, 3, 3.0);
}

}  // namespace
}  // namespace lattice::test
