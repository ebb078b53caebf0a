// MpiCommunicator: the Communicator (comm/communicator.h) over an MPI
// communicator, for host (CPU) tensors.
//
// Every call starts an MPI-3 non-blocking operation (MPI_Iallreduce,
// MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Ibcast, MPI_Isend/Irecv,
// MPI_Ibarrier); Work::wait() polls MPI_Test with a backoff (core/poll.h)
// until completion or the deadline. all_reduce runs in place (MPI_IN_PLACE);
// all_gather also runs in place when `in` is exactly block `rank` of `out`.
//
// Types: f64, f32, i32 reduce natively; bf16 and f16 reduce through
// user-defined MPI ops (accumulated in f32, rounded to nearest even per
// pairwise step); u16 moves but does not reduce. Device tensors are refused
// (NcclCommunicator moves device memory).
//
// After a deadline: a pending recv is cancelled (its buffer is free again); a
// pending collective cannot be cancelled in MPI, so its Work keeps the
// buffers alive for the rest of the process. The job is expected to abort.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace lattice::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor unless it is
  // MPI_COMM_WORLD). timeout_s: the default deadline of every wait (<= 0: none).
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  MPI_Comm mpi_comm() const { return comm_; }
  double timeout_s() const { return timeout_s_; }

  WorkPtr all_reduce(Tensor& t, const CollectiveOptions& o) override;
  WorkPtr all_gather(Tensor& out, const Tensor& in, const CollectiveOptions& o) override;
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const CollectiveOptions& o) override;
  WorkPtr broadcast(Tensor& t, int root, const CollectiveOptions& o) override;
  WorkPtr send(const Tensor& t, int peer, const P2POptions& o) override;
  WorkPtr recv(Tensor& t, int peer, const P2POptions& o) override;
  WorkPtr batch_send_recv(const std::vector<P2POp>& ops, double timeout_s) override;
  WorkPtr barrier(const CollectiveOptions& o) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  bool progresses_in_calls() const override { return size() > 1; }

 private:
  double timeout_for(double requested) const { return requested > 0 ? requested : timeout_s_; }
  void check_tensor(const Tensor& t, const char* op) const;
  void check_peer(int peer, const char* op) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  double timeout_s_ = 0;
};

// A communicator over all ranks of the job (a duplicate of MPI_COMM_WORLD, so
// Lattice's traffic never matches anyone else's), named "world".
std::unique_ptr<MpiCommunicator> make_world_communicator(double timeout_s);

// The MPI type that moves (and, where one exists, reduces) elements of `t`.
MPI_Datatype mpi_datatype(DType t);
// The MPI op reducing `t` with `op`; throws for types that do not reduce (u16).
MPI_Op mpi_reduce_op(ReduceOp op, DType t);

}  // namespace lattice::comm
