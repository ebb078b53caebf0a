// gpu_bf16_dense_peak_flops: the names the CUDA runtime reports for each GPU
// in the table, the variants that must not fall through to a sibling's row,
// and unknown GPUs (0: the caller asks for runtime.peak_flops).
#include <gtest/gtest.h>

#include "booster/peak_flops.h"

namespace lattice {
namespace {

TEST(GpuPeakFlops, DatasheetFiguresByDeviceName) {
  struct Row {
    const char* name;
    double tflops;
  };
  for (const Row& r :
       {Row{"NVIDIA A100-SXM4-80GB", 312}, Row{"NVIDIA A100-SXM4-40GB", 312}, Row{"NVIDIA A100-PCIE-40GB", 312},
        Row{"NVIDIA A100 80GB PCIe", 312}, Row{"NVIDIA H100 80GB HBM3", 989}, Row{"NVIDIA H100 SXM5 80GB", 989},
        Row{"NVIDIA H100 PCIe", 756}, Row{"NVIDIA H100 NVL", 835.5}, Row{"NVIDIA H200", 989},
        Row{"NVIDIA H200 NVL", 835.5}, Row{"NVIDIA GH200 480GB", 989}, Row{"NVIDIA L40S", 362.05},
        Row{"NVIDIA L40", 181.05}, Row{"NVIDIA L4", 121}, Row{"NVIDIA A10", 125}, Row{"NVIDIA A30", 165}})
    EXPECT_DOUBLE_EQ(gpu_bf16_dense_peak_flops(r.name), r.tflops * 1e12) << r.name;
}

TEST(GpuPeakFlops, MatchesWholeWordsCaseInsensitively) {
  EXPECT_DOUBLE_EQ(gpu_bf16_dense_peak_flops("nvidia h100 pcie"), 756e12);
  EXPECT_DOUBLE_EQ(gpu_bf16_dense_peak_flops("  NVIDIA  A100_SXM4_80GB "), 312e12);
  // Prefixes of a known model are other GPUs.
  EXPECT_EQ(gpu_bf16_dense_peak_flops("NVIDIA A10G"), 0);
  EXPECT_EQ(gpu_bf16_dense_peak_flops("NVIDIA A100X"), 0);
}

TEST(GpuPeakFlops, UnknownGpusGiveZero) {
  for (const char* name : {"", "NVIDIA H100", "NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB", "NVIDIA B200", "cpu"})
    EXPECT_EQ(gpu_bf16_dense_peak_flops(name), 0) << name;
}

}  // namespace
}  // namespace lattice
