#include "mesh/process_group_mesh.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace lattice::mesh {

namespace {

constexpr Axis kAxes[] = {Axis::tp, Axis::dp, Axis::pp};

std::string order_str(const std::vector<Axis>& order) {
  std::string s;
  for (Axis a : order) s += fmt::format("{}{}", s.empty() ? "" : ", ", axis_name(a));
  return "[" + s + "]";
}

void check_order(const std::vector<Axis>& order) {
  for (size_t i = 0; i < order.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      LATTICE_CHECK(order[i] != order[j], "parallel.order: axis '{}' appears twice in {}; list each of tp, dp, pp once",
                    axis_name(order[i]), order_str(order));
  for (Axis a : kAxes)
    LATTICE_CHECK(std::find(order.begin(), order.end(), a) != order.end(),
                  "parallel.order: {} lacks {}; list each of tp, dp, pp once, fastest-varying first", order_str(order),
                  axis_name(a));
}

}  // namespace

std::string_view axis_name(Axis a) {
  switch (a) {
    case Axis::tp:
      return "tp";
    case Axis::dp:
      return "dp";
    case Axis::pp:
      return "pp";
  }
  return "?";
}

Axis axis_from_name(std::string_view name) {
  for (Axis a : kAxes)
    if (axis_name(a) == name) return a;
  LATTICE_FAIL("parallel.order: unknown axis '{}' (expected tp, dp or pp)", name);
}

std::vector<Axis> default_order() { return {Axis::tp, Axis::dp, Axis::pp}; }

ProcessGroupMesh::ProcessGroupMesh(MeshSizes sizes, int world_size, std::vector<Axis> order)
    : order_(std::move(order)) {
  check_order(order_);
  LATTICE_CHECK(world_size >= 1, "parallel: the job has {} ranks", world_size);
  LATTICE_CHECK(sizes.tp >= 1 && sizes.pp >= 1 && sizes.dp >= 0,
                "parallel: tp ({}), pp ({}) must be at least 1 and dp ({}) at least 1 (or 0: world / (tp * pp))",
                sizes.tp, sizes.pp, sizes.dp);
  if (sizes.dp == 0) {
    LATTICE_CHECK(world_size % (sizes.tp * sizes.pp) == 0,
                  "parallel: the job has {} ranks, which tp ({}) * pp ({}) = {} does not divide", world_size, sizes.tp,
                  sizes.pp, sizes.tp * sizes.pp);
    sizes.dp = world_size / (sizes.tp * sizes.pp);
  }
  LATTICE_CHECK(sizes.tp * sizes.pp * sizes.dp == world_size,
                "parallel: tp ({}) * pp ({}) * dp ({}) = {}, but the job "
                "has {} ranks",
                sizes.tp, sizes.pp, sizes.dp, sizes.tp * sizes.pp * sizes.dp, world_size);
  tp_size_ = sizes.tp;
  pp_size_ = sizes.pp;
  dp_size_ = sizes.dp;
}

int ProcessGroupMesh::stride(Axis a) const {
  int s = 1;
  for (Axis b : order_) {
    if (b == a) return s;
    s *= size(b);
  }
  return s;
}

Coord ProcessGroupMesh::coord(int rank) const {
  LATTICE_CHECK(rank >= 0 && rank < world_size(), "mesh: rank {} is outside [0, {})", rank, world_size());
  Coord c;
  for (Axis a : order_) {
    c[a] = rank % size(a);
    rank /= size(a);
  }
  return c;
}

int ProcessGroupMesh::rank(const Coord& c) const {
  int r = 0;
  for (Axis a : kAxes) {
    LATTICE_CHECK(c[a] >= 0 && c[a] < size(a), "mesh: {} coordinate {} is outside [0, {})", axis_name(a), c[a],
                  size(a));
    r += c[a] * stride(a);
  }
  return r;
}

std::vector<int> ProcessGroupMesh::ranks_along(Axis axis, const Coord& c) const {
  std::vector<int> out;
  Coord k = c;
  for (int i = 0; i < size(axis); ++i) {
    k[axis] = i;
    out.push_back(rank(k));
  }
  return out;
}

std::vector<int> ProcessGroupMesh::tie_ranks(const Coord& c) const {
  Coord first = c, last = c;
  first.pp = 0;
  last.pp = pp_size_ - 1;
  if (pp_size_ == 1) return {rank(first)};
  return {rank(first), rank(last)};
}

std::vector<int> ProcessGroupMesh::tp_pp_ranks(const Coord& c) const {
  std::vector<int> out;
  for (int r = 0; r < world_size(); ++r)
    if (coord(r).dp == c.dp) out.push_back(r);
  return out;
}

std::string ProcessGroupMesh::describe() const {
  std::string s = fmt::format("mesh tp={} pp={} dp={} order {}\n", tp_size_, pp_size_, dp_size_, order_str(order_));
  s += "rank    tp  dp  pp\n";
  for (int r = 0; r < world_size(); ++r) {
    Coord c = coord(r);
    s += fmt::format("{:<6} {:>3} {:>3} {:>3}\n", r, c.tp, c.dp, c.pp);
  }
  return s;
}

int ProcessGroupMesh::this_rank() const {
  LATTICE_CHECK(world_.valid(), "mesh: this layout has no groups (build it with ProcessGroupMesh::create)");
  return world_.rank();
}

comm::Group& ProcessGroupMesh::checked(comm::Group& g) {
  LATTICE_CHECK(g.valid(), "mesh: this layout has no groups (build it with ProcessGroupMesh::create)");
  return g;
}

ProcessGroupMesh ProcessGroupMesh::create(comm::Group world, MeshSizes sizes, std::vector<Axis> order) {
  LATTICE_CHECK(world.valid(), "mesh: create() needs a world communicator");
  ProcessGroupMesh m(sizes, world.size(), std::move(order));
  const int me = world.rank();
  const Coord c = m.coord(me);
  auto along = [&](Axis a) {
    Coord first = c;
    first[a] = 0;
    return comm::Group(world.comm().split(m.rank(first), c[a], std::string(axis_name(a))));
  };
  // Every rank makes the same splits in the same order (each is collective over world).
  m.tp_ = along(Axis::tp);
  m.dp_ = along(Axis::dp);
  m.pp_ = along(Axis::pp);
  const bool end_stage = c.pp == 0 || c.pp == m.pp_size_ - 1;
  Coord first_stage = c;
  first_stage.pp = 0;
  const int tie_color = end_stage ? m.rank(first_stage) : m.world_size() + me;
  m.tie_ = comm::Group(world.comm().split(tie_color, c.pp, "tie"));
  m.tp_pp_ = comm::Group(world.comm().split(c.dp, me, "tp_pp"));
  m.world_ = std::move(world);
  return m;
}

}  // namespace lattice::mesh
