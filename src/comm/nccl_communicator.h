// The NCCL communicator (device memory), reached through a factory so that
// lattice_comm never links CUDA or NCCL.
//
// NcclCommunicator itself is built into liblattice_nccl.so (src/comm/nccl/,
// CUDA builds with NCCL only) and opened with dlopen on first use, looked for
// in $LATTICE_NCCL_LIB, then next to the running binary (../lib), then on the
// loader path. Its semantics are the Communicator contract with these
// specifics:
//   - it spans the same ranks as `over`, whose MPI communicator bootstraps it
//     (ncclGetUniqueId on group rank 0, MPI_Bcast) and carries split();
//   - the GPU is choose_cuda_device's (comm/device_placement.h: one rank per
//     GPU from the node-local rank and size); tensors must be on it;
//   - one CUDA stream per communicator, non-blocking, ordered after the
//     compute stream's kernels by an event before each operation
//     (comm/stream_order.h), so transfers overlap the kernels issued after
//     them; a Work is a CUDA event on that stream: wait() polls it until the
//     deadline, wait_on_device() makes the compute stream wait for it;
//   - NCCL has no tags: P2POptions::tag and P2POp::tag are ignored, so
//     transfers between two ranks match in the order they are started;
//   - batch_send_recv is one ncclGroupStart/ncclGroupEnd;
//   - its host waits answer the roll call and its timeouts hold one, as
//     MpiWork's do (comm/roll_call.h; the messages end with what it heard);
//   - u16 moves but does not reduce.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/roll_call_hooks.h"

namespace lattice::comm {

// A device-memory communicator over the ranks of `over` (an MpiCommunicator),
// named like it; collective over `over`. local_rank and local_size place this
// rank on the node (MpiRuntime::local_rank/local_size). timeout_s <= 0:
// over's default. Throws lattice::Error with the reason when
// liblattice_nccl.so cannot be loaded (not built, or CUDA libraries missing)
// or placement finds no device for this rank (no GPU visible, too few GPUs).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& over, int local_rank, int local_size,
                                                     double timeout_s = 0);

}  // namespace lattice::comm

// The one symbol liblattice_nccl.so exports. `comm` is an MPI_Comm (passed as
// a pointer-sized handle so this header needs no mpi.h); it is duplicated.
// `roll_call` is the lattice binary's roll call (roll_call_hooks() in
// comm/roll_call.h, which lives as long as the process; the library's waits
// answer it and its timeouts hold one, comm/roll_call_hooks.h), or null for none.
extern "C" lattice::comm::Communicator* lattice_nccl_communicator_create(void* mpi_comm, const char* name,
                                                                         int local_rank, int local_size,
                                                                         double timeout_s,
                                                                         const lattice::comm::RollCallHooks* roll_call);
