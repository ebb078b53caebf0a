// A failing rank ends the job: runs abort_child under mpirun (2 and 4 ranks)
// and checks the exit status, the failing rank's message, and the time taken.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/mpi_runtime.h"

namespace {

struct JobRun {
  int status = -1;  // exit code of the `timeout` wrapper (124: it had to kill mpirun)
  std::string output;
  double seconds = 0;
};

JobRun run_job(const char* program, int np) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  std::string cmd = std::string("timeout 60 ") + LATTICE_MPIEXEC + " -np " + std::to_string(np) +
                    " --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 " + program + " 2>&1";
  JobRun run;
  auto start = std::chrono::steady_clock::now();
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return run;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), f)) run.output.append(buf, n);
  int st = pclose(f);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return run;
}

void expect_job_ends(int np) {
  JobRun run = run_job(LATTICE_ABORT_CHILD, np);
  SCOPED_TRACE(run.output);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.status, 124) << "mpirun still ran after 60 s: the job hung";
  const std::string msg = "deliberate failure on rank " + std::to_string(np - 1);
  EXPECT_NE(run.output.find(msg), std::string::npos);
  EXPECT_EQ(run.output.find("left the all_reduce"), std::string::npos);
  // mpirun takes ~1 s to start; the abort itself must not wait for any timeout (300 s here).
  EXPECT_LT(run.seconds, 15.0);
}

TEST(MpiRuntime, FailingRankEndsTwoRankJob) { expect_job_ends(2); }
TEST(MpiRuntime, FailingRankEndsFourRankJob) { expect_job_ends(4); }

// The MPI test main (tests/support/mpi_test_main.cpp): a failed assertion on
// one rank fails the job at once, with that rank's message, while the others
// sit in a collective.
TEST(MpiRuntime, FailedAssertionOnOneRankFailsTheMpiTestJob) {
  for (int np : {2, 4}) {
    JobRun run = run_job(LATTICE_FAILING_TEST_CHILD, np);
    SCOPED_TRACE(run.output);
    EXPECT_NE(run.status, 0);
    EXPECT_NE(run.status, 124) << "the test job hung";
    EXPECT_NE(run.output.find("deliberate assertion failure on rank " + std::to_string(np - 1)), std::string::npos);
    EXPECT_LT(run.seconds, 15.0);
  }
}

}  // namespace
