// The LM head of one step past 2^31 elements on the GPU: bf16 logits of
// N 65536 rows by V 32800 columns (2.15e9 elements, 4.3 GB), as GPT-2 124M
// at B 64, T 1024 with a 32k vocabulary makes them. The linear forward, the
// fused cross-entropy forward, its backward in place, and the linear backward
// (dinp and dweight) through lattice::ops under bf16 matmuls, each checked on
// sampled rows and columns (the first, the one that straddles element 2^31,
// the last) against a double-precision reference from the same bf16 values:
// an index or a leading dimension that wraps at 2^31 gives values of other
// rows there. Every int handed to cuBLAS(Lt) fits (the desk-check of
// docs/gpu.md); this runs it. Needs about 4.4 GB of device memory and, for
// dweight, a 4.3 GB host copy of dlogits; a device without the memory skips
// and says so. Without a GPU every case skips and says why.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "support/act16.h"
#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

constexpr int64_t kN = 65536, kV = 32800, kC = 64;
constexpr float kDloss = 1.0f / float(kN);
// Rows to check: the first two, the middle, the row holding element 2^31, the last.
const int64_t kRows[] = {0, 1, kN / 2, (int64_t(1) << 31) / kV, kN - 1};
const int64_t kCols[] = {0, 1, kV / 2, kV - 1};
static_assert(kN * kV > (int64_t(1) << 31), "the logits must go past 2^31 elements");

// Value at flat index i of a bf16 tensor on the host.
double at(const Tensor& t, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(t.raw())[i]); }
// Row r (V values) of a bf16 (N, V) tensor on the device, as doubles.
std::vector<double> row_of(const Tensor& dev, int64_t r) {
  const Tensor h = dev.view(r * kV, {kV}).to(Device::cpu());
  std::vector<double> out(static_cast<size_t>(kV));
  for (int64_t v = 0; v < kV; ++v) out[size_t(v)] = at(h, v);
  return out;
}

// One bf16 rounding of the result (half an ulp, 2^-9 relative) plus fp32
// accumulation over `terms` products of total magnitude `mag`.
double bound(double ref, double mag, int64_t terms) {
  return std::ldexp(std::abs(ref), -8) + double(terms) * 6e-8 * mag + 1e-30;
}

using CudaLargeHead = CudaBf16Matmuls;

TEST_F(CudaLargeHead, LmHeadPast2To31ElementsMatchesTheReferenceOnSampledRows) {
  const Tensor x = act16({kN, kC}, DType::bf16, 71), w = act16({kV, kC}, DType::bf16, 72, 0.5);
  std::vector<int32_t> t(static_cast<size_t>(kN));
  for (int64_t n = 0; n < kN; ++n) t[size_t(n)] = int32_t((n * 7919) % kV);
  t[size_t(kN - 1)] = int32_t(kV - 1);  // the very last logit is a target
  const Tensor targets = Tensor::from<int32_t>(t, {kN});
  Tensor logits;
  try {
    logits = Tensor::empty({kN, kV}, DType::bf16, Device::cuda(0));
  } catch (const Error& e) {
    GTEST_SKIP() << "the device has no room for 4.3 GB of bf16 logits: " << e.message();
  }
  const Tensor x_g = gpu(x), w_g = gpu(w), targets_g = gpu(targets);
  ops::linear_forward(logits, x_g, w_g, nullptr);
  std::vector<std::vector<double>> rows;
  for (int64_t r : kRows) {
    rows.push_back(row_of(logits, r));
    for (int64_t v : kCols) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < kC; ++c) {
        ref += at(x, r * kC + c) * at(w, v * kC + c);
        mag += std::abs(at(x, r * kC + c) * at(w, v * kC + c));
      }
      EXPECT_NEAR(rows.back()[size_t(v)], ref, bound(ref, mag, kC)) << "logit (" << r << ", " << v << ")";
    }
  }

  Tensor losses = empty_gpu({kN}), lse = empty_gpu({kN});
  ops::cross_entropy_forward(losses, lse, logits, targets_g, -1);
  const Tensor losses_h = host(losses), lse_h = host(lse);
  for (size_t i = 0; i < std::size(kRows); ++i) {
    const int64_t r = kRows[i];
    double mx = -INFINITY, sum = 0;
    for (double l : rows[i]) mx = std::max(mx, l);
    for (double l : rows[i]) sum += std::exp(l - mx);
    const double want_lse = mx + std::log(sum);
    EXPECT_NEAR(lse_h.data<float>()[r], want_lse, 1e-5 * std::abs(want_lse) + 1e-5) << "row " << r;
    EXPECT_NEAR(losses_h.data<float>()[r], want_lse - rows[i][size_t(t[size_t(r)])], 1e-5 * std::abs(want_lse) + 1e-5)
        << "row " << r;
  }

  ops::cross_entropy_backward(logits, logits, lse, targets_g, kDloss, -1);  // in place: logits hold dlogits now
  std::vector<std::vector<double>> drows;
  for (size_t i = 0; i < std::size(kRows); ++i) {
    const int64_t r = kRows[i];
    drows.push_back(row_of(logits, r));
    for (int64_t v = 0; v < kV; v += 997) {
      const double p = std::exp(rows[i][size_t(v)] - double(lse_h.data<float>()[r]));
      const double want = (p - (v == t[size_t(r)] ? 1.0 : 0.0)) * kDloss;
      EXPECT_NEAR(drows.back()[size_t(v)], want, bound(want, p * kDloss, 1)) << "dlogit (" << r << ", " << v << ")";
    }
    const int64_t v = t[size_t(r)];
    const double want = (std::exp(rows[i][size_t(v)] - double(lse_h.data<float>()[r])) - 1.0) * kDloss;
    EXPECT_NEAR(drows.back()[size_t(v)], want, bound(want, kDloss, 1)) << "target dlogit of row " << r;
  }

  Tensor dx = Tensor::empty({kN, kC}, DType::bf16, Device::cuda(0));
  Tensor dw = Tensor::zeros({kV, kC}, DType::f32, Device::cuda(0));
  ops::linear_backward(&dx, &dw, nullptr, logits, x_g, w_g);
  const Tensor dx_h = host(dx), dw_h = host(dw);
  for (size_t i = 0; i < std::size(kRows); ++i)
    for (int64_t c : {int64_t(0), kC - 1}) {
      double ref = 0, mag = 0;
      for (int64_t v = 0; v < kV; ++v) {
        ref += drows[i][size_t(v)] * at(w, v * kC + c);
        mag += std::abs(drows[i][size_t(v)] * at(w, v * kC + c));
      }
      EXPECT_NEAR(at(dx_h, kRows[i] * kC + c), ref, bound(ref, mag, kV)) << "dinp (" << kRows[i] << ", " << c << ")";
    }
  const Tensor d = host(logits);  // 4.3 GB: dweight's columns need every row
  for (int64_t v : kCols)
    for (int64_t c : {int64_t(0), kC - 1}) {
      double ref = 0, mag = 0;
      for (int64_t n = 0; n < kN; ++n) {
        ref += at(d, n * kV + v) * at(x, n * kC + c);
        mag += std::abs(at(d, n * kV + v) * at(x, n * kC + c));
      }
      EXPECT_NEAR(dw_h.data<float>()[v * kC + c], ref, 1e-5 * std::abs(ref) + double(kN) * 6e-8 * mag + 1e-30)
          << "dweight (" << v << ", " << c << ")";
    }
}

}  // namespace
}  // namespace lattice::test
