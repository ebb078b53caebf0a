// Communicators: the small closed interface every collective and P2P goes
// through, and Group, the move-only owner that the mesh hands out.
//
// Completion contract (the one place it is written): every call STARTS an
// operation and returns a Work handle at once. The buffers belong to the
// operation until wait() returns: do not read an output or write an input
// before then. wait() blocks until completion or until the deadline
// (CollectiveOptions/P2POptions::timeout_s, or the communicator's default,
// runtime.comm_timeout_s) and then throws lattice::Error naming the
// operation, the group and the peer ("recv from rank 3 of group pp (world
// ranks 0,4) timed out after 300 s"). Calls on one communicator are started
// in program order on every rank of the group (MPI/NCCL semantics): all ranks
// must issue the same collectives in the same order.
//
// wait_on_device() is the device-memory form of wait(): the device's compute
// stream waits for the operation, the host does not. Every later use of the
// buffers goes through that stream (kernels, copies to the host, frees, and
// other communicators, which start after the compute stream's earlier work),
// so it sees the result, and the host keeps issuing kernels meanwhile. A
// transfer that never completes then stalls the compute stream, and the next
// host wait on it fails at the same deadline (core/backend.h,
// CudaBackend::set_host_wait_timeout). For host memory it is wait().
//
// Buffer layouts: all_gather writes rank r's `in` at element offset r * n of
// `out` (n = in.numel(), out.numel() = size * n); reduce_scatter is its
// mirror (rank r receives the reduced block r of `in`). Reductions are
// element-wise over contiguous tensors of one dtype. A group of size 1 is
// valid: every collective then completes at once as a copy (or no-op).
//
// MpiCommunicator (comm/mpi_communicator.h) moves host memory;
// NcclCommunicator moves device memory (CUDA builds only).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace lattice::comm {

enum class ReduceOp { sum, max, min };

struct CollectiveOptions {
  ReduceOp op = ReduceOp::sum;
  double timeout_s = 0;  // 0: the communicator's default
};

struct P2POptions {
  int tag = 0;
  double timeout_s = 0;  // 0: the communicator's default
};

// One send or recv of a batch started together (batch_send_recv).
struct P2POp {
  enum class Kind { send, recv } kind;
  Tensor tensor;  // recv: written in place
  int peer;       // rank within the group
  int tag = 0;
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;                   // throws lattice::Error at the deadline
  virtual bool test() = 0;                   // true once complete (never throws for a deadline)
  virtual void wait_on_device() { wait(); }  // see the contract above
};
using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // rank within the group
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;              // "world", "tp", "dp", "pp", "tie", ...
  virtual const std::vector<int>& world_ranks() const = 0;  // group rank -> world rank

  virtual WorkPtr all_reduce(Tensor& t, const CollectiveOptions& o) = 0;  // in place
  virtual WorkPtr all_gather(Tensor& out, const Tensor& in, const CollectiveOptions& o) = 0;
  virtual WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const CollectiveOptions& o) = 0;
  virtual WorkPtr broadcast(Tensor& t, int root, const CollectiveOptions& o) = 0;
  virtual WorkPtr send(const Tensor& t, int peer, const P2POptions& o) = 0;
  virtual WorkPtr recv(Tensor& t, int peer, const P2POptions& o) = 0;
  virtual WorkPtr batch_send_recv(const std::vector<P2POp>& ops, double timeout_s) = 0;
  virtual WorkPtr barrier(const CollectiveOptions& o) = 0;

  // A new communicator over the ranks of this one that pass the same color,
  // ordered by key (MPI_Comm_split semantics); collective over this group.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  // True when started operations advance only inside calls of this process
  // (MPI's host-side progress), so a caller overlapping them with compute
  // wants comm::MpiProgress running; false when the transport progresses on
  // its own (NCCL on the GPU, a group of one).
  virtual bool progresses_in_calls() const { return false; }
};

// A move-only owner of one communicator: what the mesh hands out and what
// layers take by reference. The calls forward to the communicator
// (`g.all_reduce(t)->wait()` to block).
class Group {
 public:
  Group() = default;
  explicit Group(std::unique_ptr<Communicator> c) : comm_(std::move(c)) {}
  Group(Group&&) = default;
  Group& operator=(Group&&) = default;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  bool valid() const { return comm_ != nullptr; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  const std::string& name() const { return comm_->name(); }
  const std::vector<int>& world_ranks() const { return comm_->world_ranks(); }
  Communicator& comm() { return *comm_; }

  WorkPtr all_reduce(Tensor& t, const CollectiveOptions& o = {}) { return comm_->all_reduce(t, o); }
  WorkPtr all_gather(Tensor& out, const Tensor& in, const CollectiveOptions& o = {}) {
    return comm_->all_gather(out, in, o);
  }
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const CollectiveOptions& o = {}) {
    return comm_->reduce_scatter(out, in, o);
  }
  WorkPtr broadcast(Tensor& t, int root, const CollectiveOptions& o = {}) { return comm_->broadcast(t, root, o); }
  WorkPtr send(const Tensor& t, int peer, const P2POptions& o = {}) { return comm_->send(t, peer, o); }
  WorkPtr recv(Tensor& t, int peer, const P2POptions& o = {}) { return comm_->recv(t, peer, o); }
  WorkPtr batch_send_recv(const std::vector<P2POp>& ops, double timeout_s = 0) {
    return comm_->batch_send_recv(ops, timeout_s);
  }
  WorkPtr barrier(const CollectiveOptions& o = {}) { return comm_->barrier(o); }

 private:
  std::unique_ptr<Communicator> comm_;
};

// `v` reduced over `g` by `op` (sum, max, min), on every rank: a collective
// over a one-element f64 host tensor; a group of one returns v.
inline double all_reduce_scalar(Group& g, double v, ReduceOp op) {
  if (g.size() == 1) return v;
  Tensor t = Tensor::from<double>({v}, {1});
  g.all_reduce(t, {.op = op})->wait();
  return t.data<double>()[0];
}

}  // namespace lattice::comm
