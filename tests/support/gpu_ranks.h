// Whether every rank of a multi-rank GPU test has a GPU of its own, asked of
// all ranks together so that they skip (or run) as one. Empty: yes; else the
// first rank's reason, which the tests print after "no CUDA device: " (the
// SKIP_REGULAR_EXPRESSION of their CTest entries). The reasons:
//   - no usable device, or the placement rules refuse this rank
//     (comm/device_placement.h: more ranks on a host than devices);
//   - two ranks of one host would use the same GPU (comm::shared_gpu_error,
//     the check lattice train makes too);
//   - `need_nccl` and liblattice_nccl.so was not built (no NCCL at configure).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "comm/communicator.h"
#include "comm/device_placement.h"
#include "comm/gather_strings.h"
#include "core/backend.h"
#include "support/test_support.h"

namespace lattice::test {

// The GPU this rank is placed on (comm::choose_cuda_device, as lattice train
// and make_nccl_communicator place it); throws lattice::Error with the reason
// when there is none for it.
inline int this_rank_gpu() {
  std::string why;
  const int count = cuda_available(&why) ? cuda_backend().device_count(&why) : 0;
  const comm::NodeLocal local = comm::node_local();
  return comm::choose_cuda_device({.local_rank = local.rank,
                                   .local_size = local.size,
                                   .device_count = count,
                                   .cuda_visible_devices = std::getenv("CUDA_VISIBLE_DEVICES"),
                                   .host = host_name(),
                                   .why_none = why});
}

inline std::string why_not_one_gpu_per_rank(comm::Group& world, bool need_nccl) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string mine, key;
  try {
    const int dev = this_rank_gpu();
    key = comm::placed_device_key(comm::machine_id(), cuda_backend().device_pci_bus_id(dev), host_name(), dev, visible);
  } catch (const Error& e) {
    mine = e.what();
  }
  if (mine.empty() && need_nccl) {
    const char* env = std::getenv("LATTICE_NCCL_LIB");
    const std::string lib =
        env ? env
            : std::filesystem::read_symlink("/proc/self/exe").parent_path().string() + "/../lib/liblattice_nccl.so";
    if (!std::filesystem::exists(lib)) mine = lib + " was not built (no NCCL found when configuring)";
  }
  for (const std::string& w : comm::all_gather_strings(world, mine))
    if (!w.empty()) return w;
  return comm::shared_gpu_error(comm::all_gather_strings(world, key));
}

}  // namespace lattice::test
