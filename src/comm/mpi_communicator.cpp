#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "comm/describe.h"
#include "comm/mpi_check.h"
#include "comm/mpi_runtime.h"
#include "comm/roll_call.h"
#include "core/poll.h"

namespace lattice::comm {

namespace {

// ---- bf16 / f16 reductions as user-defined MPI ops ----

template <float (*Load)(uint16_t), uint16_t (*Store)(float), ReduceOp Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = Load(a[i]), y = Load(b[i]);
    float r = Op == ReduceOp::sum ? x + y : Op == ReduceOp::max ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = Store(r);
  }
}

float load_bf16(uint16_t h) { return bf16_to_f32(h); }
uint16_t store_bf16(float f) { return f32_to_bf16(f); }
float load_f16(uint16_t h) { return f16_to_f32(h); }
uint16_t store_f16(float f) { return f32_to_f16(f); }

struct HalfOps {
  MPI_Op bf16[3], f16[3];  // indexed by ReduceOp
  HalfOps() {
    MPI_Op_create(&half_reduce<load_bf16, store_bf16, ReduceOp::sum>, 1, &bf16[0]);
    MPI_Op_create(&half_reduce<load_bf16, store_bf16, ReduceOp::max>, 1, &bf16[1]);
    MPI_Op_create(&half_reduce<load_bf16, store_bf16, ReduceOp::min>, 1, &bf16[2]);
    MPI_Op_create(&half_reduce<load_f16, store_f16, ReduceOp::sum>, 1, &f16[0]);
    MPI_Op_create(&half_reduce<load_f16, store_f16, ReduceOp::max>, 1, &f16[1]);
    MPI_Op_create(&half_reduce<load_f16, store_f16, ReduceOp::min>, 1, &f16[2]);
  }
};

const HalfOps& half_ops() {
  static HalfOps ops;  // created on first use, after MPI_Init
  return ops;
}

// ---- Work ----

// One started operation: its MPI requests, what each one is (for the timeout
// message), and the tensors that must stay alive while MPI may touch them.
class MpiWork final : public Work {
 public:
  struct Part {
    const char* op;  // "all_reduce", "send", "recv", ...
    int peer = -1;   // group rank for P2P, -1 for collectives
  };

  MpiWork(const MpiCommunicator& comm, double timeout_s, bool collective)
      : comm_(&comm), timeout_s_(timeout_s), collective_(collective) {}

