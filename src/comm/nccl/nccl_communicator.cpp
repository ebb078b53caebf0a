// NcclCommunicator: the Communicator over NCCL for device tensors, exported
// as lattice_nccl_communicator_create (comm/nccl_communicator.h has the
// contract). Every call is ordered after the compute stream's kernels and
// enqueued on the communicator's own non-blocking stream (comm/stream_order.h),
// then records a CUDA event; Work polls the event (and NCCL's async error)
// until the deadline.
//
// Buffers: a Work keeps its tensors alive until the operation completes, or
// until wait_on_device() puts the compute stream behind it (every later use,
// a free included, is then on that stream after the transfer). When
// the operation cannot complete (the enqueue failed once NCCL calls had been
// issued, or wait() timed out) the communicator is marked broken and takes
// the tensors over; it releases them when it goes, after ncclCommAbort has
// ended whatever NCCL had launched on them. An enqueue that fails before any
// NCCL call (the event record or wait) releases them at once. Either way the
// failure's own error propagates unchanged.
//
// Teardown (NCCL's guide, "Asynchronous errors": after an error, abort, do
// not destroy): while an exception is unwinding (a failure on its way to
// fail_job, which ends the whole job) nothing is destroyed or freed, since
// ncclCommAbort synchronises the device and another communicator's kernel,
// or the compute stream waiting for it, may never finish. Otherwise
// ncclCommDestroy, which waits for the communicator's operations, when the
// stream drains within the timeout and nothing broke it; else
// ncclCommAbort, whose kernels then exit, and the taken buffers are freed
// only once the stream has drained, else kept for good.
// A broken communicator refuses new operations (they would queue behind the
// one that never completes).
//
// Roll call (comm/roll_call.h): the host waits (NcclWork::test and wait,
// before_device_wait) answer the roll call while they poll, saying what they
// wait in ("all_reduce on group dp (NCCL)"), and a timeout asks the
// communicator's world ranks (then the rest of the world) and appends what
// it heard. The roll call is the lattice binary's, reached through the table
// the loader passes to lattice_nccl_communicator_create
// (comm/roll_call_hooks.h); null: none.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>

#include "comm/communicator.h"
#include "comm/describe.h"
#include "comm/device_placement.h"
#include "comm/id_bootstrap.h"
#include "comm/nccl/nccl_check.h"
#include "comm/roll_call_hooks.h"
#include "comm/stream_order.h"
#include "core/poll.h"

namespace lattice::comm {

namespace {

// Element type and count multiplier: u16 moves as bytes (NCCL has no 16-bit integer).
struct NcclType {
  ncclDataType_t type;
  size_t scale;
  bool reduces;
};

NcclType nccl_type(DType t) {
  switch (t) {
    case DType::f64:
      return {ncclFloat64, 1, true};
    case DType::f32:
      return {ncclFloat32, 1, true};
    case DType::i32:
      return {ncclInt32, 1, true};
    case DType::bf16:
      return {ncclBfloat16, 1, true};
    case DType::f16:
      return {ncclFloat16, 1, true};
    case DType::u16:
      return {ncclUint8, 2, false};
  }
  LATTICE_FAIL("no NCCL type for dtype {}", int(t));
}

// This rank's device under the one-rank-per-GPU rules (comm/device_placement.h).
int placed_device(int local_rank, int local_size) {
  int count = 0;
  std::string why;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the error is reported below, not by the next CUDA call
    why = fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
    count = 0;
  }
  return choose_cuda_device({.local_rank = local_rank,
                             .local_size = local_size,
                             .device_count = count,
                             .cuda_visible_devices = std::getenv("CUDA_VISIBLE_DEVICES"),
                             .host = host_name(),
                             .why_none = why});
}

// The event API stream_order.h sequences.
struct CudaEvents {
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;
  void record(Event e, Stream s) { CUDA_CHECK(cudaEventRecord(e, s)); }
  void wait(Stream s, Event e) { CUDA_CHECK(cudaStreamWaitEvent(s, e, 0)); }
};

// Where the compute kernels run (kStream, core/cuda/backend_impl.h).
const cudaStream_t kComputeStream = cudaStreamLegacy;

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : op == ReduceOp::max ? ncclMax : ncclMin; }

std::vector<int> world_ranks_of(MPI_Comm comm, int size) {
  MPI_Group g, world;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> in(static_cast<size_t>(size)), out(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) in[size_t(i)] = i;
  MPI_Group_translate_ranks(g, size, in.data(), world, out.data());
  MPI_Group_free(&g);
  MPI_Group_free(&world);
  return out;
}

