// The id a group of ranks needs before it can build its own communicator
// (NCCL's ncclUniqueId for ncclCommInitRank), handed out over MPI: rank 0 of
// the MPI group makes it, every rank gets rank 0's bytes. A failure on rank 0
// (no GPU, a broken NCCL) is broadcast in the same message, so every rank
// throws rank 0's reason instead of waiting in a broadcast that never comes.
// Plain MPI and no CUDA: the NCCL communicator (comm/nccl/) uses it, and
// test_id_bootstrap exercises it on the CPU under mpirun.
//
// Collective over `comm`: every rank calls it once, in the same order as its
// other collectives on `comm`.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace lattice::comm {

// Returns rank 0's `make_id()` on every rank of `comm`. Throws lattice::Error
// on every rank, naming `what` and rank 0's reason, when make_id throws on
// rank 0, and naming `what` when the broadcast fails.
template <typename Id, typename MakeId>
Id bootstrap_id(MPI_Comm comm, const std::string& what, MakeId&& make_id) {
  static_assert(std::is_trivially_copyable_v<Id>, "the id travels as bytes");
  struct Message {
    Id id;
    int ok;
    char reason[512];  // rank 0's error, cut to fit
  };
  Message m;
  std::memset(&m, 0, sizeof(m));
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    try {
      m.id = make_id();
      m.ok = 1;
    } catch (const std::exception& e) {
      const std::string r = e.what();
      std::memcpy(m.reason, r.data(), std::min(r.size(), sizeof(m.reason) - 1));
    }
  }
  LATTICE_CHECK(MPI_Bcast(&m, int(sizeof(m)), MPI_BYTE, 0, comm) == MPI_SUCCESS,
                "{}: broadcasting the id over MPI failed", what);
  LATTICE_CHECK(m.ok == 1, "{}: rank 0 could not make the id: {}", what, m.reason);
  return m.id;
}

}  // namespace lattice::comm