  ~MpiWork() override {
    if (done_ || !mpi_active()) return;
    int flag = 0;  // dropped without wait(): fine if it has finished
    if (error_.empty() && MPI_Testall(int(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
        flag)
      return;
    if (collective_) {
      // MPI cannot cancel a collective: keep its buffers alive for good.
      new std::vector<Tensor>(std::move(keep_));
      return;
    }
    cancel_pending();
  }

  void add(MPI_Request req, Part part, Tensor keep) {
    reqs_.push_back(req);
    parts_.push_back(part);
    keep_.push_back(std::move(keep));
  }

  bool test() override {
    if (!error_.empty()) return false;  // timed out: it never completes
    if (done_) return true;
    roll_call_answer();
    int flag = 0;
    MPI_CHECK(MPI_Testall(int(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) finish();
    return done_;
  }

  void wait() override {
    LATTICE_CHECK(error_.empty(), "{}", error_);
    if (done_) return;
    WaitingIn waiting(what());
    if (poll_until([&] { return test(); }, deadline_after(timeout_s_))) return;
    error_ = timeout_message();
    if (!collective_) cancel_pending();
    LATTICE_FAIL("{}", error_);
  }

 private:
  void finish() {
    done_ = true;
    keep_.clear();
  }

  // What a roll call hears this rank is waiting in (comm/roll_call.h).
  std::string what() const {
    if (collective_) return fmt::format("{} on group {}", parts_[0].op, comm_->name());
    if (parts_.size() == 1)
      return fmt::format("{} on group {}",
                         describe_p2p(std::strcmp(parts_[0].op, "send") == 0, parts_[0].peer, comm_->world_ranks()),
                         comm_->name());
    return fmt::format("batch_send_recv on group {}", comm_->name());
  }

  // A collective's names its group, then what a roll call of the group hears:
  // the rank it is waiting for is the one that does not answer.
  std::string timeout_message() const {
    const std::string group = describe_group(comm_->name(), comm_->world_ranks());
    if (collective_) {
      std::string heard = roll_call(comm_->world_ranks(), roll_call_grace_s(timeout_s_));
      return fmt::format("{} on {} {}{}", parts_[0].op, group, describe_timeout(timeout_s_), roll_call_tail(heard));
    }
    std::string pending;
    std::vector<int> peers;  // world ranks of the pending transfers
    const std::vector<int>& w = comm_->world_ranks();
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL) continue;  // completed
      int flag = 0;
      MPI_Request_get_status(reqs_[i], &flag, MPI_STATUS_IGNORE);
      if (flag) continue;
      bool is_send = std::strcmp(parts_[i].op, "send") == 0;
      pending += fmt::format("{}{}", pending.empty() ? "" : ", ", describe_p2p(is_send, parts_[i].peer, w));
      const int peer = parts_[i].peer;
      if (peer >= 0 && size_t(peer) < w.size() && std::find(peers.begin(), peers.end(), w[size_t(peer)]) == peers.end())
        peers.push_back(w[size_t(peer)]);
    }
    // The peer may itself wait on another rank (a pipeline stage whose dp or
    // tp partner is stopped): the roll call asks it, then the others.
    const std::string heard = roll_call(peers, roll_call_grace_s(timeout_s_));
    const std::string tail = roll_call_tail(heard);
    if (reqs_.size() == 1) return fmt::format("{} of {} {}{}", pending, group, describe_timeout(timeout_s_), tail);
    return fmt::format("batch_send_recv on {} (still pending: {}) {}{}", group, pending, describe_timeout(timeout_s_),
                       tail);
  }

  // Cancels pending receives (MPI_Cancel then MPI_Wait, which returns at once
  // for a receive) so their buffers are free again. A pending send cannot be
  // cancelled reliably (Open MPI ignores it): its request is released and its
  // buffer kept alive for good, since MPI may still read it.
  void cancel_pending() {
    bool leak = false;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      MPI_Request& r = reqs_[i];
      if (r == MPI_REQUEST_NULL) continue;
      if (std::strcmp(parts_[i].op, "send") == 0) {
        MPI_Request_free(&r);
        leak = true;
      } else {
        MPI_Cancel(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      }
    }
    if (leak) new std::vector<Tensor>(std::move(keep_));
    finish();
  }

  const MpiCommunicator* comm_;
  double timeout_s_;
  bool collective_;
  bool done_ = false;
  std::string error_;
  std::vector<MPI_Request> reqs_;
  std::vector<Part> parts_;
  std::vector<Tensor> keep_;
};

std::unique_ptr<MpiWork> started(const MpiCommunicator& c, double timeout_s, const char* op, MPI_Request req,
                                 Tensor keep, int peer = -1, bool collective = true) {
  auto w = std::make_unique<MpiWork>(c, timeout_s, collective);
  w->add(req, {op, peer}, std::move(keep));
  return w;
}

int count_of(const Tensor& t, const char* op) {
  LATTICE_CHECK(t.numel() <= INT_MAX, "{}: {} elements exceed MPI's int count; split the buffer", op, t.numel());
  return int(t.numel());
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || !a.same_storage(b)) return false;
  auto* pa = static_cast<const char*>(a.raw());
  auto* pb = static_cast<const char*>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

std::vector<int> translate_to_world(MPI_Comm comm, int size) {
  MPI_Group g, world;
  MPI_CHECK(MPI_Comm_group(comm, &g));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> ranks(static_cast<size_t>(size)), out(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[size_t(i)] = i;
  MPI_CHECK(MPI_Group_translate_ranks(g, size, ranks.data(), world, out.data()));
  MPI_Group_free(&g);
  MPI_Group_free(&world);
  return out;
}

}  // namespace

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::bf16:
    case DType::f16:
    case DType::u16:
      return MPI_UINT16_T;
  }
  LATTICE_FAIL("no MPI type for dtype {}", int(t));
}

