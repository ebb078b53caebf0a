// RankPlacement of a rank on its device (booster/device_groups.h): the CPU
// path (the mesh's own groups, no collective) and the one-line refusal of
// runtime.device: cuda on a host without a GPU. The node-local rank it uses
// is MpiRuntime's (test_node_local); the GPU path itself runs in
// test_cuda_training.
#include <gtest/gtest.h>

#include "booster/device_groups.h"
#include "comm/self_communicator.h"
#include "core/backend.h"

using namespace lattice;

namespace {

Config config(const std::string& device) {
  return parse_config(R"(
model: { arch: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 257, max_seq_len: 16 }
train: { steps: 1, global_batch: 2, micro_batch: 2, seq_len: 16 }
optimizer: { lr: 0.001 }
data: { train: "unused_train_*.bin", tokenizer: bytes }
runtime: { device: )" + device +
                          " }\n",
                      "placement.yaml");
}

}  // namespace

TEST(DeviceGroups, OnTheCpuTensorsUseTheMeshGroups) {
  auto mesh = mesh::ProcessGroupMesh::create(comm::self_group("world"), {1, 1, 1});
  const RankPlacement p = place_rank(config("cpu"));
  EXPECT_TRUE(p.device.is_cpu());
  DeviceGroups g(mesh, p, 10);
  EXPECT_EQ(&g.tp(), &mesh.tp());
  EXPECT_EQ(&g.pp(), &mesh.pp());
  EXPECT_EQ(&g.dp(), &mesh.dp());
  EXPECT_EQ(&g.tie(), &mesh.tie());
}

TEST(DeviceGroups, CudaWithoutAGpuIsOneLineNamingTheKey) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: test_cuda_training covers this machine";
  try {
    place_rank(config("cuda"));
    FAIL() << "runtime.device: cuda placed without a GPU";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.key_path(), "runtime.device");
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("placement.yaml:"), std::string::npos) << m;
    EXPECT_NE(m.find("no CUDA device is visible on host " + host_name()), std::string::npos) << m;
    EXPECT_NE(m.find("set runtime.device: cpu"), std::string::npos) << m;
  }
}
