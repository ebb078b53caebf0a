#include "support/test_support.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "core/ops.h"
#include "core/rng.h"

namespace lattice::test {

Tolerance tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-5, 1e-8};
    case DType::f32:
      return {1e-4, 1e-5};
    case DType::bf16:
      return {2e-2, 1e-2};
    case DType::f16:
      return {2e-3, 1e-3};
    default:
      return {0, 0};
  }
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string shared_dir() {
  const char* env = std::getenv("LATTICE_SHARED_DIR");
  std::string d = env ? env : "";
  if (d.empty() || !file_exists(d)) return "";
  return d;
}

namespace {
// The directories make_temp_dir made in this process, removed when it exits
// normally, failed tests' too (a process that aborts leaves its own behind),
// unless LATTICE_KEEP_TEST_DIRS is set: set it to look at what a test wrote.
class TempDirs {
 public:
  void add(std::filesystem::path p) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(std::move(p));
  }
  ~TempDirs() {
    const char* keep = std::getenv("LATTICE_KEEP_TEST_DIRS");
    if (keep != nullptr && *keep != '\0') return;
    std::error_code ec;  // best effort: never throw from exit
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ec);
  }

 private:
  std::mutex mu_;
  std::vector<std::filesystem::path> dirs_;
};
TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}
}  // namespace

std::string make_temp_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto base = std::filesystem::temp_directory_path() /
              ("lattice-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  temp_dirs().add(base);
  return base.string();
}

Tensor positions_of(const Tensor& x, int64_t t0, int64_t n) {
  const int64_t B = x.dim(0), T = x.dim(1), W = x.ndim() == 3 ? x.dim(2) : 1;
  Tensor r = Tensor::zeros(x.ndim() == 3 ? Shape{B, n, W} : Shape{B, n}, x.dtype());
  for (int64_t b = 0; b < B; ++b) ops::copy_rows(r, b * n * W, W, x, (b * T + t0) * W, W, n, W);
  return r;
}

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed, double scale) {
  Tensor t64 = Tensor::empty(std::move(shape), DType::f64);
  RngKey key;
  key.seed = seed;
  key.purpose = RngPurpose::data;
  double* p = t64.data<double>();
  for (int64_t i = 0; i < t64.numel(); ++i) p[i] = scale * (2.0 * rng_uniform(key, 0, uint64_t(i)) - 1.0);
  return dtype == DType::f64 ? t64 : t64.to(dtype);
}

Tensor to_f64(const Tensor& t) {
  Tensor c = t.on_host();
  return c.dtype() == DType::f64 ? c.clone() : c.to(DType::f64);
}

double closeness(const Tensor& a, const Tensor& b, Tolerance tol) {
  EXPECT_EQ(a.numel(), b.numel());
  Tensor x = to_f64(a), y = to_f64(b);
  const double* px = x.data<double>();
  const double* py = y.data<double>();
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double d = std::fabs(px[i] - py[i]) / (tol.atol + tol.rtol * std::fabs(py[i]));
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

double gradcheck(const std::function<double()>& loss, Tensor& x, const Tensor& dx, double eps, int64_t max_elems) {
  EXPECT_EQ(x.dtype(), DType::f64);
  Tensor g = to_f64(dx);
  double* px = x.data<double>();
  const double* pg = g.data<double>();
  int64_t n = x.numel();
  int64_t stride = std::max<int64_t>(1, n / std::max<int64_t>(1, max_elems));
  double worst = 0;
  for (int64_t i = 0; i < n; i += stride) {
    double saved = px[i];
    px[i] = saved + eps;
    double lp = loss();
    px[i] = saved - eps;
    double lm = loss();
    px[i] = saved;
    double num = (lp - lm) / (2 * eps);
    // The floor keeps exactly-zero gradients (e.g. the key bias under softmax
    // shift invariance) from turning rounding noise into a relative error.
    double err = std::fabs(num - pg[i]) / std::max(1e-5, std::fabs(num) + std::fabs(pg[i]));
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace lattice::test