MPI_Op mpi_reduce_op(ReduceOp op, DType t) {
  int i = int(op);
  switch (t) {
    case DType::f64:
    case DType::f32:
    case DType::i32:
      return op == ReduceOp::sum ? MPI_SUM : op == ReduceOp::max ? MPI_MAX : MPI_MIN;
    case DType::bf16:
      return half_ops().bf16[i];
    case DType::f16:
      return half_ops().f16[i];
    case DType::u16:
      break;
  }
  LATTICE_FAIL("reductions over dtype {} are not supported (f64, f32, i32, bf16, f16 are)", dtype_name(t));
}

// ---- MpiCommunicator ----

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
    : comm_(comm), name_(std::move(name)), timeout_s_(timeout_s) {
  LATTICE_CHECK(comm_ != MPI_COMM_NULL, "MpiCommunicator '{}' over MPI_COMM_NULL", name_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  world_ranks_ = translate_to_world(comm_, size_);
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && mpi_active()) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check_tensor(const Tensor& t, const char* op) const {
  LATTICE_CHECK(t.defined(), "{} on {}: the tensor is undefined", op, describe_group(name_, world_ranks_));
  LATTICE_CHECK(t.device().is_cpu(),
                "{} on {}: MpiCommunicator moves host memory, the tensor is on {} (use an NCCL communicator "
                "for device tensors)",
                op, describe_group(name_, world_ranks_), t.device().str());
}

void MpiCommunicator::check_peer(int peer, const char* op) const {
  LATTICE_CHECK(peer >= 0 && peer < size_, "{}: peer {} is outside {} of size {}", op, peer,
                describe_group(name_, world_ranks_), size_);
}

WorkPtr MpiCommunicator::all_reduce(Tensor& t, const CollectiveOptions& o) {
  check_tensor(t, "all_reduce");
  MPI_Op op = mpi_reduce_op(o.op, t.dtype());
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.raw(), count_of(t, "all_reduce"), mpi_datatype(t.dtype()), op, comm_, &req));
  return started(*this, timeout_for(o.timeout_s), "all_reduce", req, t);
}

WorkPtr MpiCommunicator::all_gather(Tensor& out, const Tensor& in, const CollectiveOptions& o) {
  check_tensor(out, "all_gather");
  check_tensor(in, "all_gather");
  LATTICE_CHECK(in.dtype() == out.dtype(), "all_gather: in is {}, out is {}", dtype_name(in.dtype()),
                dtype_name(out.dtype()));
  LATTICE_CHECK(out.numel() == in.numel() * size_, "all_gather on {}: out has {} elements, expected {} * {}",
                describe_group(name_, world_ranks_), out.numel(), size_, in.numel());
  const size_t block = in.nbytes();
  const bool in_place = in.same_storage(out) && in.raw() == static_cast<char*>(out.raw()) + size_t(rank_) * block;
  LATTICE_CHECK(in_place || !overlaps(in, out),
                "all_gather: in overlaps out but is not block {} of it (in place needs in == out block rank)", rank_);
  MPI_Datatype type = mpi_datatype(in.dtype());
  int n = count_of(in, "all_gather");
  MPI_Request req;
  MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.raw(), n, type, out.raw(), n, type, comm_, &req));
  auto w = started(*this, timeout_for(o.timeout_s), "all_gather", req, out);
  return w;
}

