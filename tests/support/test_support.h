// Shared test helpers: the tolerance table per dtype, paths to ../shared data,
// and finite-difference gradient checking.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace lattice::test {

// One tolerance table per dtype (CONVENTIONS.md §13).
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance(DType t);  // f64: finite differences; f32: fp32 vs f64 path

// Directory of ../shared (LATTICE_SHARED_DIR), or "" when absent.
std::string shared_dir();
// Skips the current test when ../shared (or the file inside it) is absent.
#define LATTICE_REQUIRE_SHARED(rel)                                                 \
  do {                                                                              \
    if (::lattice::test::shared_dir().empty() ||                                    \
        !::lattice::test::file_exists(::lattice::test::shared_dir() + "/" + (rel))) \
      GTEST_SKIP() << "../shared/" << (rel) << " is absent";                        \
  } while (0)
bool file_exists(const std::string& path);
// A fresh empty directory under the system temp dir, removed with what it
// holds when the test process exits normally (LATTICE_KEEP_TEST_DIRS=1 keeps
// it).
std::string make_temp_dir(const std::string& tag);

// Positions [t0, t0 + n) of every sample of x (B, T) or (B, T, W), as a
// (B, n) or (B, n, W) copy.
Tensor positions_of(const Tensor& x, int64_t t0, int64_t n);

// Deterministic test data.
Tensor random_tensor(Shape shape, DType dtype, uint64_t seed, double scale = 1.0);
Tensor to_f64(const Tensor& t);  // CPU copy as f64

// max |a - b| / (atol + rtol * |b|) over elements: <= 1 means "close".
double closeness(const Tensor& a, const Tensor& b, Tolerance tol);
#define EXPECT_TENSOR_NEAR(a, b, tol) EXPECT_LE(::lattice::test::closeness((a), (b), (tol)), 1.0)
// Same size and the same bytes (host tensors).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Central finite-difference gradient check in f64.
//   loss(): recomputes a scalar from the current contents of the inputs.
//   x: an f64 input tensor whose analytic gradient is `dx`.
// Returns the largest relative error over the checked elements (all, or a
// deterministic sample of at most `max_elems`).
double gradcheck(const std::function<double()>& loss, Tensor& x, const Tensor& dx, double eps = 1e-6,
                 int64_t max_elems = 64);

}  // namespace lattice::test
