// How run_schedule waits for its P2P batches, one process, against a
// recording communicator (no data moves): each batch is waited on the device
// (Work::wait_on_device: the compute stream on a GPU, the host on the CPU)
// before the next action runs; the host waits for it (Work::wait, with the
// deadline) only after starting the next batch, and for the last before
// returning; a hang is named at the batch that is stuck. The values that
// cross the stages are checked under mpirun by test_interpreter.cpp.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "pipeline/interpreter.h"
#include "support/error_text.h"

namespace lattice::pipeline {
namespace {

using test::error_text;

// What the communicator saw, in order: "start k", "device k", "wait k"
// (k: the batch's index), and the stage's "forward"/"backward".
struct Log {
  std::vector<std::string> events;
  std::vector<bool> device_waited, waited;
  std::map<const void*, int> received_by;  // a recv buffer -> its batch
  int fail_wait = -1;                      // the batch whose wait() times out
  size_t index(const std::string& e) const {
    for (size_t i = 0; i < events.size(); ++i)
      if (events[i] == e) return i;
    return events.size();
  }
};

class RecordedWork final : public comm::Work {
 public:
  RecordedWork(Log& log, int k) : log_(log), k_(k) {}
  void wait() override {
    if (k_ == log_.fail_wait) LATTICE_FAIL("recv from rank 1 of group pp timed out after 1 s");
    log_.events.push_back("wait " + std::to_string(k_));
    log_.waited[size_t(k_)] = true;
  }
  bool test() override { return log_.waited[size_t(k_)]; }
  void wait_on_device() override {
    log_.events.push_back("device " + std::to_string(k_));
    log_.device_waited[size_t(k_)] = true;
  }

 private:
  Log& log_;
  int k_;
};

class RecordingComm final : public comm::Communicator {
 public:
  RecordingComm(Log& log, int rank) : log_(log), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  comm::WorkPtr batch_send_recv(const std::vector<comm::P2POp>& ops, double) override {
    const int k = int(log_.waited.size());
    log_.waited.push_back(false);
    log_.device_waited.push_back(false);
    log_.events.push_back("start " + std::to_string(k));
    for (const comm::P2POp& p : ops)
      if (p.kind == comm::P2POp::Kind::recv) log_.received_by[p.tensor.raw()] = k;
    return std::make_unique<RecordedWork>(log_, k);
  }
  comm::WorkPtr all_reduce(Tensor&, const comm::CollectiveOptions&) override { return unused(); }
  comm::WorkPtr all_gather(Tensor&, const Tensor&, const comm::CollectiveOptions&) override { return unused(); }
  comm::WorkPtr reduce_scatter(Tensor&, const Tensor&, const comm::CollectiveOptions&) override { return unused(); }
  comm::WorkPtr broadcast(Tensor&, int, const comm::CollectiveOptions&) override { return unused(); }
  comm::WorkPtr send(const Tensor&, int, const comm::P2POptions&) override { return unused(); }
  comm::WorkPtr recv(Tensor&, int, const comm::P2POptions&) override { return unused(); }
  comm::WorkPtr barrier(const comm::CollectiveOptions&) override { return unused(); }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override {
    LATTICE_FAIL("RecordingComm: split is not used here");
  }

