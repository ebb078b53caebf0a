#include "booster/device_groups.h"

#include <cstdlib>

#include "comm/device_placement.h"
#include "comm/gather_strings.h"
#include "comm/nccl_communicator.h"
#include "comm/self_communicator.h"
#include "core/backend.h"

namespace lattice {

NodeLocal node_local_rank(const std::vector<std::string>& hosts, int world_rank) {
  LATTICE_CHECK(world_rank >= 0 && size_t(world_rank) < hosts.size(), "node_local_rank: rank {} of {}", world_rank,
                hosts.size());
  NodeLocal n{0, 0};
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r] != hosts[size_t(world_rank)]) continue;
    if (r < size_t(world_rank)) ++n.rank;
    ++n.size;
  }
  return n;
}

DeviceComm device_comm_for(Device device, int group_size) {
  LATTICE_CHECK(group_size >= 1, "device_comm_for: a group of {} ranks", group_size);
  if (device.is_cpu()) return DeviceComm::mesh;
  return group_size == 1 ? DeviceComm::self : DeviceComm::nccl;
}

RankPlacement place_rank(const Config& cfg, mesh::ProcessGroupMesh& mesh) {
  if (cfg.runtime.device == DeviceType::cpu) return {};
  const std::vector<std::string> hosts = comm::all_gather_strings(mesh.world(), host_name());
  const NodeLocal local = node_local_rank(hosts, mesh.world().rank());
  std::string why;
  const int count = cuda_available(&why) ? cuda_backend().device_count(&why) : 0;
  const comm::DevicePlacementInput in{.local_rank = local.rank,
                                      .local_size = local.size,
                                      .device_count = count,
                                      .cuda_visible_devices = std::getenv("CUDA_VISIBLE_DEVICES"),
                                      .host = host_name(),
                                      .why_none = why};
  try {
    return {Device::cuda(comm::choose_cuda_device(in)), local};
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    config_fail(cfg, "runtime.device", e.what());
  }
}

DeviceGroups::DeviceGroups(mesh::ProcessGroupMesh& mesh, const RankPlacement& placement, double timeout_s)
    : mesh_(mesh), device_(placement.device) {
  const NodeLocal& local = placement.local;
  auto over = [&](comm::Group& g) {
    switch (device_comm_for(device_, g.size())) {
      case DeviceComm::mesh:
        return comm::Group();
      case DeviceComm::self:
        return comm::Group(comm::make_self_communicator(g.name(), g.world_ranks().front()));
      case DeviceComm::nccl:
        return comm::Group(comm::make_nccl_communicator(g.comm(), local.rank, local.size, timeout_s));
    }
    LATTICE_FAIL("DeviceGroups: unknown DeviceComm");
  };
  tp_ = over(mesh.tp());
  pp_ = over(mesh.pp());
  dp_ = over(mesh.dp());
  tie_ = over(mesh.tie());
}

}  // namespace lattice
