// Loads liblattice_cuda.so on first use (see core/backend.h).
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"

namespace lattice {

namespace {

std::string exe_dir() {
  char buf[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, size_t(n));
  return p.substr(0, p.find_last_of('/'));
}

struct Loaded {
  CudaBackend* backend = nullptr;
  std::string error;
};

Loaded load() {
  Loaded out;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("LATTICE_CUDA_LIB")) candidates.push_back(env);
  candidates.push_back(exe_dir() + "/../lib/liblattice_cuda.so");
  candidates.push_back("liblattice_cuda.so");
  std::string errors;
  for (const std::string& path : candidates) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", dlerror());
      continue;
    }
    using Create = CudaBackend* (*)();
    auto create = reinterpret_cast<Create>(dlsym(h, "lattice_cuda_backend_create"));
    if (!create) {
      errors += fmt::format("; {}: no symbol lattice_cuda_backend_create", path);
      continue;
    }
    out.backend = create();
    return out;
  }
  out.error = fmt::format(
      "the CUDA backend library could not be loaded ({}); build with LATTICE_CUDA=ON on a machine with the "
      "CUDA toolkit, or use runtime.device: cpu",
      errors);
  return out;
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
