// choose_cuda_device: every placement rule against a table of node shapes,
// and the one-line errors (host, counts, CUDA_VISIBLE_DEVICES, fix) for the
// three ways a rank can have no device of its own. No GPU is needed: the
// facts the CUDA runtime would report are inputs.
#include <gtest/gtest.h>

#include "comm/device_placement.h"
#include "support/error_text.h"

namespace lattice::comm {
namespace {

DevicePlacementInput node(int local_rank, int local_size, int devices, const char* cvd = nullptr) {
  return {.local_rank = local_rank,
          .local_size = local_size,
          .device_count = devices,
          .cuda_visible_devices = cvd,
          .host = "gpu7",
          .why_none = ""};
}

TEST(DevicePlacement, OneRankPerGpuUsesTheLocalRank) {
  for (int devices : {2, 4, 8})
    for (int local_size = 1; local_size <= devices; ++local_size)
      for (int r = 0; r < local_size; ++r) {
        EXPECT_EQ(choose_cuda_device(node(r, local_size, devices)), r) << r << "/" << local_size << " on " << devices;
        EXPECT_EQ(choose_cuda_device(node(r, local_size, devices, "0,1,2,3,4,5,6,7")), r);
      }
}

TEST(DevicePlacement, OneVisibleDeviceIsDeviceZero) {
  // The launcher bound one GPU per rank: every rank of the node sees its own as device 0.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(choose_cuda_device(node(r, 4, 1, "3")), 0) << r;
  EXPECT_EQ(choose_cuda_device(node(3, 4, 1, "GPU-8f1c2e4a")), 0);  // UUIDs count as a binding too
  // A single rank on a one-GPU machine needs no binding.
  EXPECT_EQ(choose_cuda_device(node(0, 1, 1)), 0);
}

TEST(DevicePlacement, RanksWouldShareTheOnlyDeviceWithoutABinding) {
  const std::string m = test::error_text([] { choose_cuda_device(node(1, 2, 1)); });
  EXPECT_HAS(m, "host gpu7 runs 2 ranks but sees 1 CUDA device (CUDA_VISIBLE_DEVICES unset)");
  EXPECT_HAS(m, "share device 0");
  EXPECT_HAS(m, "--gpus-per-task=1");
}

TEST(DevicePlacement, MoreRanksThanDevicesNamesCountsAndFix) {
  const std::string m = test::error_text([] { choose_cuda_device(node(0, 8, 4, "0,1,2,3")); });
  EXPECT_HAS(m, "host gpu7 runs 8 ranks but sees 4 CUDA devices (CUDA_VISIBLE_DEVICES=\"0,1,2,3\")");
  EXPECT_HAS(m, "start at most 4 ranks per node (mpirun --map-by ppr:4:node) or make 8 devices visible");
  // Every rank of such a node refuses, not only those past the last device.
  for (int r = 0; r < 3; ++r) EXPECT_HAS(test::error_text([r] { choose_cuda_device(node(r, 3, 2)); }), "runs 3 ranks");
}

TEST(DevicePlacement, NoDeviceSaysWhyAndSuggestsCpu) {
  DevicePlacementInput in = node(0, 2, 0);
  in.why_none = "cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA runtime version";
  std::string m = test::error_text([&] { choose_cuda_device(in); });
  EXPECT_HAS(m,
             "no CUDA device is visible on host gpu7 (cudaGetDeviceCount failed: CUDA driver version is "
             "insufficient for CUDA runtime version; CUDA_VISIBLE_DEVICES unset)");
  EXPECT_HAS(m, "runtime.device: cpu");
  // An empty CUDA_VISIBLE_DEVICES hides every device: the message shows it; no reason given reads "0 devices".
  m = test::error_text([] { choose_cuda_device(node(0, 1, 0, "")); });
  EXPECT_HAS(m, "(0 devices; CUDA_VISIBLE_DEVICES=\"\")");
}

TEST(DevicePlacement, LocalRankOutsideTheNodeIsRefused) {
  EXPECT_HAS(test::error_text([] { choose_cuda_device(node(2, 2, 4)); }), "node-local rank 2 is outside the 2 ranks");
  EXPECT_HAS(test::error_text([] { choose_cuda_device(node(-1, 2, 4)); }), "node-local rank -1");
}

// A launcher exporting the same single id to every rank of a host passes
// choose_cuda_device on each rank; the job-wide check names the shared GPU
// by its PCI address on one machine, however each rank numbers it.
TEST(DevicePlacement, RanksSharingAGpuAreOneErrorNamingBoth) {
  const std::vector<std::string> keys = {placed_device_key("m1", "0000:3B:00.0", "a", 0, "0"),
                                         placed_device_key("m1", "0000:3B:00.0", "a", 0, "0"),
                                         placed_device_key("m2", "0000:3B:00.0", "b", 0, "0")};
  const std::string e = shared_gpu_error(keys);
  EXPECT_HAS(e, "ranks 0 and 1 would share one GPU");
  EXPECT_HAS(e, "rank 1: device 0 (PCI 0000:3B:00.0) of host a (CUDA_VISIBLE_DEVICES=\"0\")");
  EXPECT_HAS(e, "--gpus-per-task=1");
  // The same GPU under two numberings (one rank sees it as device 1 of all, the other as device 0 of "1").
  EXPECT_HAS(shared_gpu_error({placed_device_key("m1", "0000:5E:00.0", "a", 1, nullptr),
                               placed_device_key("m1", "0000:5E:00.0", "a", 0, "1")}),
             "ranks 0 and 1 would share one GPU");
}

// Each rank of a host seeing its own GPU as device 0 (Slurm's
// ConstrainDevices, one container per GPU) is one GPU per rank; so are equal
// addresses on different machines.
TEST(DevicePlacement, DistinctGpusAreNoErrorHoweverNumbered) {
  EXPECT_EQ(shared_gpu_error({placed_device_key("m1", "0000:3B:00.0", "a", 0, "0"),
                              placed_device_key("m1", "0000:5E:00.0", "a", 0, "0"),
                              placed_device_key("m2", "0000:3B:00.0", "b", 0, "0")}),
            "");
  EXPECT_EQ(shared_gpu_error({}), "");
  EXPECT_FALSE(machine_id().empty());
}

}  // namespace
}  // namespace lattice::comm
