// Device memory with byte accounting.
//
// Every Tensor storage comes from here, so the live and peak bytes of each
// device are exact. CPU memory is 64-byte aligned; CUDA memory comes from the
// CUDA backend (core/backend.h). Counters are per process (one rank).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace lattice {

struct MemoryStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t total_allocs = 0;
};

void* device_alloc(Device device, size_t bytes);
void device_free(Device device, void* ptr, size_t bytes);

MemoryStats memory_stats(Device device);
// Sets the peak to the current live bytes (start of a measured region).
void reset_peak_memory(Device device);

}  // namespace lattice