class NcclCommunicator;

class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator& comm, std::string what, double timeout_s, std::vector<Tensor> keep);
  ~NcclWork() override;
  cudaEvent_t event() const { return event_; }
  // The kept tensors, handed over by an operation that never completes, so
  // that the destructor does not keep them for good.
  std::vector<Tensor> take_buffers() { return std::exchange(keep_, {}); }
  bool test() override;
  void wait() override;
  void wait_on_device() override;

 private:
  NcclCommunicator* comm_;
  std::string what_;  // "all_reduce", "send to rank 1 (world rank 3)", ...
  double timeout_s_;
  std::vector<Tensor> keep_;
  cudaEvent_t event_ = nullptr;
  bool done_ = false;
  std::string error_;
};

class NcclCommunicator final : public Communicator {
 public:
  // Owns `comm` (an MPI duplicate of the group). roll_call: the binary's roll call, or null for none.
  NcclCommunicator(MPI_Comm comm, std::string name, int local_rank, int local_size, double timeout_s,
                   const RollCallHooks* roll_call)
      : mpi_(comm),
        name_(std::move(name)),
        local_rank_(local_rank),
        local_size_(local_size),
        timeout_s_(timeout_s),
        roll_call_(roll_call) {
    MPI_Comm_rank(mpi_, &rank_);
    MPI_Comm_size(mpi_, &size_);
    world_ranks_ = world_ranks_of(mpi_, size_);
    device_ = placed_device(local_rank_, local_size_);
    CUDA_CHECK(cudaSetDevice(device_));
    const ncclUniqueId id = bootstrap_id<ncclUniqueId>(mpi_, fmt::format("NCCL communicator '{}'", name_), [] {
      ncclUniqueId made;
      NCCL_CHECK(ncclGetUniqueId(&made));
      return made;
    });
    // Blocking calls whatever NCCL_COMM_BLOCKING says: every NCCL_CHECK here expects ncclSuccess, not ncclInProgress.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    NCCL_CHECK(ncclCommInitRankConfig(&nccl_, size_, id, rank_, &config));
    // Non-blocking: no implicit synchronisation with the compute stream, only events (stream_order.h).
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&device_waited_, cudaEventDisableTiming));
    // Stream-ordered, so that freeing it at teardown never synchronises the device (a plain cudaFree may, and would
    // wait for another communicator's kernel that never ends).
    CUDA_CHECK(cudaMallocAsync(&barrier_buf_, sizeof(int), stream_));
  }

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (std::uncaught_exceptions() > 0) {
      // Unwinding from a failure on its way to fail_job, which ends every rank (MPI_Abort). Aborting here can wait
      // for good: ncclCommAbort unmaps NCCL's buffers, which synchronises the device, and another communicator's
      // kernel (or the compute stream waiting for it, Work::wait_on_device) may never finish. So nothing is
      // destroyed or freed; the process ends and the driver takes it all back.
      new std::vector<Tensor>(std::move(abandoned_));
      return;
    }
    if (!broken_ && drained(timeout_s_)) {
      ncclCommDestroy(nccl_);
    } else {
      ncclCommAbort(nccl_);
      if (!drained(kAbortDrainS)) new std::vector<Tensor>(std::move(abandoned_));  // still written: kept for good
    }
    abandoned_.clear();  // NCCL is done with them: completed, or aborted and drained above
    cudaFreeAsync(barrier_buf_, stream_);
    cudaEventDestroy(ready_);
    cudaEventDestroy(device_waited_);
    cudaStreamDestroy(stream_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&mpi_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const RollCallHooks* roll_call() const { return roll_call_; }
  void mark_broken() { broken_ = true; }
  // Whether the stream has finished all its work within `timeout_s` (an error on it is not finished).
  bool drained(double timeout_s) {
    cudaError_t e = cudaErrorNotReady;
    poll_until([&] { return (e = cudaStreamQuery(stream_)) != cudaErrorNotReady; }, deadline_after(timeout_s));
    return e == cudaSuccess;
  }
  // An operation that never completes hands its buffers over (see the header comment).
  void abandon(std::vector<Tensor> buffers) {
    mark_broken();
    for (Tensor& t : buffers) abandoned_.push_back(std::move(t));
  }
  // Before the compute stream is made to wait for another of this
  // communicator's operations (Work::wait_on_device): the previous one it
  // waited for must have finished within the timeout. That keeps the host at
  // most one such operation ahead of the device (it would otherwise run on
  // until the launch queue or NCCL's work FIFO blocks it, without a deadline),
  // and a transfer that never completes fails here, naming this group. Then
  // `device_waited_` marks everything issued on this communicator so far.
  void before_device_wait(const std::string& what, double timeout_s) {
    if (device_wait_pending_) {
      // NCCL's own error ends the wait at once, as in NcclWork::test: a failed peer leaves the kernel running.
      // Answered while it polls and while its own roll call asks (as MpiWork::wait).
      HookedWaitingIn waiting(roll_call_, describe_nccl_wait(what, name_, /*behind_previous=*/true));
      cudaError_t e = cudaErrorNotReady;
      poll_until(
          [&] {
            hooked_answer(roll_call_);
            if ((e = cudaEventQuery(device_waited_)) != cudaErrorNotReady) return true;
            check_async_error();
            return false;
          },
          deadline_after(timeout_s));
      if (e == cudaErrorNotReady) {
        mark_broken();
        LATTICE_FAIL(
            "{} on {}: the operation before it, which the compute stream waits for, has not finished after "
            "{} s (a rank that never joined it, or a hung kernel before it); runtime.comm_timeout_s is the "
            "limit{}",
            what, group(), timeout_s, hooked_roll_call(roll_call_, world_ranks_, timeout_s));
      }
      if (e != cudaSuccess) mark_broken();
      CUDA_CHECK(e);
      check_async_error();
    }
    CUDA_CHECK(cudaEventRecord(device_waited_, stream_));
    device_wait_pending_ = true;
  }

  void check_async_error() {
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(nccl_, &async));
    if (async == ncclSuccess || async == ncclInProgress) return;
    mark_broken();  // its operations never complete: abort at teardown
    NCCL_CHECK(async);
  }

  WorkPtr all_reduce(Tensor& t, const CollectiveOptions& o) override {
    NcclType ty = checked(t, "all_reduce", /*reduce=*/true);
    return started("all_reduce", o.timeout_s, {t}, [&] {
      NCCL_CHECK(ncclAllReduce(t.raw(), t.raw(), count(t, ty), ty.type, nccl_op(o.op), nccl_, stream_));
    });
  }

  WorkPtr all_gather(Tensor& out, const Tensor& in, const CollectiveOptions& o) override {
    NcclType ty = checked(in, "all_gather", false);
    checked(out, "all_gather", false);
    LATTICE_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * size_,
                  "all_gather on {}: out ({} {}) must hold {} x in ({} {})", group(), out.numel(),
                  dtype_name(out.dtype()), size_, in.numel(), dtype_name(in.dtype()));
    return started("all_gather", o.timeout_s, {in, out},
                   [&] { NCCL_CHECK(ncclAllGather(in.raw(), out.raw(), count(in, ty), ty.type, nccl_, stream_)); });
  }

  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const CollectiveOptions& o) override {
    NcclType ty = checked(in, "reduce_scatter", true);
    checked(out, "reduce_scatter", true);
    LATTICE_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * size_,
                  "reduce_scatter on {}: in ({} {}) must hold {} x out ({} {})", group(), in.numel(),
                  dtype_name(in.dtype()), size_, out.numel(), dtype_name(out.dtype()));
    return started("reduce_scatter", o.timeout_s, {in, out}, [&] {
      NCCL_CHECK(ncclReduceScatter(in.raw(), out.raw(), count(out, ty), ty.type, nccl_op(o.op), nccl_, stream_));
    });
  }

  WorkPtr broadcast(Tensor& t, int root, const CollectiveOptions& o) override {
    NcclType ty = checked(t, "broadcast", false);
    check_peer(root, "broadcast");
    return started("broadcast", o.timeout_s, {t},
                   [&] { NCCL_CHECK(ncclBroadcast(t.raw(), t.raw(), count(t, ty), ty.type, root, nccl_, stream_)); });
  }

  WorkPtr send(const Tensor& t, int peer, const P2POptions& o) override {
    return batch_send_recv({P2POp{P2POp::Kind::send, t, peer, o.tag}}, o.timeout_s);
  }

  WorkPtr recv(Tensor& t, int peer, const P2POptions& o) override {
    return batch_send_recv({P2POp{P2POp::Kind::recv, t, peer, o.tag}}, o.timeout_s);
  }

  WorkPtr batch_send_recv(const std::vector<P2POp>& ops, double timeout_s) override {
    CUDA_CHECK(cudaSetDevice(device_));  // checked() sets it too, but an empty list has no tensor to check
    std::string what;
    std::vector<Tensor> keep;
    for (const P2POp& p : ops) {
      const bool is_send = p.kind == P2POp::Kind::send;
      checked(p.tensor, is_send ? "send" : "recv", false);
      check_peer(p.peer, is_send ? "send" : "recv");
      what += fmt::format("{}{}", what.empty() ? "" : ", ", describe_p2p(is_send, p.peer, world_ranks_));
      keep.push_back(p.tensor);
    }
    auto enqueue = [&] {
      NCCL_CHECK(ncclGroupStart());
      try {
        for (const P2POp& p : ops) {
          NcclType ty = nccl_type(p.tensor.dtype());
          size_t n = count(p.tensor, ty);
          if (p.kind == P2POp::Kind::send) {
            NCCL_CHECK(ncclSend(p.tensor.raw(), n, ty.type, p.peer, nccl_, stream_));
          } else {
            NCCL_CHECK(ncclRecv(p.tensor.raw(), n, ty.type, p.peer, nccl_, stream_));
          }
        }
      } catch (...) {
        ncclGroupEnd();  // a group left open would defer every later NCCL call of this thread
        throw;
      }
      NCCL_CHECK(ncclGroupEnd());
    };
    return started(ops.size() == 1 ? what : "batch_send_recv (" + what + ")", timeout_s, std::move(keep), enqueue);
  }

  WorkPtr barrier(const CollectiveOptions& o) override {
    CUDA_CHECK(cudaSetDevice(device_));
    return started("barrier", o.timeout_s, {}, [&] {
      NCCL_CHECK(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, nccl_, stream_));
    });
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    LATTICE_CHECK(color >= 0, "split of {} into '{}': color {} must be >= 0", group(), name, color);
    MPI_Comm sub = MPI_COMM_NULL;
    LATTICE_CHECK(MPI_Comm_split(mpi_, color, key, &sub) == MPI_SUCCESS, "split of {}: MPI_Comm_split failed", group());
    return std::make_unique<NcclCommunicator>(sub, name, local_rank_, local_size_, timeout_s_, roll_call_);
  }

  std::string group() const { return describe_group(name_, world_ranks_); }

 private:
  NcclType checked(const Tensor& t, const char* op, bool reduce) {
    LATTICE_CHECK(t.defined() && t.device().is_cuda() && t.device().index == device_,
                  "{} on {}: NcclCommunicator moves memory of cuda:{}, the tensor is on {}", op, group(), device_,
                  t.defined() ? t.device().str() : "nothing (undefined)");
    NcclType ty = nccl_type(t.dtype());
    LATTICE_CHECK(!reduce || ty.reduces, "{} on {}: NCCL does not reduce dtype {}", op, group(), dtype_name(t.dtype()));
    CUDA_CHECK(cudaSetDevice(device_));
    return ty;
  }

  static size_t count(const Tensor& t, NcclType ty) { return size_t(t.numel()) * ty.scale; }

  void check_peer(int peer, const char* op) const {
    LATTICE_CHECK(peer >= 0 && peer < size_, "{}: peer {} is outside {} of size {}", op, peer, group(), size_);
  }

  // Enqueues the NCCL calls after the compute stream's work (stream_order.h)
  // and returns the Work that polls their completion. On a failure the
  // buffers go as the header comment says and the error propagates.
  template <typename Enqueue>
  WorkPtr started(std::string what, double timeout_s, std::vector<Tensor> keep, Enqueue&& enqueue) {
    LATTICE_CHECK(!broken_, "{} on {}: the communicator is broken by an earlier failure (a timeout or NCCL error)",
                  what, group());
    auto work =
        std::make_unique<NcclWork>(*this, std::move(what), timeout_s > 0 ? timeout_s : timeout_s_, std::move(keep));
    CudaEvents events;
    enqueue_after_compute(events, kComputeStream, stream_, ready_, work->event(), enqueue, [&](EnqueueFailure f) {
      std::vector<Tensor> buffers = work->take_buffers();
      if (f == EnqueueFailure::after_issue) abandon(std::move(buffers));
    });
    return work;
  }

  MPI_Comm mpi_;
  std::string name_;
  int local_rank_, local_size_;
  double timeout_s_;
  const RollCallHooks* roll_call_;            // the lattice binary's roll call (roll_call_hooks.h); null: none
  static constexpr double kAbortDrainS = 10;  // how long teardown waits for aborted kernels to exit
  int rank_ = 0, size_ = 1, device_ = 0;
  std::vector<int> world_ranks_;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;          // recorded on the compute stream before each operation
  cudaEvent_t device_waited_ = nullptr;  // this stream's work up to the last wait_on_device (before_device_wait)
  bool device_wait_pending_ = false;     // device_waited_ has been recorded
  void* barrier_buf_ = nullptr;
  bool broken_ = false;
  std::vector<Tensor> abandoned_;  // buffers of operations that never complete; released when this goes
};

