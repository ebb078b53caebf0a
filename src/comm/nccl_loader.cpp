// Opens liblattice_nccl.so on first use (see comm/nccl_communicator.h).
#include <cstring>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/roll_call.h"
#include "core/plugin_library.h"

namespace lattice::comm {

namespace {

using Create = Communicator* (*)(void*, const char*, int, int, double, const RollCallHooks*);

struct Loaded {
  Create create = nullptr;
  std::string error;
};

Loaded load() {
  LoadedSymbol l = load_library_symbol("liblattice_nccl.so", "LATTICE_NCCL_LIB", "lattice_nccl_communicator_create");
  if (l.symbol) return {reinterpret_cast<Create>(l.symbol), ""};
  return {nullptr, fmt::format("NCCL communicators need liblattice_nccl.so, which could not be loaded ({}); build "
                               "with the CUDA toolkit and NCCL, or use runtime.device: cpu",
                               l.errors)};
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& over, int local_rank, int local_size,
                                                     double timeout_s) {
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
  // The roll call is this binary's (opened by MpiRuntime): the library reaches it through the table.
  return std::unique_ptr<Communicator>(
      loaded.create(handle, over.name().c_str(), local_rank, local_size, t, &roll_call_hooks()));
}

}  // namespace lattice::comm
