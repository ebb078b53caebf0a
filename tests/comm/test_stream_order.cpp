// The ordering of a device communicator's work against compute
// (comm/stream_order.h), run over a CPU model of CUDA streams and events: an
// operation on a stream follows the previous one on that stream and whatever
// its stream was made to wait for; an event captures the last operation of
// the stream it is recorded on. This checks the host-side sequence NCCL
// runs; it does not stand in for a GPU.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/stream_order.h"

namespace {

class StreamModel {
 public:
  using Stream = int;
  using Event = int;

  // An operation enqueued on `s`; returns its id.
  int launch(Stream s) {
    const int id = int(deps_.size());
    std::set<int> d = pending_[s];
    pending_[s].clear();
    if (last_.count(s)) d.insert(last_[s]);
    deps_.push_back(d);
    last_[s] = id;
    return id;
  }
  void record(Event e, Stream s) { captured_[e] = last_.count(s) ? std::set<int>{last_[s]} : std::set<int>{}; }
  void wait(Stream s, Event e) { pending_[s].insert(captured_[e].begin(), captured_[e].end()); }

  // True when operation a can start only after b has finished.
  bool after(int a, int b) const {
    for (int d : deps_[size_t(a)])
      if (d == b || after(d, b)) return true;
    return false;
  }
  const std::set<int>& captured(Event e) { return captured_[e]; }

 private:
  std::vector<std::set<int>> deps_;
  std::map<Stream, int> last_;
  std::map<Stream, std::set<int>> pending_;
  std::map<Event, std::set<int>> captured_;
};

constexpr int kCompute = 0, kComm = 1, kReady = 0, kDone = 1, kDone2 = 2;

}  // namespace

TEST(StreamOrder, TransfersFollowEarlierKernelsAndOverlapLaterOnes) {
  StreamModel m;
  const int grads = m.launch(kCompute);  // the bucket's gradients
  int reduce = -1;
  lattice::comm::enqueue_after_compute(m, kCompute, kComm, kReady, kDone, [&] { reduce = m.launch(kComm); });
  const int rest_of_backward = m.launch(kCompute);

  EXPECT_TRUE(m.after(reduce, grads)) << "the all-reduce may read unfinished gradients";
  EXPECT_FALSE(m.after(rest_of_backward, reduce)) << "compute waits for communication: no overlap";
  EXPECT_FALSE(m.after(reduce, rest_of_backward)) << "communication waits for later compute";
  EXPECT_EQ(m.captured(kDone), std::set<int>{reduce}) << "Work's event does not mark the transfer's end";

  // The next bucket: after its own gradients, and after the first transfer (one stream per communicator).
  const int grads2 = m.launch(kCompute);
  int reduce2 = -1;
  lattice::comm::enqueue_after_compute(m, kCompute, kComm, kReady, kDone2, [&] { reduce2 = m.launch(kComm); });
  EXPECT_TRUE(m.after(reduce2, grads2));
  EXPECT_TRUE(m.after(reduce2, rest_of_backward));
  EXPECT_TRUE(m.after(reduce2, reduce));
  EXPECT_EQ(m.captured(kDone2), std::set<int>{reduce2});
}