NcclWork::NcclWork(NcclCommunicator& comm, std::string what, double timeout_s, std::vector<Tensor> keep)
    : comm_(&comm), what_(std::move(what)), timeout_s_(timeout_s), keep_(std::move(keep)) {
  CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));  // recorded by NcclCommunicator::started
}

NcclWork::~NcclWork() {
  // Dropped without wait(): fine if it has finished; an unfinished operation
  // still owns its buffers, so they are kept alive for good.
  if (!done_ && error_.empty() && !keep_.empty() && cudaEventQuery(event_) != cudaSuccess)
    new std::vector<Tensor>(std::move(keep_));
  cudaEventDestroy(event_);
}

bool NcclWork::test() {
  if (!error_.empty()) return false;  // timed out: it never completes
  if (done_) return true;
  hooked_answer(comm_->roll_call());
  cudaError_t e = cudaEventQuery(event_);
  if (e == cudaSuccess) {
    done_ = true;
    keep_.clear();
    return true;
  }
  if (e != cudaErrorNotReady) {
    comm_->mark_broken();
    CUDA_CHECK(e);
  }
  comm_->check_async_error();
  return false;
}

void NcclWork::wait() {
  LATTICE_CHECK(error_.empty(), "{}", error_);
  if (done_) return;
  // Answered while it polls (test() answers) and while its own roll call asks, as MpiWork::wait.
  HookedWaitingIn waiting(comm_->roll_call(), describe_nccl_wait(what_, comm_->name(), /*behind_previous=*/false));
  if (poll_until([&] { return test(); }, deadline_after(timeout_s_))) return;
  const bool p2p = what_.rfind("send", 0) == 0 || what_.rfind("recv", 0) == 0;
  error_ = fmt::format("{} {} {} {}{}", what_, p2p ? "of" : "on", comm_->group(), describe_timeout(timeout_s_),
                       hooked_roll_call(comm_->roll_call(), comm_->world_ranks(), timeout_s_));
  comm_->abandon(std::move(keep_));  // the communicator is aborted, not destroyed, when it goes
  LATTICE_FAIL("{}", error_);
}

