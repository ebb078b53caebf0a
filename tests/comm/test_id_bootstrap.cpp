// comm::bootstrap_id under mpirun (2 and 4 ranks), the host side of the NCCL
// communicator's set-up: rank 0 of a group makes the id and every rank of
// that group gets its bytes, on the world and on split subgroups at once; a
// failure on rank 0 reaches every rank as one error with rank 0's reason
// (no rank is left waiting), and the group stays usable afterwards.
#include <gtest/gtest.h>
#include <mpi.h>

#include <stdexcept>
#include <string>

#include "comm/id_bootstrap.h"
#include "core/error.h"

namespace lattice::comm {
namespace {

struct FakeId {  // the shape of ncclUniqueId: opaque bytes
  char internal[128];
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// An id whose every byte says which world rank made it.
FakeId id_of(int maker) {
  FakeId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = char(maker * 31 + int(i));
  return id;
}

void expect_made_by(const FakeId& id, int maker) {
  const FakeId want = id_of(maker);
  for (size_t i = 0; i < sizeof(id.internal); ++i) ASSERT_EQ(id.internal[i], want.internal[i]) << "byte " << i;
}

TEST(IdBootstrap, EveryRankGetsRankZerosId) {
  int calls = 0;
  const FakeId id = bootstrap_id<FakeId>(MPI_COMM_WORLD, "test", [&] {
    ++calls;
    return id_of(world_rank());
  });
  expect_made_by(id, 0);
  EXPECT_EQ(calls, world_rank() == 0 ? 1 : 0);  // only rank 0 makes one
}

TEST(IdBootstrap, SubgroupsEachGetTheirOwnRootsId) {
  // Two groups, even and odd world ranks; each group's rank 0 is world rank 0 or 1.
  MPI_Comm half;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half), MPI_SUCCESS);
  const FakeId id = bootstrap_id<FakeId>(half, "half", [] { return id_of(world_rank()); });
  expect_made_by(id, world_rank() % 2);
  MPI_Comm_free(&half);
}

TEST(IdBootstrap, AFailureOnRankZeroIsEveryRanksError) {
  std::string caught;
  try {
    bootstrap_id<FakeId>(MPI_COMM_WORLD, "NCCL communicator 'tp'", []() -> FakeId {
      throw std::runtime_error("ncclGetUniqueId failed: unhandled system error");
    });
  } catch (const Error& e) {
    caught = e.what();
  }
  EXPECT_NE(caught.find("NCCL communicator 'tp'"), std::string::npos) << caught;
  EXPECT_NE(caught.find("rank 0 could not make the id"), std::string::npos) << caught;
  EXPECT_NE(caught.find("unhandled system error"), std::string::npos) << caught;
  // Nobody was left inside a collective: the world still works.
  int one = 1, sum = 0;
  ASSERT_EQ(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(sum, size);
}

TEST(IdBootstrap, ALongReasonIsCutToFit) {
  const std::string reason(2000, 'x');
  std::string caught;
  try {
    bootstrap_id<FakeId>(MPI_COMM_WORLD, "long", [&]() -> FakeId { throw std::runtime_error(reason); });
  } catch (const Error& e) {
    caught = e.what();
  }
  EXPECT_NE(caught.find(std::string(400, 'x')), std::string::npos);
  EXPECT_LT(caught.size(), 700u);
}

}  // namespace
}  // namespace lattice::comm
