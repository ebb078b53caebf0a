// Helper program for test_mpi_runtime: the last rank throws while the others
// wait in an all_reduce it never joins. main does what the lattice binary's
// main does: print the error for this rank, then end the whole job.
#include <cstdio>

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"

int main(int argc, char** argv) {
  lattice::comm::MpiRuntime mpi(&argc, &argv);
  try {
    auto world = lattice::comm::make_world_communicator(300);
    if (world->rank() == world->size() - 1) LATTICE_FAIL("deliberate failure on rank {}", world->rank());
    lattice::Tensor t = lattice::Tensor::zeros({4}, lattice::DType::f32);
    world->all_reduce(t, {})->wait();
    std::printf("rank %d left the all_reduce: the failing rank did not end the job\n", world->rank());
    return 0;
  } catch (const lattice::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.describe().c_str());
    std::fflush(stderr);
    lattice::comm::MpiRuntime::abort_job(3);
  }
}
