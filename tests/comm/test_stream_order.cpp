// The ordering of a device communicator's work against compute
// (comm/stream_order.h), run over a CPU model of CUDA streams and events: an
// operation on a stream follows the previous one on that stream and whatever
// its stream was made to wait for; an event captures the last operation of
// the stream it is recorded on. This checks the host-side sequence NCCL
// runs; it does not stand in for a GPU.
#include <gtest/gtest.h>

#include <map>
#include <set>
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

TEST(StreamOrder, TheModelSeesAMissingWait) {
  // Without the wait on `ready` the transfer would not follow the kernels: the check above can fail.
  StreamModel m;
  const int grads = m.launch(kCompute);
  m.record(kReady, kCompute);
  const int reduce = m.launch(kComm);
  EXPECT_FALSE(m.after(reduce, grads));
}
