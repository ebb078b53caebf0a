// MpiRuntime: the process's MPI lifetime (init in the constructor, finalize in
// the destructor) and the job-wide facts main needs: world rank and size, the
// node-local rank (for choosing a GPU) and abort_job.
//
// Invariants: at most one MpiRuntime per process, created by main before any
// communicator and destroyed after all of them. Thread level: MULTIPLE is
// requested, FUNNELED is required. Only the thread that created the runtime
// makes MPI calls on Lattice's communicators; the one other caller is
// comm::MpiProgress's thread (MPI_Iprobe on MPI_COMM_SELF, only under
// MULTIPLE). The constructor records the
// world rank for error reports (lattice::set_error_rank).
//
// Failure policy: main catches an exception, prints one line for its rank and
// calls abort_job, which ends every rank of the job (MPI_Abort on
// COMM_WORLD), so peers blocked in a collective do not wait for a timeout.
#pragma once

namespace lattice::comm {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // rank among the ranks on this node
  int local_size() const { return local_size_; }

  // Ends the whole job with `code` (MPI_Abort on COMM_WORLD). Never returns.
  [[noreturn]] static void abort_job(int code);

 private:
  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1;
};

// True between MPI_Init and MPI_Finalize.
bool mpi_active();

}  // namespace lattice::comm
