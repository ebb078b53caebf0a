// Loads liblattice_cuda.so on first use (see core/backend.h).
#include <dlfcn.h>

#include <string>

#include "core/backend.h"
#include "core/error.h"
#include "core/plugin_library.h"

namespace lattice {

namespace {

struct Loaded {
  CudaBackend* backend = nullptr;
  std::string error;
};

Loaded load() {
  using Create = CudaBackend* (*)();
  LoadedSymbol l = load_library_symbol("liblattice_cuda.so", "LATTICE_CUDA_LIB", "lattice_cuda_backend_create");
  if (l.symbol) return {reinterpret_cast<Create>(l.symbol)(), ""};
  return {nullptr, fmt::format("the CUDA backend library could not be loaded ({}); build with LATTICE_CUDA=ON on a "
                               "machine with the CUDA toolkit, or use runtime.device: cpu",
                               l.errors)};
}

// Without the NVIDIA driver library no device can exist. Looking for it first
// answers "no GPU" in milliseconds instead of loading the backend and its CUDA
// libraries (cuBLASLt alone is half a gigabyte) only to learn the same.
bool driver_present(std::string* why) {
  static const std::string error = [] {
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) return std::string();  // kept open: cudart loads it too
    const char* e = dlerror();
    return fmt::format("no NVIDIA driver on this host: {}", e ? e : "libcuda.so.1 cannot be loaded");
  }();
  if (why) *why = error;
  return error.empty();
}

const Loaded& loaded() {
  static Loaded l = load();
  return l;
}

}  // namespace

CudaBackend& cuda_backend() {
  const Loaded& l = loaded();
  if (!l.backend) LATTICE_FAIL("{}", l.error);
  return *l.backend;
}

bool cuda_available(std::string* why) {
  if (!driver_present(why)) return false;
  const Loaded& l = loaded();
  if (!l.backend) {
    if (why) *why = l.error;
    return false;
  }
  std::string reason;
  int n = l.backend->device_count(&reason);
  if (why) *why = reason;
  return n > 0;
}

}  // namespace lattice
