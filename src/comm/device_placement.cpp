#include "comm/device_placement.h"

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

std::string placed_device_key(const std::string& host, const char* cuda_visible_devices, int device) {
  return fmt::format("device {} of host {} ({})", device, host, visible_devices(cuda_visible_devices));
}

std::string shared_gpu_error(const std::vector<std::string>& keys) {
  std::map<std::string, size_t> first;  // each device's first rank
  for (size_t r = 0; r < keys.size(); ++r) {
    auto [it, fresh] = first.emplace(keys[r], r);
    if (!fresh)
      return fmt::format(
          "ranks {} and {} would share CUDA {}: Lattice runs one rank per GPU; give each rank of a host its own "
          "device (unset CUDA_VISIBLE_DEVICES to place by node-local rank, or bind one GPU per rank: Slurm "
          "--gpus-per-task=1)",
          it->second, r, keys[r]);
  }
  return "";
}

}  // namespace lattice::comm