 private:
  static comm::WorkPtr unused() { LATTICE_FAIL("RecordingComm: only batch_send_recv is used here"); }
  Log& log_;
  int rank_;
  std::string name_ = "pp";
  std::vector<int> ranks_ = {0, 1};
};

struct TwoStages {
  Log log;
  comm::Group pp;
  PipelineStageManager stages;
  P2P p2p;
  TwoStages(int stage, int v, int m)
      : pp(std::make_unique<RecordingComm>(log, stage)), stages(layout(v, m), stage, {0, 1}), p2p(pp, stages, 1) {}
  static StageLayout layout(int v, int m) {
    StageConfig c;
    c.pp = 2;
    c.virtual_stages = v;
    c.interleaved = v > 1;
    c.microbatches = m;
    c.n_layer = 2 * v;
    return make_stage_layout(c);
  }
  // Forward and backward check that the batch that received their input was
  // waited on the device first.
  StageCallbacks callbacks() {
    StageCallbacks cb;
    cb.activation_shape = {1, 2, 3};
    auto received = [this](const Tensor& t, const char* what) {
      if (!t.defined()) return;
      auto it = log.received_by.find(t.raw());
      ASSERT_NE(it, log.received_by.end()) << what << ": its input was not received";
      EXPECT_TRUE(log.device_waited[size_t(it->second)]) << what << " ran before batch " << it->second << " was waited";
    };
    cb.forward = [this, received](int, int, const Tensor& in, Tensor&) {
      received(in, "forward");
      log.events.push_back("forward");
    };
    cb.backward = [this, received](int, int, const Tensor& dout, Tensor&) {
      received(dout, "backward");
      log.events.push_back("backward");
    };
    return cb;
  }
};

// The order of waits for the plans of both stages of a two-stage pipeline.
void check_waits(const Plan& plan, TwoStages& s) {
  StageCallbacks cb = s.callbacks();
  run_schedule(plan, s.p2p, cb, {.timeout_s = 1});
  const Log& log = s.log;
  const int n = int(log.waited.size());
  ASSERT_GT(n, 0);
  for (int k = 0; k < n; ++k) {
    SCOPED_TRACE("batch " + std::to_string(k));
    const size_t start = log.index("start " + std::to_string(k)), device = log.index("device " + std::to_string(k)),
                 wait = log.index("wait " + std::to_string(k));
    ASSERT_LT(device, log.events.size());
    ASSERT_LT(wait, log.events.size()) << "the host never waited for it";
    EXPECT_EQ(device, start + 1 + (k > 0)) << "waited on the device right after it started (and the previous batch)";
    if (k + 1 < n) {
      // The host waits for batch k only after batch k + 1 has started, before its device wait.
      EXPECT_EQ(wait, log.index("start " + std::to_string(k + 1)) + 1);
    } else {
      EXPECT_EQ(wait, log.events.size() - 1) << "the last batch is waited before run_schedule returns";
    }
  }
}

TEST(RunScheduleWaits, EachBatchIsWaitedOnTheDeviceAndByTheHostOneBatchLater) {
  for (int stage : {0, 1}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    {
      SCOPED_TRACE("1f1b");
      TwoStages s(stage, 1, 4);
      check_waits(plan_1f1b(2, stage, 4), s);
    }
    {
      SCOPED_TRACE("gpipe");
      TwoStages s(stage, 1, 4);
      check_waits(plan_gpipe(2, stage, 4), s);
    }
    {
      SCOPED_TRACE("interleaved");
      TwoStages s(stage, 2, 4);
      check_waits(plan_interleaved_1f1b(2, stage, 4, 2), s);
    }
    {
      SCOPED_TRACE("forward only");
      TwoStages s(stage, 1, 4);
      check_waits(plan_forward_only(2, stage, 4), s);
    }
  }
}

// The first action of P2P batch k of `plan` (fused actions form one batch).
const Action& batch_action(const Plan& plan, int k) {
  int seen = -1;
  for (size_t i = 0; i < plan.size(); ++i)
    if (is_p2p(plan[i].kind) && !(i > 0 && plan[i].fused && is_p2p(plan[i - 1].kind)) && ++seen == k) return plan[i];
  ADD_FAILURE() << "no batch " << k;
  return plan.front();
}

TEST(RunScheduleWaits, AHangIsNamedAtTheBatchThatIsStuckNotTheNextOne) {
  for (int stage : {0, 1}) {
    for (int stuck : {0, 2}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + ", stuck batch " + std::to_string(stuck));
      TwoStages s(stage, 1, 4);
      s.log.fail_wait = stuck;
      const Plan plan = plan_1f1b(2, stage, 4);
      StageCallbacks cb = s.callbacks();
      const std::string e = error_text([&] { run_schedule(plan, s.p2p, cb, {.timeout_s = 1}); });
      EXPECT_HAS(e, "pipeline stage " + std::to_string(stage) + " (world rank " + std::to_string(stage) +
                        ") is blocked at plan action");
      EXPECT_HAS(e, describe_action(batch_action(plan, stuck)));
      EXPECT_HAS(e, "timed out after 1 s");
      // The batch after it had started: the host waits one batch behind.
      EXPECT_EQ(int(s.log.waited.size()), stuck + 2);
    }
  }
}

}  // namespace
}  // namespace lattice::pipeline
