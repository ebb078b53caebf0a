// Helper program for test_mpi_runtime, built on tests/support/mpi_test_main.cpp:
// the last rank fails an assertion and leaves the test while the others wait
// in an all_reduce it never joins. The test main must end the job at once.
#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"

TEST(FailingTestChild, LastRankFailsWhileOthersWaitInACollective) {
  auto world = lattice::comm::make_world_communicator(300);
  if (world->rank() == world->size() - 1) {
    ADD_FAILURE() << "deliberate assertion failure on rank " << world->rank();
    return;
  }
  lattice::Tensor t = lattice::Tensor::zeros({4}, lattice::DType::f32);
  world->all_reduce(t, {})->wait();
}
