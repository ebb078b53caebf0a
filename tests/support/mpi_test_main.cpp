// main() for tests that run under mpirun (add_mpi_test): initialises MPI,
// runs GoogleTest on every rank, and makes a failure on any rank fail the job
// without hanging the others.
//
// - Rank 0 prints GoogleTest's usual output; other ranks print only their
//   failed assertions, prefixed with their rank.
// - A test that failed on a rank aborts the whole job when it ends on that
//   rank (MPI_Abort, exit code 1): the other ranks may be blocked in a
//   collective the failed rank will never join, so waiting is not an option.
// - MPI starts as the lattice binary starts it: the progress thread (and
//   MPI_THREAD_MULTIPLE) only when $LATTICE_MPI_PROGRESS_US asks for it.
// - Otherwise every rank's result is combined (MPI_Allreduce of "failed"),
//   so the process exit code is non-zero if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "comm/mpi_runtime.h"

namespace {

class AbortOnFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed() || rank_ == 0) return;  // rank 0's default printer reports its own
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.message());
    std::fflush(stderr);
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::fprintf(stderr, "[rank %d] %s.%s failed; aborting the job so the other ranks do not hang\n", rank_,
                 info.test_suite_name(), info.name());
    std::fflush(stderr);
    std::fflush(stdout);
    lattice::comm::MpiRuntime::abort_job(1);
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  // As the lattice binary starts MPI: the progress thread (and MPI_THREAD_MULTIPLE) only when
  // $LATTICE_MPI_PROGRESS_US asks for it (test_mpi_progress sets it).
  lattice::comm::MpiRuntime mpi(&argc, &argv, {.progress_interval = lattice::comm::mpi_progress_interval()});
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (mpi.world_rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new AbortOnFailure(mpi.world_rank()));
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}
