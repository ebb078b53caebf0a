// The peak FLOP rate that `mfu` is measured against.
// On the CPU, runtime.peak_flops = 0 means: measure the sgemm rate of this
// rank's thread pool at start-up (best of a few 1024^3 products, ~0.2 s).
// On a GPU the denominator is the GPU's dense bf16 tensor-core peak, whatever
// runtime.precision is, so fp32 and bf16 runs share one denominator:
// gpu_bf16_dense_peak_flops, keyed by the name the CUDA runtime reports
// (cudaDeviceProp::name, CudaBackend::device_name). `lattice train` looks it
// up when runtime.peak_flops is 0 on cuda (a GPU the table does not know is a
// one-line error asking for runtime.peak_flops); bench/gpu passes it itself.
#pragma once

#include <string_view>

namespace lattice {

double measure_sgemm_flops();  // FLOP/s, current thread count

// Dense (not 2:4 sparse) bf16 tensor-core peak of one GPU, in FLOP/s, from
// NVIDIA's datasheets; 0 when the table does not know the GPU (set
// runtime.peak_flops). Matches the model as a whole word of the name,
// case-insensitively, so "NVIDIA A10G" is not an A10 nor "NVIDIA A100" an A10,
// and the variant as the start of a word ("H100" + "PCIe", "H100 SXM5").
double gpu_bf16_dense_peak_flops(std::string_view device_name);

}  // namespace lattice
