#include "comm/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>

#include "comm/mpi_check.h"
#include "comm/roll_call.h"

namespace lattice::comm {

namespace {
// What node_local() and mpi_progress() report: the one MpiRuntime's, while it lives.
NodeLocal g_node_local;
MpiProgress* g_progress = nullptr;
}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv, const MpiRuntimeOptions& options) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  LATTICE_CHECK(!initialized, "MPI is already initialised: create one MpiRuntime per process, in main");
  const bool progress = options.progress_interval.count() > 0;
  const int wanted = progress ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
  int provided = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Init_thread(argc, argv, wanted, &provided));
  LATTICE_CHECK(provided >= MPI_THREAD_FUNNELED, "the MPI library offers thread level {}, Lattice needs FUNNELED",
                provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  set_error_rank(world_rank_);

  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_.rank));
  MPI_CHECK(MPI_Comm_size(node, &local_.size));
  MPI_Comm_free(&node);
  g_node_local = local_;

  roll_call_open();
  if (progress) progress_ = std::make_unique<MpiProgress>(options.progress_interval);  // checks MULTIPLE
  g_progress = progress_.get();
}

MpiRuntime::~MpiRuntime() {
  g_progress = nullptr;
  g_node_local = {};
  progress_.reset();  // its thread calls MPI: joined before MPI ends
  if (mpi_active()) roll_call_close();
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

NodeLocal node_local() { return g_node_local; }

MpiProgress* mpi_progress() { return g_progress; }

}  // namespace lattice::comm
