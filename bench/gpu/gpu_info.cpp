// bench_gpu_info: what bench/gpu/run.sh prints about the machine, straight
// from the CUDA runtime (linked statically; it opens the driver, libcuda.so.1,
// when it needs it, so it starts where no driver is installed).
//
//   bench_gpu_info          the CUDA runtime and driver versions, then one line
//                           per visible device: name, memory, compute
//                           capability, SMs, PCI address, and its dense bf16
//                           peak from the table in booster/peak_flops.h
//   bench_gpu_info --peak   device 0's dense bf16 peak in FLOP/s, or 0 when
//                           the table does not know it (for scripts)
//   bench_gpu_info --count  the number of visible devices
//
// Without a usable device it prints "no CUDA device: <the runtime's reason>"
// on stderr and exits with kNoDevice (77), for every form above; it never
// prints a device line it did not read from the runtime.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "booster/peak_flops.h"

namespace {

constexpr int kNoDevice = 77;

// "12.4" from CUDA's 1000 * major + 10 * minor encoding.
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

void print_versions() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t d = cudaDriverGetVersion(&driver);
  std::printf("cuda runtime: %s (cudaRuntimeGetVersion %d)\n", cuda_version(runtime).c_str(), runtime);
  if (d != cudaSuccess || driver == 0)
    std::printf("cuda driver: none installed (cudaDriverGetVersion %d)\n", driver);
  else
    std::printf("cuda driver: supports CUDA %s (cudaDriverGetVersion %d)\n", cuda_version(driver).c_str(), driver);
}

void print_device(int dev) {
  cudaDeviceProp p{};
  const cudaError_t e = cudaGetDeviceProperties(&p, dev);
  if (e != cudaSuccess) {
    std::printf("device %d: cudaGetDeviceProperties failed: %s\n", dev, cudaGetErrorString(e));
    return;
  }
  const double peak = lattice::gpu_bf16_dense_peak_flops(p.name);
  char peak_text[64] = "bf16 dense peak: not in the table";
  if (peak > 0) std::snprintf(peak_text, sizeof(peak_text), "bf16 dense peak %g TFLOP/s", peak / 1e12);
  std::printf("device %d: %s | %.1f GiB | compute capability %d.%d | %d SMs | PCI %04x:%02x:%02x.0 | %s\n", dev, p.name,
              double(p.totalGlobalMem) / double(1 << 30), p.major, p.minor, p.multiProcessorCount, p.pciDomainID,
              p.pciBusID, p.pciDeviceID, peak_text);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc > 2 || (!mode.empty() && mode != "--peak" && mode != "--count")) {
    std::fprintf(stderr, "usage: bench_gpu_info [--peak | --count]\n");
    return 2;
  }
  if (mode.empty()) print_versions();
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    const std::string why = e != cudaSuccess ? std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")"
                                             : "cudaGetDeviceCount reports 0 devices";
    std::fflush(stdout);
    std::fprintf(stderr, "no CUDA device: %s\n", why.c_str());
    return kNoDevice;
  }
  if (mode == "--count") {
    std::printf("%d\n", count);
  } else if (mode == "--peak") {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return 1;
    std::printf("%.6g\n", lattice::gpu_bf16_dense_peak_flops(p.name));
  } else {
    for (int dev = 0; dev < count; ++dev) print_device(dev);
  }
  return 0;
}
