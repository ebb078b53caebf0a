#include "booster/peak_flops.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

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

namespace {

// One row of the table: the GPU's model word in the device name, an optional
// start of another word that names the variant ("SXM" for SXM4 and SXM5;
// "" = any), and the datasheet figure.
struct GpuPeak {
  std::string_view model, variant;
  double tflops;  // dense bf16 tensor core, TFLOP/s
};

// Dense BF16 Tensor Core peaks from NVIDIA's datasheets (and the H100
// whitepaper), in TFLOP/s, with the 2:4 sparse figure they print beside it in
// parentheses; where only the sparse figure is printed (NVL), the dense peak
// is half of it. First match wins, so a variant row sits above the model's
// generic row.
constexpr GpuPeak kBf16DensePeaks[] = {
    {"A100", "", 312},       // A100 SXM4 and PCIe, 40 and 80 GB: 312 (624)
    {"A30", "", 165},        // 165 (330)
    {"A10", "", 125},        // 125 (250)
    {"L4", "", 121},         // 121 (242)
    {"L40S", "", 362.05},    // 362.05 (733)
    {"L40", "", 181.05},     // 181.05 (362.1)
    {"H100", "PCIE", 756},   // H100 PCIe: 756 (1513)
    {"H100", "NVL", 835.5},  // H100 NVL: half of (1671)
    {"H100", "HBM3", 989},   // H100 SXM5 names itself "NVIDIA H100 80GB HBM3": 989 (1979)
    {"H100", "SXM", 989},    // the same GPU under its product name
    {"H200", "NVL", 835.5},  // H200 NVL: half of (1671)
    {"H200", "", 989},       // H200 SXM: 989 (1979)
    {"GH200", "", 989},      // the Hopper GPU of GH200: as H100 SXM
};

// The words of a device name, upper-cased: "NVIDIA A100-SXM4-80GB" -> NVIDIA A100 SXM4 80GB.
std::vector<std::string> name_words(std::string_view name) {
  std::vector<std::string> words(1);
  for (char ch : name) {
    if (ch == ' ' || ch == '-' || ch == '_') {
      if (!words.back().empty()) words.emplace_back();
    } else {
      words.back() += char(std::toupper(static_cast<unsigned char>(ch)));
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

double gpu_bf16_dense_peak_flops(std::string_view device_name) {
  const std::vector<std::string> words = name_words(device_name);
  auto has = [&](std::string_view w) { return std::find(words.begin(), words.end(), w) != words.end(); };
  auto has_start = [&](std::string_view v) {
    return std::any_of(words.begin(), words.end(), [&](const std::string& w) { return w.starts_with(v); });
  };
  for (const GpuPeak& g : kBf16DensePeaks)
    if (has(g.model) && has_start(g.variant)) return g.tflops * 1e12;
  return 0;
}

}  // namespace lattice
