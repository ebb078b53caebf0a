// Loads liblattice_cuda.so on first use (see core/backend.h).
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
