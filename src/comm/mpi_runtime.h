// MpiRuntime: the process's MPI lifetime (init in the constructor, finalize in
// the destructor) and the job-wide facts the rest of the process needs: world
// rank and size, the node-local rank (for choosing a GPU), the MPI progress
// thread, and abort_job.
//
// Invariants: at most one MpiRuntime per process, created by main before any
// communicator and destroyed after all of them. Thread level: FUNNELED (only
// the thread that created the runtime makes MPI calls on Lattice's
// communicators; OpenMP threads make none) unless the options turn the
// progress thread on, which makes MPI calls of its own (MPI_Iprobe on
// MPI_COMM_SELF) and so asks for, and requires, MULTIPLE. The constructor
// records the world rank for error reports (lattice::set_error_rank).
//
// Failure policy: main catches an exception, prints one line for its rank and
// calls abort_job, which ends every rank of the job (MPI_Abort on
// COMM_WORLD), so peers blocked in a collective do not wait for a timeout.
#pragma once

#include <chrono>
#include <memory>

#include "comm/mpi_progress.h"

namespace lattice::comm {

struct MpiRuntimeOptions {
  // > 0: start the progress thread (comm/mpi_progress.h) with this interval;
  // main reads it from $LATTICE_MPI_PROGRESS_US (mpi_progress_interval()).
  std::chrono::microseconds progress_interval{0};
};

// A rank's place among the ranks of its node, numbered in world-rank order.
struct NodeLocal {
  int rank = 0;  // this rank among the ranks on its node
  int size = 1;  // ranks on its node
};

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv, const MpiRuntimeOptions& options = {});
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_.rank; }  // rank among the ranks on this node
  int local_size() const { return local_.size; }

  // Ends the whole job with `code` (MPI_Abort on COMM_WORLD). Never returns.
  [[noreturn]] static void abort_job(int code);

 private:
  int world_rank_ = 0, world_size_ = 1;
  NodeLocal local_;
  std::unique_ptr<MpiProgress> progress_;  // options.progress_interval > 0
};

// True between MPI_Init and MPI_Finalize.
bool mpi_active();

// The running MpiRuntime's node-local rank: MPI_COMM_TYPE_SHARED, the node as
// the MPI library sees it (mpirun's daemons, Slurm's PMIx). It equals the
// numbering of the world's host names wherever every node has its own name,
// as on real clusters, under Slurm and in scripts/ci/multinode-smoke.sh's
// namespaced hosts. {0, 1} when no MpiRuntime runs (a test on a self group).
NodeLocal node_local();

// The running MpiRuntime's progress thread; null when it is off or no
// MpiRuntime runs. Callers hold() it while they have operations to overlap
// (booster/grad_buckets.h) and release() it after.
MpiProgress* mpi_progress();

}  // namespace lattice::comm
