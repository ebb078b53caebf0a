// Opening the optional shared libraries (the CUDA backend, the NCCL
// communicator) at run time, so the lattice binary starts on machines
// without CUDA libraries. A library is looked for in $ENV_VAR, then next to
// the running binary (../lib/NAME), then on the loader path; the first that
// opens and exports `symbol` wins.
#pragma once

#include <string>

namespace lattice {

struct LoadedSymbol {
  void* symbol = nullptr;  // null when no candidate worked
  std::string errors;      // why each candidate failed, "; "-separated
};

LoadedSymbol load_library_symbol(const std::string& library, const char* env_var, const char* symbol);

}  // namespace lattice
