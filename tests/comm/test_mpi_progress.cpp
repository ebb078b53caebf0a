// comm::MpiProgress and how MpiRuntime starts it, under mpirun. CTest runs
// this binary twice: test_mpi_progress_np2 with LATTICE_MPI_PROGRESS_US=20
// (the MPI test main starts MPI as the lattice binary does, so the runtime
// runs the thread at MPI_THREAD_MULTIPLE) and test_mpi_progress_off_np2
// without it (FUNNELED, no thread). With the thread:
//  - a non-blocking all-reduce large enough to need several rounds completes
//    while both ranks hold the thread and compute without a single MPI call
//    (without the thread Open MPI leaves it unfinished until the next call:
//    checked by hand with the hold() removed, which this test then fails);
//  - released, the thread makes no calls at all (it sleeps; a spinning thread
//    would take a core from the ranks), and held again it polls again: one
//    thread for the whole run.
// The parse of the variable is a pure function, tested on its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/mpi_communicator.h"
#include "comm/mpi_progress.h"
#include "comm/mpi_runtime.h"

using namespace lattice;
using namespace std::chrono_literals;

namespace {

// Busy work with no MPI call in it, for `s` seconds.
double spin(double s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  double x = 1.0;
  while (std::chrono::steady_clock::now() < end)
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

// The job's progress thread, or why this run has none.
comm::MpiProgress* thread_or_skip_reason(std::string* why) {
  comm::MpiProgress* p = comm::mpi_progress();
  if (!p) *why = "LATTICE_MPI_PROGRESS_US is unset here; test_mpi_progress_np2 runs this with the thread";
  return p;
}

}  // namespace

TEST(MpiProgress, TheEnvironmentDecidesTheThreadLevelAndTheThread) {
  const auto interval = comm::mpi_progress_interval();
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (interval.count() > 0) {
    EXPECT_EQ(level, MPI_THREAD_MULTIPLE);
    ASSERT_NE(comm::mpi_progress(), nullptr);
    EXPECT_EQ(comm::mpi_progress()->interval(), interval);
  } else {
    EXPECT_EQ(level, MPI_THREAD_FUNNELED) << "no progress thread: MPI runs at the plain level";
    EXPECT_EQ(comm::mpi_progress(), nullptr);
  }
}

TEST(MpiProgress, CompletesAnAllReduceWhileTheRanksMakeNoMpiCalls) {
  std::string why;
  comm::MpiProgress* progress = thread_or_skip_reason(&why);
  if (!progress) GTEST_SKIP() << why;
  auto world = comm::make_world_communicator(60);
  const int64_t n = 4 << 20;  // 16 MiB of floats
  Tensor t = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = float(world->rank() + 1) * float(i % 7);
  world->barrier({})->wait();

  const long before = progress->polls();
  progress->hold();
  comm::WorkPtr work = world->all_reduce(t, {});
  EXPECT_GT(spin(1.5), 0.0);
  EXPECT_TRUE(work->test()) << "the all-reduce did not finish while the progress thread ran ("
                            << progress->polls() - before << " polls)";
  work->wait();
  progress->release();
  EXPECT_GT(progress->polls() - before, 10);
  const int p = world->size();
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(t.data<float>()[i], float(p * (p + 1) / 2) * float(i % 7));
}

TEST(MpiProgress, ReleasedItSleepsAndHeldAgainItPolls) {
  std::string why;
  comm::MpiProgress* progress = thread_or_skip_reason(&why);
  if (!progress) GTEST_SKIP() << why;
  std::this_thread::sleep_for(10ms);  // a poll in flight when the last holder let go
  const long idle = progress->polls();
  std::this_thread::sleep_for(200ms);  // 10000 intervals of 20 us
  EXPECT_EQ(progress->polls(), idle) << "the thread polled while nobody held it";
  for (int round = 0; round < 2; ++round) {
    progress->hold();
    progress->hold();  // holds nest
    progress->release();
    std::this_thread::sleep_for(100ms);
    const long held = progress->polls();
    EXPECT_GT(held, idle + 10) << "round " << round;
    progress->release();
    std::this_thread::sleep_for(10ms);
    const long after = progress->polls();
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(progress->polls(), after) << "round " << round << ": still polling after the last release";
  }
  EXPECT_THROW(progress->release(), Error);  // more releases than holds
}

TEST(MpiProgress, ParsesTheVariableOrFailsWithOneLine) {
  EXPECT_EQ(comm::parse_mpi_progress_us(nullptr).count(), 0);  // unset: off
  EXPECT_EQ(comm::parse_mpi_progress_us("").count(), 0);
  EXPECT_EQ(comm::parse_mpi_progress_us("0").count(), 0);
  EXPECT_EQ(comm::parse_mpi_progress_us("50").count(), 50);
  EXPECT_EQ(comm::parse_mpi_progress_us("1000000").count(), 1000000);
  for (const char* bad : {"fast", "50us", "-5", " 50", "50 ", "5.5", "1000001", "99999999999999999999999"}) {
    try {
      comm::parse_mpi_progress_us(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string m = e.message();
      EXPECT_NE(m.find("LATTICE_MPI_PROGRESS_US='" + std::string(bad) + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("[0, 1000000]"), std::string::npos) << m;
      EXPECT_NE(m.find("unset it"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}
