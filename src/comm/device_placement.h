// Device placement: which CUDA device a rank drives. Pure arithmetic on facts
// the caller gathers (the node-local rank and size from MpiRuntime, the device
// count and its reason from the CUDA runtime, $CUDA_VISIBLE_DEVICES, the host
// name), so every rule is tested on a machine without a GPU.
//
// Lattice runs one rank per GPU. The rules, in order:
//   - no visible device: error (no CUDA device is visible on the host, why,
//     and the fix: runtime.device: cpu);
//   - one visible device: device 0, the launcher's binding of one GPU per
//     rank (Slurm --gpus-per-task=1, or a CUDA_VISIBLE_DEVICES per rank); but
//     when CUDA_VISIBLE_DEVICES is unset and the node runs several ranks,
//     they would all share that device, which NCCL refuses: error;
//   - otherwise device = local_rank when local_size <= device_count, else
//     error (more ranks on the node than devices).
// Every error is one lattice::Error line naming the host, the counts and the
// fix. The chosen device is what NcclCommunicator sets (comm/nccl/) and what
// the rank map prints.
#pragma once

#include <string>
#include <vector>

namespace lattice::comm {

struct DevicePlacementInput {
  int local_rank = 0;                          // this rank among the ranks on its node
  int local_size = 1;                          // ranks on this node
  int device_count = 0;                        // CUDA devices this process sees (cudaGetDeviceCount)
  const char* cuda_visible_devices = nullptr;  // getenv("CUDA_VISIBLE_DEVICES"): null when unset
  std::string host;                            // for the messages
  std::string why_none;                        // why device_count is 0 (CudaBackend::device_count's `why`)
};

// The device index (0-based, among the visible devices) this rank uses.
// Throws lattice::Error (one line) when the rules above give none.
int choose_cuda_device(const DevicePlacementInput& in);

// The rules above see one rank at a time, so a launcher that exports the
// same single CUDA_VISIBLE_DEVICES to every rank of a host passes them (one
// visible device is device 0) and the ranks share a GPU, which NCCL does not
// support. The job checks every rank's placed device together, by physical
// identity: the machine (machine_id: the kernel's boot id, which containers
// on one machine share; the host name where it cannot be read) and the
// device's PCI address. So ranks that each see their own GPU as device 0
// (Slurm with ConstrainDevices, one container per GPU) are no error.
// placed_device_key is one rank's identity plus a description for the
// message; shared_gpu_error, given every rank's key in rank order, is "" or
// one line naming the first two ranks that share a GPU and the fix.
std::string machine_id();
std::string placed_device_key(const std::string& machine, const std::string& pci_bus_id, const std::string& host,
                              int device, const char* cuda_visible_devices);
std::string shared_gpu_error(const std::vector<std::string>& keys);

}  // namespace lattice::comm
