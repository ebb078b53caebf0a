// NCCL_CHECK: turns a failed NCCL call into a lattice::Error carrying the
// expression, file:line and NCCL's own message (ncclGetErrorString plus
// ncclGetLastError's detail). CUDA_CHECK comes from the CUDA backend's header
// so the codebase has one definition of it.
#pragma once

#include <nccl.h>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace lattice::comm {

[[noreturn]] inline void throw_nccl_error(ncclResult_t r, const char* expr, const char* file, int line) {
  const char* detail = ncclGetLastError(nullptr);
  throw_error(
      fmt::format("NCCL error: {}{}{}", ncclGetErrorString(r), detail && *detail ? ": " : "", detail ? detail : ""),
      expr, file, line);
}

}  // namespace lattice::comm

#define NCCL_CHECK(expr)                                                              \
  do {                                                                                \
    ncclResult_t lattice_nccl_rc_ = (expr);                                           \
    if (lattice_nccl_rc_ != ncclSuccess) [[unlikely]]                                 \
      ::lattice::comm::throw_nccl_error(lattice_nccl_rc_, #expr, __FILE__, __LINE__); \
  } while (0)
