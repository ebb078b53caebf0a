// RankPlacement of a rank on its device (booster/device_groups.h): the CPU
// path (the mesh's own groups, no collective), which communicator a group
// gets on each device and size, the groups of a one-rank mesh on cuda (self
// communicators, so no NCCL and no device is touched: verify-layout's
// reference), and the one-line refusal of runtime.device: cuda on a host
// without a GPU. The node-local rank it uses is MpiRuntime's
// (test_node_local); the GPU path itself runs in
// test_cuda_training.
#include <gtest/gtest.h>

#include <utility>

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

TEST(DeviceGroups, AGroupOfOneOnADeviceNeedsNoNccl) {
  EXPECT_EQ(device_comm_for(Device::cpu(), 1), DeviceComm::mesh);
  EXPECT_EQ(device_comm_for(Device::cpu(), 4), DeviceComm::mesh);
  EXPECT_EQ(device_comm_for(Device::cuda(0), 1), DeviceComm::self);
  EXPECT_EQ(device_comm_for(Device::cuda(3), 1), DeviceComm::self);
  EXPECT_EQ(device_comm_for(Device::cuda(0), 2), DeviceComm::nccl);
  EXPECT_EQ(device_comm_for(Device::cuda(1), 8), DeviceComm::nccl);
  EXPECT_THROW(device_comm_for(Device::cuda(0), 0), Error);
}

// verify-layout's one-rank reference on cuda: every group of a mesh over a
// self communicator has one rank, so each gets a self communicator of its
// own, named and numbered like the mesh's group (no NCCL: none could be
// bootstrapped over a self communicator). Building them touches no device,
// so this runs on any host.
TEST(DeviceGroups, AOneRankMeshOnCudaGetsSelfCommunicators) {
  auto mesh = mesh::ProcessGroupMesh::create(comm::Group(comm::make_self_communicator("world", 5)), {1, 1, 1});
  DeviceGroups g(mesh, RankPlacement{.device = Device::cuda(0)}, 10);
  EXPECT_TRUE(g.device().is_cuda());
  for (auto [mine, theirs] : {std::pair{&g.tp(), &mesh.tp()}, std::pair{&g.pp(), &mesh.pp()},
                              std::pair{&g.dp(), &mesh.dp()}, std::pair{&g.tie(), &mesh.tie()}}) {
    SCOPED_TRACE(theirs->name());
    EXPECT_NE(mine, theirs) << "device tensors would travel through the mesh's own group";
    EXPECT_EQ(mine->size(), 1);
    EXPECT_EQ(mine->name(), theirs->name());
    EXPECT_EQ(mine->world_ranks(), theirs->world_ranks());
    EXPECT_FALSE(mine->comm().progresses_in_calls());
  }
  EXPECT_EQ(g.tp().world_ranks(), std::vector<int>{5});
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