// The compute stream waits for `done` (stream_order.h, step 4); the host goes
// on, but no further than this communicator's previous device-waited
// operation, which must have finished (before_device_wait: the deadline and
// the error naming the group are there). The kept buffers are released at
// once: every later use of them, a cudaFreeAsync included, is on the compute
// stream after that wait. A transfer that never completes also stalls the
// compute stream, which the backend's next host wait reports at its deadline.
void NcclWork::wait_on_device() {
  LATTICE_CHECK(error_.empty(), "{}", error_);
  if (test()) return;                          // finished (test() also reports an asynchronous NCCL error)
  CUDA_CHECK(cudaSetDevice(comm_->device()));  // cudaStreamLegacy is the current device's
  comm_->before_device_wait(what_, timeout_s_);
  CudaEvents events;
  compute_waits_for(events, kComputeStream, event_);
  keep_.clear();
}

}  // namespace

}  // namespace lattice::comm

extern "C" __attribute__((visibility("default"))) lattice::comm::Communicator* lattice_nccl_communicator_create(
    void* mpi_comm, const char* name, int local_rank, int local_size, double timeout_s,
    const lattice::comm::RollCallHooks* roll_call) {
  MPI_Comm parent;
  std::memcpy(&parent, &mpi_comm, sizeof(MPI_Comm));
  MPI_Comm dup = MPI_COMM_NULL;
  LATTICE_CHECK(MPI_Comm_dup(parent, &dup) == MPI_SUCCESS, "NCCL communicator '{}': MPI_Comm_dup failed", name);
  return new lattice::comm::NcclCommunicator(dup, name, local_rank, local_size, timeout_s, roll_call);
}
