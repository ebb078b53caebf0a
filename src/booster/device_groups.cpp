#include "booster/device_groups.h"

#include <cstdlib>

#include "comm/device_placement.h"
#include "comm/nccl_communicator.h"
#include "core/backend.h"

namespace lattice {

RankPlacement place_rank(const Config& cfg) {
  if (cfg.runtime.device == DeviceType::cpu) return {};
  const comm::NodeLocal local = comm::node_local();
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
  if (device_.is_cpu()) return;
  const comm::NodeLocal& local = placement.local;
  auto nccl_over = [&](comm::Group& g) {
    return comm::Group(comm::make_nccl_communicator(g.comm(), local.rank, local.size, timeout_s));
  };
  tp_ = nccl_over(mesh.tp());
  pp_ = nccl_over(mesh.pp());
  dp_ = nccl_over(mesh.dp());
  tie_ = nccl_over(mesh.tie());
}

}  // namespace lattice
