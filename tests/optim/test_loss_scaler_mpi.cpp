// The joint overflow decision under mpirun: only the last rank sees an
// overflow, yet every rank skips the same steps and backs off identically,
// step by step (each rank's state is all-gathered and compared with the
// expected trajectory); over groups, only the group holding the overflowing
// rank skips. Expected values depend on the world size only through which
// rank is last.
#include <gtest/gtest.h>

#include <set>

#include "comm/mpi_communicator.h"
#include "optim/loss_scaler.h"

namespace lattice::optim {
namespace {

// Every rank's (scale, good_steps) over `group`, as rank-major pairs.
std::vector<double> gather_states(comm::Communicator& group, const LossScalerState& s) {
  Tensor mine = Tensor::from<double>({s.scale, double(s.good_steps)}, {2});
  Tensor all = Tensor::zeros({2 * int64_t(group.size())}, DType::f64);
  group.all_gather(all, mine, {})->wait();
  return {all.data<double>(), all.data<double>() + all.numel()};
}

TEST(LossScalerMpi, OnlyTheLastRankOverflowsAndEveryRankSkips) {
  auto world = comm::make_world_communicator(60);
  const int P = world->size(), last = P - 1;
  ASSERT_GE(P, 2) << "run under mpirun with 2 or more ranks";
  LossScaler scaler({.initial_scale = 1024, .growth_interval = 2});
  const std::set<int> overflow_steps = {2, 3, 6};
  // After each step: skipped?, scale, good_steps.
  struct Expect {
    bool skip;
    double scale;
    int64_t good;
  };
  const Expect expected[] = {{false, 1024, 1}, {false, 2048, 0}, {true, 1024, 0}, {true, 512, 0},
                             {false, 512, 1},  {false, 1024, 0}, {true, 512, 0},  {false, 512, 1}};
  for (int step = 0; step < 8; ++step) {
    const bool local = world->rank() == last && overflow_steps.count(step);
    const bool found = any_rank_found_inf(*world, local);
    EXPECT_EQ(found, overflow_steps.count(step) == 1) << "step " << step;
    EXPECT_EQ(scaler.update(found), expected[step].skip) << "step " << step;
    const std::vector<double> all = gather_states(*world, scaler.state());
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(all[2 * size_t(r)], expected[step].scale) << "rank " << r << " after step " << step;
      EXPECT_EQ(all[2 * size_t(r) + 1], double(expected[step].good)) << "rank " << r << " after step " << step;
    }
  }
}

TEST(LossScalerMpi, OnlyTheGroupOfTheOverflowingRankSkips) {
  auto world = comm::make_world_communicator(60);
  const int P = world->size(), last = P - 1;
  // Pairs of consecutive ranks (a lone last rank when P is odd), and single ranks.
  for (int width : {2, 1}) {
    auto group = world->split(world->rank() / width, world->rank(), "group");
    const bool holds_last = world->rank() / width == last / width;
    LossScaler scaler({.initial_scale = 1024, .growth_interval = 2});
    const bool found = any_rank_found_inf(*group, world->rank() == last);
    EXPECT_EQ(found, holds_last) << "width " << width;
    EXPECT_EQ(scaler.update(found), holds_last);
    EXPECT_EQ(scaler.state(), (holds_last ? LossScalerState{512, 0} : LossScalerState{1024, 1}));
  }
}

}  // namespace
}  // namespace lattice::optim
