#include "booster/device_groups.h"

#include <cstdlib>

#include "comm/device_placement.h"
#include "comm/nccl_communicator.h"
#include "comm/roll_call.h"
#include "comm/self_communicator.h"
#include "core/backend.h"

namespace lattice {

DeviceComm device_comm_for(Device device, int group_size) {
  LATTICE_CHECK(group_size >= 1, "device_comm_for: a group of {} ranks", group_size);
  if (device.is_cpu()) return DeviceComm::mesh;
  return group_size == 1 ? DeviceComm::self : DeviceComm::nccl;
}

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
  const comm::NodeLocal& local = placement.local;
  auto over = [&](comm::Group& g) {
    switch (device_comm_for(device_, g.size())) {
      case DeviceComm::mesh:
        return comm::Group();
      case DeviceComm::self:
        return comm::Group(comm::make_self_communicator(g.name(), g.world_ranks().front()));
      case DeviceComm::nccl:
        // tp collectives are waited for on the device (Work::wait_on_device): one that never completes must end
        // the job at the host's next wait for the compute stream, as a host-waited one does, with the roll call's
        // report of the job (comm/roll_call.h).
        cuda_backend().set_host_wait_timeout(timeout_s);
        cuda_backend().set_roll_call(&comm::roll_call_hooks(), mesh.world().world_ranks());
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
