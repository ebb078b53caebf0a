// MPI_CHECK: wraps an MPI call; on failure throws lattice::Error with the
// expression, file:line and MPI's own error string. Communicators set
// MPI_ERRORS_RETURN on the communicators they own, so a failing call returns
// here instead of aborting inside the library.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace lattice::comm {

inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, size_t(len));
}

}  // namespace lattice::comm

#define MPI_CHECK(call)                                                                                      \
  do {                                                                                                       \
    int lattice_mpi_rc_ = (call);                                                                            \
    if (lattice_mpi_rc_ != MPI_SUCCESS) [[unlikely]]                                                         \
      ::lattice::throw_error(::lattice::comm::mpi_error_string(lattice_mpi_rc_), #call, __FILE__, __LINE__); \
  } while (0)
