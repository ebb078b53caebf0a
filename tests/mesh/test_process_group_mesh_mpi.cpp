// ProcessGroupMesh::create under mpirun: for every (tp, pp, dp) whose product
// is the world size, and several orders, each group holds exactly the ranks
// the pure layout says, ordered by coordinate, and its collectives reach them.
#include <gtest/gtest.h>

#include <iterator>
#include <numeric>
#include <sstream>

#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "mesh/process_group_mesh.h"

namespace lattice::mesh {
namespace {

int world_size() { return comm::make_world_communicator(60)->size(); }

// Sum over `g` of each rank's world rank.
int sum_of_world_ranks(comm::Group& g, int world_rank) {
  Tensor t = Tensor::from<int32_t>({world_rank}, {1});
  g.all_reduce(t)->wait();
  return t.data<int32_t>()[0];
}

void check_group(comm::Group& g, const std::vector<int>& expected, int my_index, int me) {
  SCOPED_TRACE("group " + g.name());
  EXPECT_EQ(g.world_ranks(), expected);
  EXPECT_EQ(g.size(), int(expected.size()));
  EXPECT_EQ(g.rank(), my_index);
  EXPECT_EQ(sum_of_world_ranks(g, me), std::accumulate(expected.begin(), expected.end(), 0));
}

TEST(ProcessGroupMeshMpi, GroupsMatchThePureLayoutForEveryFactorisation) {
  const int n = world_size();
  const std::vector<std::vector<Axis>> orders = {
      default_order(), {Axis::pp, Axis::dp, Axis::tp}, {Axis::dp, Axis::tp, Axis::pp}};
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  int layouts = 0;
  for (int tp = 1; tp <= n; ++tp) {
    for (int pp = 1; tp * pp <= n; ++pp) {
      if (n % (tp * pp) != 0) continue;
      for (const auto& order : orders) {
        SCOPED_TRACE(fmt::format("tp={} pp={} order {}", tp, pp, int(order[0])));
        auto mesh = ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)), {tp, pp, 0}, order);
        const int me = mesh.this_rank();
        const Coord c = mesh.this_coord();
        EXPECT_EQ(mesh.size(Axis::dp), n / (tp * pp));
        for (Axis a : {Axis::tp, Axis::dp, Axis::pp}) check_group(mesh.group(a), mesh.ranks_along(a, c), c[a], me);
        const bool end_stage = c.pp == 0 || c.pp == pp - 1;
        if (end_stage) {
          check_group(mesh.tie(), mesh.tie_ranks(c), c.pp == 0 ? 0 : 1, me);
        } else {
          check_group(mesh.tie(), {me}, 0, me);
        }
        std::vector<int> replica = mesh.tp_pp_ranks(c);
        int idx = int(std::find(replica.begin(), replica.end(), me) - replica.begin());
        check_group(mesh.tp_pp(), replica, idx, me);
        check_group(mesh.world(), all, me, me);
        ++layouts;
      }
    }
  }
  EXPECT_GE(layouts, 3);  // at least tp=n, pp=n, dp=n
}

TEST(ProcessGroupMeshMpi, WrongProductIsOneClearLineOnEveryRank) {
  const int n = world_size();
  try {
    ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)), {n, 2, 1});
    FAIL() << "accepted tp * pp = 2 * world";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              fmt::format("parallel: tp ({}) * pp (2) * dp (1) = {}, but the job has {} ranks", n, 2 * n, n));
  }
}

TEST(ProcessGroupMeshMpi, RankMapNamesEveryRankHostCoordinatesAndDevice) {
  const int n = world_size();
  auto mesh = ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)), {n >= 2 ? 2 : 1, 1, 0});
  const std::string map = format_rank_map(mesh, fmt::format("cpu{}", mesh.this_rank()));
  // One line per rank after the two header lines: rank, host, tp, dp, pp, device.
  std::istringstream lines(map);
  std::string line;
  std::getline(lines, line);
  std::getline(lines, line);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(std::getline(lines, line)) << map;
    std::istringstream fields(line);
    std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
    Coord c = mesh.coord(r);
    std::vector<std::string> want = {std::to_string(r),    host_name(),          std::to_string(c.tp),
                                     std::to_string(c.dp), std::to_string(c.pp), fmt::format("cpu{}", r)};
    EXPECT_EQ(f, want) << map;
  }
}

}  // namespace
}  // namespace lattice::mesh
