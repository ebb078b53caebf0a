// comm::MpiProgress under mpirun: a non-blocking all-reduce large enough to
// need several rounds completes while both ranks compute without making a
// single MPI call, because each rank's progress thread drives the engine.
// (Without the thread, Open MPI leaves it unfinished until the next call:
// checked by hand with the thread's interval set to 0, which this test then
// fails.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>

#include "comm/mpi_communicator.h"
#include "comm/mpi_progress.h"

using namespace lattice;

namespace {

// Busy work with no MPI call in it, for `s` seconds.
double spin(double s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  double x = 1.0;
  while (std::chrono::steady_clock::now() < end)
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

std::chrono::microseconds interval() {
  const char* s = std::getenv("TEST_PROGRESS_US");  // 0 shows the failure without the thread
  return std::chrono::microseconds(s ? std::atol(s) : 20);
}

}  // namespace

TEST(MpiProgress, CompletesAnAllReduceWhileTheRanksMakeNoMpiCalls) {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  ASSERT_EQ(level, MPI_THREAD_MULTIPLE) << "MpiRuntime asks for MPI_THREAD_MULTIPLE";
  auto world = comm::make_world_communicator(60);
  const int64_t n = 4 << 20;  // 16 MiB of floats
  Tensor t = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = float(world->rank() + 1) * float(i % 7);
  world->barrier({})->wait();

  comm::MpiProgress progress(interval());
  comm::WorkPtr work = world->all_reduce(t, {});
  EXPECT_GT(spin(1.5), 0.0);
  EXPECT_TRUE(work->test()) << "the all-reduce did not finish while the progress thread ran (" << progress.polls()
                            << " polls)";
  work->wait();
  EXPECT_TRUE(progress.active());
  EXPECT_GT(progress.polls(), 10);
  const int p = world->size();
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(t.data<float>()[i], float(p * (p + 1) / 2) * float(i % 7));
}

TEST(MpiProgress, ZeroIntervalStartsNoThread) {
  comm::MpiProgress off(std::chrono::microseconds(0));
  EXPECT_FALSE(off.active());
  EXPECT_EQ(off.polls(), 0);
}

TEST(MpiProgress, IntervalFromTheEnvironmentOrOneLine) {
  unsetenv("LATTICE_MPI_PROGRESS_US");
  EXPECT_EQ(comm::mpi_progress_interval().count(), 0);  // off by default
  setenv("LATTICE_MPI_PROGRESS_US", "50", 1);
  EXPECT_EQ(comm::mpi_progress_interval().count(), 50);
  for (const char* bad : {"fast", "50us", "-5"}) {
    setenv("LATTICE_MPI_PROGRESS_US", bad, 1);
    try {
      comm::mpi_progress_interval();
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("LATTICE_MPI_PROGRESS_US: '" + std::string(bad) + "'"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  unsetenv("LATTICE_MPI_PROGRESS_US");
}