// Work::wait_on_device (tp's all-reduce of a row-parallel output): the next
// layer's kernel follows the transfer without the host waiting, and so does
// an operation another communicator starts after it (it waits on `ready`,
// recorded on the compute stream after the wait).
TEST(StreamOrder, AWaitOnTheDeviceOrdersLaterKernelsAndOtherCommunicators) {
  StreamModel m;
  const int partial = m.launch(kCompute);  // the row-parallel matmul's partial sum
  int reduce = -1;
  lattice::comm::enqueue_after_compute(m, kCompute, kComm, kReady, kDone, [&] { reduce = m.launch(kComm); });
  lattice::comm::compute_waits_for(m, kCompute, kDone);
  const int next_layer = m.launch(kCompute);
  EXPECT_TRUE(m.after(reduce, partial));
  EXPECT_TRUE(m.after(next_layer, reduce)) << "the next kernel may read the sum before the all-reduce wrote it";

  constexpr int kOtherComm = 2, kOtherReady = 3, kOtherDone = 4;
  int send = -1;
  lattice::comm::enqueue_after_compute(m, kCompute, kOtherComm, kOtherReady, kOtherDone,
                                       [&] { send = m.launch(kOtherComm); });
  EXPECT_TRUE(m.after(send, reduce)) << "a pp send may read the activation before tp's all-reduce wrote it";
  EXPECT_TRUE(m.after(send, next_layer));

  // A second wait on the same transfer changes nothing; kernels before the wait stay free of it.
  StreamModel n;
  const int before = n.launch(kCompute);
  int r = -1;
  lattice::comm::enqueue_after_compute(n, kCompute, kComm, kReady, kDone, [&] { r = n.launch(kComm); });
  const int overlapped = n.launch(kCompute);
  lattice::comm::compute_waits_for(n, kCompute, kDone);
  lattice::comm::compute_waits_for(n, kCompute, kDone);
  const int after_wait = n.launch(kCompute);
  EXPECT_FALSE(n.after(overlapped, r)) << "kernels issued before the wait must overlap the transfer";
  EXPECT_TRUE(n.after(after_wait, r));
  EXPECT_TRUE(n.after(after_wait, overlapped));
  EXPECT_TRUE(n.after(r, before));
}

TEST(StreamOrder, TheModelSeesAMissingWait) {
  // Without the wait on `ready` the transfer would not follow the kernels: the check above can fail.
  StreamModel m;
  const int grads = m.launch(kCompute);
  m.record(kReady, kCompute);
  const int reduce = m.launch(kComm);
  EXPECT_FALSE(m.after(reduce, grads));
}

namespace {

// Streams and events whose `record` on a chosen stream fails, as cudaEventRecord can.
struct FailingApi {
  using Stream = int;
  using Event = int;
  int fail_record_on = -1;
  void record(Event, Stream s) {
    if (s == fail_record_on) throw std::runtime_error("record failed on stream " + std::to_string(s));
  }
  void wait(Stream, Event) {}
};

// One enqueue: whether it ran, the failures reported, and the error that propagated ("" when none).
struct Outcome {
  std::string error;
  std::vector<lattice::comm::EnqueueFailure> reported;
  bool enqueued = false;
};
Outcome run(FailingApi api, bool enqueue_fails) {
  Outcome o;
  try {
    lattice::comm::enqueue_after_compute(
        api, kCompute, kComm, kReady, kDone,
        [&] {
          o.enqueued = true;
          if (enqueue_fails) throw std::runtime_error("ncclAllReduce failed: unhandled cuda error");
        },
        [&](lattice::comm::EnqueueFailure f) { o.reported.push_back(f); });
  } catch (const std::runtime_error& e) {
    o.error = e.what();
  }
  return o;
}

}  // namespace

// NCCL's enqueue failure path (comm/nccl/nccl_communicator.cpp releases the
// kept buffers at once before_issue, and hands them to the aborted
// communicator after_issue): each failing step is reported once, with how far
// the operation got, and its own error propagates unchanged.
TEST(StreamOrder, AFailedEnqueueSaysHowFarItGotAndKeepsTheError) {
  using lattice::comm::EnqueueFailure;
  const Outcome ok = run(FailingApi{}, false);
  EXPECT_TRUE(ok.enqueued);
  EXPECT_TRUE(ok.reported.empty());
  EXPECT_EQ(ok.error, "");

  const Outcome ready = run(FailingApi{.fail_record_on = kCompute}, false);
  EXPECT_FALSE(ready.enqueued) << "NCCL calls issued after the ready event failed";
  EXPECT_EQ(ready.reported, std::vector<EnqueueFailure>{EnqueueFailure::before_issue});
  EXPECT_EQ(ready.error, "record failed on stream 0");

  const Outcome nccl = run(FailingApi{}, true);
  EXPECT_EQ(nccl.reported, std::vector<EnqueueFailure>{EnqueueFailure::after_issue});
  EXPECT_EQ(nccl.error, "ncclAllReduce failed: unhandled cuda error");

  const Outcome done = run(FailingApi{.fail_record_on = kComm}, false);
  EXPECT_TRUE(done.enqueued);
  EXPECT_EQ(done.reported, std::vector<EnqueueFailure>{EnqueueFailure::after_issue});
  EXPECT_EQ(done.error, "record failed on stream 1");
}
