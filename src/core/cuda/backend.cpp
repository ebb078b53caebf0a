// The CUDA backend's device, memory and copies, its per-device handles and
// scratch buffers, the matmul dtype, and the one exported C symbol
// lattice_cuda_backend_create that core/backend_loader.cpp looks up. The
// class, its invariants and the other translation units: backend_impl.h.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm/roll_call_hooks.h"
#include "core/cuda/backend_impl.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/lt_linear.h"
#include "core/poll.h"

namespace lattice::cuda {

int Backend::device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
    return 0;
  }
  if (why) *why = n > 0 ? fmt::format("{} CUDA device(s)", n) : std::string("no CUDA device found");
  return n;
}

std::string Backend::device_name(int dev) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return p.name;
}

std::string Backend::device_pci_bus_id(int dev) {
  char id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(id, int(sizeof(id)), dev));
  return id;
}

void* Backend::malloc(size_t bytes, int dev) {
  use(dev);
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, kStream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    LATTICE_FAIL("out of memory on cuda:{} allocating {} bytes ({} of {} bytes free): {}", dev, bytes, free_b, total_b,
                 cudaGetErrorString(e));
  }
  return p;
}

void Backend::free(void* ptr, int dev) {
  if (!ptr) return;
  use(dev);
  CUDA_CHECK(cudaFreeAsync(ptr, kStream));  // reused in stream order: no wait for the device
}

void Backend::copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index) {
    // The source's compute stream first (the copy below is ordered on the destination's only), then the copy on
    // the destination's, each wait within the host wait limit: no device-wide synchronisation, which would also
    // wait for NCCL's streams without one.
    use(src_dev.index);
    drain_compute(src_dev.index, "a copy between devices");
    CUDA_CHECK(cudaStreamSynchronize(kStream));
    use(dst_dev.index);
    CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, bytes, kStream));
    drain_compute(dst_dev.index, "a copy between devices");
    CUDA_CHECK(cudaStreamSynchronize(kStream));
    return;
  }
  cudaMemcpyKind kind = src_dev.is_cpu()   ? cudaMemcpyHostToDevice
                        : dst_dev.is_cpu() ? cudaMemcpyDeviceToHost
                                           : cudaMemcpyDeviceToDevice;
  int dev = dst_dev.is_cuda() ? dst_dev.index : src_dev.index;
  use(dev);
  // First, within the limit: a copy with pageable host memory may wait for the stream inside the call, for good.
  if (kind != cudaMemcpyDeviceToDevice)
    drain_compute(dev, kind == cudaMemcpyDeviceToHost ? "a copy to the host" : "a copy from the host");
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, kStream));
  // Host memory is the caller's again when copy returns; device to device stays in stream order.
  if (kind != cudaMemcpyDeviceToDevice) CUDA_CHECK(cudaStreamSynchronize(kStream));
}

void Backend::memset_zero(void* ptr, size_t bytes, int dev) {
  if (bytes == 0) return;
  use(dev);
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, kStream));
  CUDA_CHECK(cudaGetLastError());
}

// One cudaMemcpy2DAsync where the pitches are within the device's limit (cudaDevAttrMaxPitch: the call fails
// past it), else one copy per row; a single row, or rows that lie back to back in both, is one plain copy.
void Backend::copy_rows(int dev, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  use(dev);
  if (rows == 1 || (dpitch == width && spitch == width)) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDeviceToDevice, kStream));
    return;
  }
  int max_pitch = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, dev));
  if (max_pitch > 0 && dpitch <= size_t(max_pitch) && spitch <= size_t(max_pitch)) {
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, kStream));
    return;
  }
  for (size_t r = 0; r < rows; ++r)
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width,
                               cudaMemcpyDeviceToDevice, kStream));
}

// The compute stream's work, within the host wait limit (not NCCL's streams, which a device-wide sync would wait
// for without one).
void Backend::synchronize(int dev) {
  use(dev);
  drain_compute(dev, "synchronize");
  CUDA_CHECK(cudaStreamSynchronize(kStream));
}

