#include "comm/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>

#include "comm/mpi_check.h"

namespace lattice::comm {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  LATTICE_CHECK(!initialized, "MPI is already initialised: create one MpiRuntime per process, in main");
  int provided = MPI_THREAD_SINGLE;
  // MULTIPLE lets comm::MpiProgress drive the progress engine from its own
  // thread; everything else calls MPI from the main thread only.
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  LATTICE_CHECK(provided >= MPI_THREAD_FUNNELED, "the MPI library offers thread level {}, Lattice needs FUNNELED",
                provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  set_error_rank(world_rank_);

  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_Comm_free(&node);
}

MpiRuntime::~MpiRuntime() {
  if (mpi_active()) MPI_Finalize();
}

void MpiRuntime::abort_job(int code) {
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
  std::_Exit(code == 0 ? 1 : code);
}

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace lattice::comm
