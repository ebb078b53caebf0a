// ProcessGroupMesh's pure layout in one process, against hand-written tables.
#include <gtest/gtest.h>

#include "mesh/process_group_mesh.h"

namespace lattice::mesh {
namespace {

using V = std::vector<int>;

struct Case {
  MeshSizes sizes;
  std::vector<Axis> order;
  std::vector<Coord> coords;  // coords[rank], written out by hand
};

// rank = c[a0] + S[a0] * (c[a1] + S[a1] * c[a2]) for order (a0, a1, a2).
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {{2, 2, 2},
       {Axis::tp, Axis::dp, Axis::pp},
       {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}}},
      {{2, 3, 1}, {Axis::pp, Axis::tp, Axis::dp}, {{0, 0, 0}, {0, 0, 1}, {0, 0, 2}, {1, 0, 0}, {1, 0, 1}, {1, 0, 2}}},
      {{1, 2, 3}, {Axis::dp, Axis::pp, Axis::tp}, {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 0, 1}, {0, 1, 1}, {0, 2, 1}}},
      {{4, 1, 2},
       {Axis::tp, Axis::dp, Axis::pp},
       {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {0, 1, 0}, {1, 1, 0}, {2, 1, 0}, {3, 1, 0}}},
      {{2, 2, 1}, {Axis::dp, Axis::pp, Axis::tp}, {{0, 0, 0}, {0, 0, 1}, {1, 0, 0}, {1, 0, 1}}},
  };
  return c;
}

TEST(ProcessGroupMesh, CoordMatchesTablesAndRankIsItsInverse) {
  for (const Case& c : cases()) {
    ProcessGroupMesh m(c.sizes, int(c.coords.size()), c.order);
    for (int r = 0; r < m.world_size(); ++r) {
      EXPECT_EQ(m.coord(r), c.coords[size_t(r)]) << m.describe() << "rank " << r;
      EXPECT_EQ(m.rank(m.coord(r)), r);
    }
  }
}

TEST(ProcessGroupMesh, RanksAlongAxesMatchTables) {
  // tp=2 pp=2 dp=2, default order; rank 5 = (tp 1, dp 0, pp 1).
  ProcessGroupMesh a({2, 2, 2}, 8);
  EXPECT_EQ(a.ranks_along(Axis::tp, a.coord(5)), (V{4, 5}));
  EXPECT_EQ(a.ranks_along(Axis::dp, a.coord(5)), (V{5, 7}));
  EXPECT_EQ(a.ranks_along(Axis::pp, a.coord(5)), (V{1, 5}));
  EXPECT_EQ(a.tie_ranks(a.coord(6)), (V{2, 6}));
  EXPECT_EQ(a.tp_pp_ranks(a.coord(5)), (V{0, 1, 4, 5}));
  EXPECT_EQ(a.tp_pp_ranks(a.coord(2)), (V{2, 3, 6, 7}));
  // tp=2 pp=3 dp=1, order pp, tp, dp; rank 4 = (tp 1, dp 0, pp 1).
  ProcessGroupMesh b({2, 3, 1}, 6, {Axis::pp, Axis::tp, Axis::dp});
  EXPECT_EQ(b.ranks_along(Axis::tp, b.coord(4)), (V{1, 4}));
  EXPECT_EQ(b.ranks_along(Axis::pp, b.coord(4)), (V{3, 4, 5}));
  EXPECT_EQ(b.ranks_along(Axis::dp, b.coord(4)), (V{4}));
  EXPECT_EQ(b.tie_ranks(b.coord(4)), (V{3, 5}));
  // pp == 1: the tie group is the rank itself.
  ProcessGroupMesh c({4, 1, 2}, 8);
  EXPECT_EQ(c.tie_ranks(c.coord(6)), (V{6}));
  EXPECT_EQ(c.ranks_along(Axis::dp, c.coord(6)), (V{2, 6}));
}

TEST(ProcessGroupMesh, DefaultOrderKeepsTpRanksConsecutive) {
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 3})
      for (int dp : {1, 2}) {
        ProcessGroupMesh m({tp, pp, dp}, tp * pp * dp);
        for (int r = 0; r < m.world_size(); ++r) {
          V along = m.ranks_along(Axis::tp, m.coord(r));
          ASSERT_EQ(int(along.size()), tp);
          for (int i = 0; i < tp; ++i) EXPECT_EQ(along[size_t(i)], r - m.coord(r).tp + i);
          // Every group holds the rank itself at its coordinate.
          for (Axis a : {Axis::tp, Axis::dp, Axis::pp})
            EXPECT_EQ(m.ranks_along(a, m.coord(r))[size_t(m.coord(r)[a])], r);
        }
      }
}

TEST(ProcessGroupMesh, DpDefaultsToWorldOverTpTimesPp) {
  ProcessGroupMesh m({2, 2, 0}, 12);
  EXPECT_EQ(m.size(Axis::dp), 3);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(ProcessGroupMesh, BadInputGetsOneClearLine) {
  EXPECT_EQ(error_of([] {
              ProcessGroupMesh({2, 2, 3}, 8);
            }),
            "parallel: tp (2) * pp (2) * dp (3) = 12, but the job has 8 ranks");
  EXPECT_EQ(error_of([] {
              ProcessGroupMesh({2, 4, 0}, 6);
            }),
            "parallel: the job has 6 ranks, which tp (2) * pp (4) = 8 does not divide");
  EXPECT_EQ(error_of([] { axis_from_name("xp"); }), "parallel.order: unknown axis 'xp' (expected tp, dp or pp)");
  EXPECT_EQ(error_of([] {
              ProcessGroupMesh({1, 1, 1}, 1, {Axis::tp, Axis::tp, Axis::pp});
            }),
            "parallel.order: axis 'tp' appears twice in [tp, tp, pp]; list each of tp, dp, pp once");
  EXPECT_EQ(error_of([] {
              ProcessGroupMesh({1, 1, 1}, 1, {Axis::tp, Axis::dp});
            }),
            "parallel.order: [tp, dp] lacks pp; list each of tp, dp, pp once, fastest-varying first");
  EXPECT_NE(error_of([] { ProcessGroupMesh({0, 1, 1}, 1); }).find("tp (0)"), std::string::npos);
  ProcessGroupMesh m({2, 1, 1}, 2);
  EXPECT_THROW(m.coord(2), Error);
  EXPECT_THROW(m.rank({2, 0, 0}), Error);
  EXPECT_THROW(m.tp(), Error);  // a pure layout has no groups
}

TEST(ProcessGroupMesh, AxisNamesRoundTrip) {
  for (Axis a : {Axis::tp, Axis::dp, Axis::pp}) EXPECT_EQ(axis_from_name(axis_name(a)), a);
  EXPECT_EQ(default_order(), (std::vector<Axis>{Axis::tp, Axis::dp, Axis::pp}));
}

TEST(ProcessGroupMesh, DescribeListsEveryRank) {
  ProcessGroupMesh m({2, 2, 1}, 4);
  const std::string d = m.describe();
  EXPECT_NE(d.find("mesh tp=2 pp=2 dp=1 order [tp, dp, pp]"), std::string::npos) << d;
  EXPECT_NE(d.find("3        1   0   1"), std::string::npos) << d;
}

}  // namespace
}  // namespace lattice::mesh
