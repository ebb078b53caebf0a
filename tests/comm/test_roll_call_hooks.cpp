// The roll call as the shared libraries reach it (comm/roll_call_hooks.h):
// the helpers against a recording table, the NCCL waits' answer text, and,
// under mpirun, the binary's own table answering and asking on the roll call
// MpiRuntime opened (the path liblattice_nccl.so and liblattice_cuda.so take).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/describe.h"
#include "comm/roll_call.h"
#include "comm/roll_call_hooks.h"
#include "support/error_text.h"

namespace lattice::comm {
namespace {

// A table that records what the helpers call it with.
struct Recorded {
  std::string waiting_in;
  std::vector<std::string> waits;  // every value set, in order
  int answers = 0;
  std::vector<int> asked;
  double grace_s = -1;
  std::string heard = "roll call (0.5 s): no answer from world rank 3 (stopped, or busy outside communication)";
};
Recorded rec;

const RollCallHooks kRecording{[](std::string what) {
                                 rec.waits.push_back(what);
                                 return std::exchange(rec.waiting_in, std::move(what));
                               },
                               [] { ++rec.answers; },
                               [](const std::vector<int>& ranks, double grace_s) {
                                 rec.asked = ranks;
                                 rec.grace_s = grace_s;
                                 return rec.heard;
                               }};

TEST(RollCallHooks, WithoutHooksNothingIsCalledAndNothingAppended) {
  rec = {};
  {
    HookedWaitingIn waiting(nullptr, "all_reduce on group dp (NCCL)");
    hooked_answer(nullptr);
    EXPECT_EQ(hooked_roll_call(nullptr, {0, 1}, 0.5), "");
  }
  EXPECT_TRUE(rec.waits.empty());
  EXPECT_EQ(rec.answers, 0);
  EXPECT_TRUE(rec.asked.empty());
}

TEST(RollCallHooks, WaitingInIsSetAndRestoredNested) {
  rec = {};
  {
    HookedWaitingIn outer(&kRecording, "all_reduce on group dp (NCCL)");
    EXPECT_EQ(rec.waiting_in, "all_reduce on group dp (NCCL)");
    {
      HookedWaitingIn inner(&kRecording, "a copy to the host on cuda:0, for the compute stream");
      EXPECT_EQ(rec.waiting_in, "a copy to the host on cuda:0, for the compute stream");
    }
    EXPECT_EQ(rec.waiting_in, "all_reduce on group dp (NCCL)");
  }
  EXPECT_EQ(rec.waiting_in, "");
  EXPECT_EQ(rec.waits.size(), 4u);
}

TEST(RollCallHooks, AnswerIsForwarded) {
  rec = {};
  hooked_answer(&kRecording);
  hooked_answer(&kRecording);
  EXPECT_EQ(rec.answers, 2);
}

TEST(RollCallHooks, ATimeoutAsksTheRanksWithTheGraceAndAppendsTheReport) {
  rec = {};
  EXPECT_EQ(hooked_roll_call(&kRecording, {1, 3, 5}, 0.5), " — " + rec.heard);
  EXPECT_EQ(rec.asked, (std::vector<int>{1, 3, 5}));
  EXPECT_DOUBLE_EQ(rec.grace_s, 0.5);
  hooked_roll_call(&kRecording, {1}, 600);
  EXPECT_DOUBLE_EQ(rec.grace_s, 2.0);  // min(2 s, the timeout)
  hooked_roll_call(&kRecording, {1}, 0.01);
  EXPECT_DOUBLE_EQ(rec.grace_s, 0.1);  // at least 0.1 s
  rec.heard = "";                      // no roll call open, or no peers
  EXPECT_EQ(hooked_roll_call(&kRecording, {1}, 0.5), "");
}

TEST(RollCallHooks, NcclWaitsAnswerWithTheOperationTheGroupAndTheBackend) {
  EXPECT_EQ(describe_nccl_wait("all_reduce", "dp", false), "all_reduce on group dp (NCCL)");
  EXPECT_EQ(describe_nccl_wait("recv from rank 1 (world rank 5)", "pp", false),
            "recv from rank 1 (world rank 5) on group pp (NCCL)");
  EXPECT_EQ(describe_nccl_wait("all_gather", "tp", true), "all_gather on group tp (NCCL, for the operation before it)");
}

// Ranks other than 0 poll through the binary's table (as the libraries do)
// until rank 0, having asked through it, lets them go.
std::string ask_while_the_others_answer(const std::string& others_wait_in) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const RollCallHooks* hooks = &roll_call_hooks();
  std::string heard;
  if (r == 0) {
    std::vector<int> all;
    for (int q = 0; q < p; ++q) all.push_back(q);
    heard = hooked_roll_call(hooks, all, 1.0);
  }
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  {
    std::unique_ptr<HookedWaitingIn> waiting;
    if (r != 0 && !others_wait_in.empty()) waiting = std::make_unique<HookedWaitingIn>(hooks, others_wait_in);
    for (int done = 0; !done;) {
      hooked_answer(hooks);
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);  // nobody still answers the first round when the second asks
  return heard;
}

std::string others_phrase() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  std::vector<int> others;
  for (int q = 1; q < p; ++q) others.push_back(q);
  return fmt::format("world rank{} {}", others.size() == 1 ? "" : "s", rank_list(others));
}

TEST(RollCallHooks, TheBinarysTableAnswersAndAsksOnTheOpenRollCall) {
  int r = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  const std::string waiting = ask_while_the_others_answer(describe_nccl_wait("all_reduce", "dp", false));
  const std::string running = ask_while_the_others_answer("");  // the wait above has ended: restored
  if (r != 0) return;
  EXPECT_EQ(waiting, fmt::format(" — roll call (1 s): {}: waiting in all_reduce on group dp (NCCL)", others_phrase()));
  EXPECT_EQ(running, fmt::format(" — roll call (1 s): {}: running, not waiting on a communicator", others_phrase()));
}

}  // namespace
}  // namespace lattice::comm