WorkPtr MpiCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const CollectiveOptions& o) {
  check_tensor(out, "reduce_scatter");
  check_tensor(in, "reduce_scatter");
  LATTICE_CHECK(in.dtype() == out.dtype(), "reduce_scatter: in is {}, out is {}", dtype_name(in.dtype()),
                dtype_name(out.dtype()));
  LATTICE_CHECK(in.numel() == out.numel() * size_, "reduce_scatter on {}: in has {} elements, expected {} * {}",
                describe_group(name_, world_ranks_), in.numel(), size_, out.numel());
  LATTICE_CHECK(!overlaps(in, out), "reduce_scatter: in and out overlap; use separate buffers");
  MPI_Op op = mpi_reduce_op(o.op, in.dtype());
  MPI_Request req;
  MPI_CHECK(MPI_Ireduce_scatter_block(in.raw(), out.raw(), count_of(out, "reduce_scatter"), mpi_datatype(in.dtype()),
                                      op, comm_, &req));
  auto w = started(*this, timeout_for(o.timeout_s), "reduce_scatter", req, out);
  return w;
}

WorkPtr MpiCommunicator::broadcast(Tensor& t, int root, const CollectiveOptions& o) {
  check_tensor(t, "broadcast");
  check_peer(root, "broadcast");
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(t.raw(), count_of(t, "broadcast"), mpi_datatype(t.dtype()), root, comm_, &req));
  return started(*this, timeout_for(o.timeout_s), "broadcast", req, t);
}

WorkPtr MpiCommunicator::send(const Tensor& t, int peer, const P2POptions& o) {
  return batch_send_recv({P2POp{P2POp::Kind::send, t, peer, o.tag}}, o.timeout_s);
}

WorkPtr MpiCommunicator::recv(Tensor& t, int peer, const P2POptions& o) {
  return batch_send_recv({P2POp{P2POp::Kind::recv, t, peer, o.tag}}, o.timeout_s);
}

WorkPtr MpiCommunicator::batch_send_recv(const std::vector<P2POp>& ops, double timeout_s) {
  auto w = std::make_unique<MpiWork>(*this, timeout_for(timeout_s), /*collective=*/false);
  for (const P2POp& p : ops) {
    const bool is_send = p.kind == P2POp::Kind::send;
    const char* op = is_send ? "send" : "recv";
    check_tensor(p.tensor, op);
    check_peer(p.peer, op);
    LATTICE_CHECK(p.tag >= 0 && p.tag <= 32767, "{}: tag {} is outside [0, 32767]", op, p.tag);
    MPI_Request req;
    int n = count_of(p.tensor, op);
    MPI_Datatype type = mpi_datatype(p.tensor.dtype());
    if (is_send) {
      MPI_CHECK(MPI_Isend(p.tensor.raw(), n, type, p.peer, p.tag, comm_, &req));
    } else {
      MPI_CHECK(MPI_Irecv(p.tensor.raw(), n, type, p.peer, p.tag, comm_, &req));
    }
    w->add(req, {op, p.peer}, p.tensor);
  }
  return w;
}

WorkPtr MpiCommunicator::barrier(const CollectiveOptions& o) {
  MPI_Request req;
  MPI_CHECK(MPI_Ibarrier(comm_, &req));
  return started(*this, timeout_for(o.timeout_s), "barrier", req, Tensor());
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  LATTICE_CHECK(color >= 0, "split of {} into '{}': color {} must be >= 0", describe_group(name_, world_ranks_), name,
                color);
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_unique<MpiCommunicator>(sub, name, timeout_s_);
}

std::unique_ptr<MpiCommunicator> make_world_communicator(double timeout_s) {
  LATTICE_CHECK(mpi_active(), "make_world_communicator: MPI is not initialised (create an MpiRuntime in main)");
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  return std::make_unique<MpiCommunicator>(dup, "world", timeout_s);
}

}  // namespace lattice::comm
