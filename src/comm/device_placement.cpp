#include "comm/device_placement.h"

#include <fstream>
#include <map>

#include "core/error.h"

namespace lattice::comm {

namespace {

std::string visible_devices(const char* cvd) {
  return cvd ? fmt::format("CUDA_VISIBLE_DEVICES=\"{}\"", cvd) : std::string("CUDA_VISIBLE_DEVICES unset");
}

}  // namespace

int choose_cuda_device(const DevicePlacementInput& in) {
  LATTICE_CHECK(in.local_size >= 1 && in.local_rank >= 0 && in.local_rank < in.local_size,
                "device placement: node-local rank {} is outside the {} ranks on host {}", in.local_rank, in.local_size,
                in.host);
  const int n = in.device_count;
  if (n <= 0)
    LATTICE_FAIL(
        "no CUDA device is visible on host {} ({}; {}): run on a machine with a GPU, or set "
        "runtime.device: cpu",
        in.host, in.why_none.empty() ? "0 devices" : in.why_none, visible_devices(in.cuda_visible_devices));
  if (n == 1) {
    LATTICE_CHECK(in.local_size == 1 || in.cuda_visible_devices,
                  "host {} runs {} ranks but sees 1 CUDA device ({}), so they would all share device 0: start one "
                  "rank per GPU on this node, or bind one GPU per rank (Slurm --gpus-per-task=1 sets "
                  "CUDA_VISIBLE_DEVICES)",
                  in.host, in.local_size, visible_devices(nullptr));
    return 0;
  }
  LATTICE_CHECK(in.local_size <= n,
                "host {} runs {} ranks but sees {} CUDA devices ({}): Lattice runs one rank per GPU; start at most {} "
                "ranks per node (mpirun --map-by ppr:{}:node) or make {} devices visible",
                in.host, in.local_size, n, visible_devices(in.cuda_visible_devices), n, n, in.local_size);
  return in.local_rank;
}

std::string machine_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (f && std::getline(f, id) && !id.empty()) return id;
  return host_name();
}

std::string placed_device_key(const std::string& machine, const std::string& pci_bus_id, const std::string& host,
                              int device, const char* cuda_visible_devices) {
  return fmt::format("{} {}\ndevice {} (PCI {}) of host {} ({})", machine, pci_bus_id, device, pci_bus_id, host,
                     visible_devices(cuda_visible_devices));
}

std::string shared_gpu_error(const std::vector<std::string>& keys) {
  auto part = [](const std::string& key, bool identity) {
    const size_t nl = key.find('\n');
    return identity ? key.substr(0, nl) : (nl == std::string::npos ? key : key.substr(nl + 1));
  };
  std::map<std::string, size_t> first;  // each GPU's first rank
  for (size_t r = 0; r < keys.size(); ++r) {
    auto [it, fresh] = first.emplace(part(keys[r], true), r);
    if (!fresh)
      return fmt::format(
          "ranks {} and {} would share one GPU (rank {}: {}; rank {}: {}): Lattice runs one rank per GPU; give each "
          "rank of a host its own device (unset CUDA_VISIBLE_DEVICES to place by node-local rank, or bind one GPU "
          "per rank: Slurm --gpus-per-task=1)",
          it->second, r, it->second, part(keys[it->second], false), r, part(keys[r], false));
  }
  return "";
}

}  // namespace lattice::comm
