#include "core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/backend.h"
#include "core/error.h"

namespace lattice {

namespace {

constexpr int kMaxCudaDevices = 16;

struct Counters {
  std::atomic<int64_t> live{0}, peak{0}, allocs{0};
  void add(int64_t bytes) {
    int64_t now = live.fetch_add(bytes) + bytes;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    allocs.fetch_add(1);
  }
};

Counters& counters(Device d) {
  static Counters cpu;
  static Counters cuda[kMaxCudaDevices];
  if (d.is_cpu()) return cpu;
  LATTICE_CHECK(d.index >= 0 && d.index < kMaxCudaDevices, "cuda device index {} out of range", d.index);
  return cuda[d.index];
}

}  // namespace

void* device_alloc(Device device, size_t bytes) {
  if (bytes == 0) bytes = 1;
  void* p = nullptr;
  if (device.is_cpu()) {
    size_t rounded = (bytes + 63) / 64 * 64;
    p = std::aligned_alloc(64, rounded);
    LATTICE_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
  } else {
    p = cuda_backend().malloc(bytes, device.index);
  }
  counters(device).add(int64_t(bytes));
  return p;
}

void device_free(Device device, void* ptr, size_t bytes) {
  if (!ptr) return;
  if (bytes == 0) bytes = 1;
  if (device.is_cpu()) {
    std::free(ptr);
  } else {
    cuda_backend().free(ptr, device.index);
  }
  counters(device).live.fetch_sub(int64_t(bytes));
}

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return MemoryStats{c.live.load(), c.peak.load(), c.allocs.load()};
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.live.load());
}

}  // namespace lattice
