// comm::node_local() under mpirun: MpiRuntime's node-local rank
// (MPI_COMM_TYPE_SHARED) numbers the ranks of each node in world-rank order,
// the rule the world's host names give where every node has its own name (a
// real cluster, Slurm, the namespaced hosts of scripts/ci/multinode-smoke.sh,
// which give each its own UTS name): checked against that rule on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/gather_strings.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"

using namespace lattice;

TEST(NodeLocal, NumbersTheRanksOfEachHostInWorldOrder) {
  comm::Group world(comm::make_world_communicator(60));
  const std::vector<std::string> hosts = comm::all_gather_strings(world, host_name());
  int rank = 0, size = 0;
  for (int r = 0; r < world.size(); ++r) {
    if (hosts[size_t(r)] != hosts[size_t(world.rank())]) continue;
    if (r < world.rank()) ++rank;
    ++size;
  }
  const comm::NodeLocal local = comm::node_local();
  EXPECT_EQ(local.rank, rank) << "on " << hosts[size_t(world.rank())];
  EXPECT_EQ(local.size, size);
}
