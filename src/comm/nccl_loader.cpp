// Opens liblattice_nccl.so on first use (see comm/nccl_communicator.h).
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"

namespace lattice::comm {

namespace {

using Create = Communicator* (*)(void*, const char*, int, double);

std::string exe_dir() {
  char buf[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, size_t(n));
  return p.substr(0, p.find_last_of('/'));
}

struct Loaded {
  Create create = nullptr;
  std::string error;
};

Loaded load() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("LATTICE_NCCL_LIB")) candidates.push_back(env);
  candidates.push_back(exe_dir() + "/../lib/liblattice_nccl.so");
  candidates.push_back("liblattice_nccl.so");
  std::string errors;
  for (const std::string& path : candidates) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", dlerror());
      continue;
    }
    if (auto create = reinterpret_cast<Create>(dlsym(h, "lattice_nccl_communicator_create"))) return {create, ""};
    errors += fmt::format("; {}: no symbol lattice_nccl_communicator_create", path);
  }
  return {nullptr, fmt::format("NCCL communicators need liblattice_nccl.so, which could not be loaded ({}); build "
                               "with the CUDA toolkit and NCCL, or use runtime.device: cpu",
                               errors)};
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& over, int local_rank, double timeout_s) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&over);
  LATTICE_CHECK(mpi, "make_nccl_communicator: group '{}' is not an MpiCommunicator (NCCL bootstraps over MPI)",
                over.name());
  static const Loaded loaded = load();
  if (!loaded.create) LATTICE_FAIL("{}", loaded.error);
  MPI_Comm comm = mpi->mpi_comm();
  void* handle = nullptr;
  static_assert(sizeof(MPI_Comm) <= sizeof(void*), "MPI_Comm must fit a pointer");
  std::memcpy(&handle, &comm, sizeof(MPI_Comm));
  double t = timeout_s > 0 ? timeout_s : mpi->timeout_s();
  return std::unique_ptr<Communicator>(loaded.create(handle, over.name().c_str(), local_rank, t));
}

}  // namespace lattice::comm
