// A communicator over one rank (this process), needing no MPI and no NCCL:
// what a single-rank job and single-process tests give to code that takes a
// Group, and what DeviceGroups (booster/device_groups.h) gives device tensors
// over every mesh group of one rank, verify-layout's one-rank reference mesh
// included (NCCL is never set up for a group of one).
//
// Device-generic: data moves with Tensor::copy_from, so host tensors by
// memmove and device tensors by a device copy on the compute stream
// (core/backend.h). Collectives complete at once: all_reduce, broadcast
// (root 0) and barrier leave the data as it is; all_gather and
// reduce_scatter copy `in` to `out`.
//
// P2P goes to peer 0, this rank, and is a copy. A send is buffered: it copies
// the tensor (into a pending recv of the same tag, or else a snapshot kept
// until a recv of that tag takes it) and completes at once. A recv takes the
// oldest pending send of its tag, or waits for a later send of that tag: its
// test() is false until then, and its wait() throws, since no send can be
// started by this thread while it blocks. Tags match as MPI matches them
// (NCCL ignores them: a program that runs under both matches alike).
// batch_send_recv starts its sends before its recvs. Sizes and dtypes of a
// matched pair must agree.
//
// Stream order, as the NCCL communicator promises (comm/nccl_communicator.h):
// a device copy is enqueued on the compute stream, so it follows every kernel
// issued before the call and precedes every kernel issued after it, and the
// NCCL streams order themselves after the compute stream before each
// operation. So a Work that is complete on the host is complete for every
// later reader of the data, and wait() need not block.
//
// Not thread-safe: one thread calls a communicator (as for MPI and NCCL).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace lattice::comm {

// `world_rank` is the rank world_ranks() reports: this process's rank in the
// job when the group is one of a mesh's groups, 0 for a job of its own.
std::unique_ptr<Communicator> make_self_communicator(const std::string& name = "self", int world_rank = 0);
inline Group self_group(const std::string& name = "self") { return Group(make_self_communicator(name)); }

}  // namespace lattice::comm