void Backend::drain_compute(int dev, const char* what) {
  if (!(host_wait_timeout_s_ > 0)) return;  // the caller's blocking wait has no limit
  use(dev);                                 // kStream is the current device's
  // The compute stream may wait for a transfer with a stopped peer: answer the roll call meanwhile, and ask it when
  // the limit passes (comm/roll_call_hooks.h; on the thread that makes the MPI calls, as every backend call).
  comm::HookedWaitingIn waiting(roll_call_,
                                roll_call_ ? fmt::format("{} on cuda:{}, for the compute stream", what, dev) : "");
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t st = cudaEventRecord(e, kStream);
  if (st == cudaSuccess)
    poll_until(
        [&] {
          comm::hooked_answer(roll_call_);
          return (st = cudaEventQuery(e)) != cudaErrorNotReady;
        },
        deadline_after(host_wait_timeout_s_));
  cudaEventDestroy(e);  // released by the driver once the event completes
  if (st == cudaErrorNotReady)
    LATTICE_FAIL(
        "cuda:{}: {} waited {} s for the compute stream, which has not finished: a tp collective it waits for "
        "(comm::Work::wait_on_device) never completed, or a kernel hangs; runtime.comm_timeout_s is the limit{}",
        dev, what, host_wait_timeout_s_, comm::hooked_roll_call(roll_call_, roll_call_ranks_, host_wait_timeout_s_));
  CUDA_CHECK(st);
}

void Backend::set_matmul_dtype(DType operands) {
  LATTICE_CHECK(operands == DType::f32 || operands == DType::bf16 || operands == DType::f16,
                "CUDA matmul operands must be f32, bf16 or f16, not {}", dtype_name(operands));
  matmul_dtype_ = operands;
}

// Makes `dev` current. The first time for a device, its default memory pool
// (what cudaMallocAsync serves every tensor from) is told to keep freed
// memory: with the default release threshold of 0 it hands it back to the
// driver at every synchronisation, and the next step allocates it again.
void Backend::use(int dev) {
  CUDA_CHECK(cudaSetDevice(dev));
  static std::once_flag kept[64];
  if (dev >= 0 && dev < 64)
    std::call_once(kept[dev], [dev] {
      cudaMemPool_t pool = nullptr;
      CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
      uint64_t keep_all = UINT64_MAX;
      CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
    });
}

int64_t Backend::pool_used_peak_bytes(int dev) {
  use(dev);
  cudaMemPool_t pool = nullptr;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t high = 0;  // the attribute is a cuuint64_t
  CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high));
  return int64_t(high);
}

// Makes `dev` current and returns its cuBLAS handle, creating it on first use.
cublasHandle_t Backend::blas(int dev) {
  use(dev);
  std::lock_guard<std::mutex> lock(mu_);
  if (size_t(dev) >= handles_.size()) handles_.resize(size_t(dev) + 1, nullptr);
  if (!handles_[dev]) {
    cublasHandle_t h = nullptr;
    CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasSetStream(h, kStream));
    // Plain fp32 (no TF32) so results match the CPU path within f32 tolerance; and a 16-bit output
    // is reduced in fp32 and rounded once, never split-k partials reduced in the output type
    // (cublas_api.h: without the flag, mixed-precision routines may reduce in the output's precision).
    CUBLAS_CHECK(
        cublasSetMathMode(h, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    handles_[dev] = h;
  }
  return handles_[dev];
}

// Makes `dev` current and returns its cuBLASLt handle, creating it on first use.
cublasLtHandle_t Backend::blas_lt(int dev) {
  use(dev);
  std::lock_guard<std::mutex> lock(mu_);
  if (size_t(dev) >= lt_handles_.size()) lt_handles_.resize(size_t(dev) + 1, nullptr);
  if (!lt_handles_[dev]) CUBLAS_CHECK(cublasLtCreate(&lt_handles_[dev]));
  return lt_handles_[dev];
}

// A cuBLASLt call on `dev` with this workspace, its plans cached in lt_cache_;
// the caller holds ws_mu_ until the call has been enqueued.
LtCall Backend::lt_call(cublasLtHandle_t h, int dev, void* ws) {
  return LtCall{.handle = h, .dev = dev, .stream = kStream, .workspace = ws, .cache = &lt_cache_};
}

// The scratch buffer of `dev`, grown to at least `bytes`; never shrunk or
// freed (see backend_impl.h). The caller holds ws_mu_ and has made
// `dev` current.
void* Backend::workspace(int dev, size_t bytes) { return grown(workspaces_, dev, bytes); }

// Buffer `dev` of `per_device`, grown to at least `bytes`. The free is
// stream-ordered: the kernels already enqueued on the old buffer finish first.
void* Backend::grown(std::vector<Workspace>& per_device, int dev, size_t bytes) {
  if (size_t(dev) >= per_device.size()) per_device.resize(size_t(dev) + 1);
  Workspace& w = per_device[size_t(dev)];
  if (w.bytes < bytes) {
    free(w.ptr, dev);
    w = {malloc(bytes, dev), bytes};
  }
  return w.ptr;
}

}  // namespace lattice::cuda

extern "C" __attribute__((visibility("default"))) lattice::CudaBackend* lattice_cuda_backend_create() {
  static lattice::CudaBackend* backend = new lattice::cuda::Backend();  // never destroyed, see backend_impl.h
  return backend;
}
