// Where this rank's tensors live, and the groups that move them.
//
// runtime.device: cpu — every tensor is in host memory and travels through
// the mesh's own groups (MPI). runtime.device: cuda — the rank drives one GPU
// (comm::choose_cuda_device: one rank per GPU from the node-local rank, or
// device 0 when CUDA_VISIBLE_DEVICES exposes one), the parameters,
// activations and gradients live on it, and each mesh group the device
// tensors cross (tp, pp, dp, tie) gets a device communicator over the same
// ranks (device_comm_for): an NCCL communicator, bootstrapped over that
// group's MPI communicator, when the group has several ranks; the self
// communicator (comm/self_communicator.h: copies on the compute stream, no
// NCCL) when it has one, as every group of verify-layout's one-rank
// reference mesh has. Host scalars (loss sums, token counts, norms) keep
// using the mesh's MPI groups either way.
//
// The node-local rank is MpiRuntime's (comm::node_local()), so the device
// choice itself (comm::choose_cuda_device) is a pure function tested on the
// CPU. A cuda config on a host without a usable GPU fails with one
// ConfigError line naming runtime.device, the host, the reason and the fix.
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "config/config.h"
#include "mesh/process_group_mesh.h"

namespace lattice {

// Where a rank runs: its device, and its place on its node, from which the
// NCCL communicators choose the same device.
struct RankPlacement {
  Device device = Device::cpu();
  comm::NodeLocal local{};
};

// Which communicator moves a rank's tensors over one of its mesh groups.
enum class DeviceComm {
  mesh,  // host tensors: the mesh's own group
  self,  // device tensors, a group of one rank: comm::make_self_communicator
  nccl,  // device tensors, a group of several ranks: comm::make_nccl_communicator
};
DeviceComm device_comm_for(Device device, int group_size);

// The device runtime.device asks for, placed for this rank (no collective).
// Throws ConfigError (one line) when cuda is asked for and this rank has no
// device.
RankPlacement place_rank(const Config& cfg);

class DeviceGroups {
 public:
  // Collective over the mesh (on cuda every rank builds its NCCL groups in the
  // same order; a group of one needs no peer). The placement may come from
  // another mesh (verify-layout's one-rank reference runs on the job's
  // placement).
  DeviceGroups(mesh::ProcessGroupMesh& mesh, const RankPlacement& placement, double timeout_s);

  Device device() const { return device_; }
  comm::Group& tp() { return pick(tp_, mesh_.tp()); }
  comm::Group& pp() { return pick(pp_, mesh_.pp()); }
  comm::Group& dp() { return pick(dp_, mesh_.dp()); }
  comm::Group& tie() { return pick(tie_, mesh_.tie()); }

 private:
  static comm::Group& pick(comm::Group& own, comm::Group& mesh_group) { return own.valid() ? own : mesh_group; }

  mesh::ProcessGroupMesh& mesh_;
  Device device_;
  comm::Group tp_, pp_, dp_, tie_;  // device_comm_for's over the mesh's groups on cuda; invalid (the mesh's) on cpu
};

}  // namespace lattice
