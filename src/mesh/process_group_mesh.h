// ProcessGroupMesh: the job's ranks as a (tp, dp, pp) grid, and this rank's
// groups along it.
//
// Layout: `order` lists the axes fastest-varying first (default tp, dp, pp:
// tp ranks are consecutive, so tp stays inside a node, and pp is outermost).
// With sizes S and order (a0, a1, a2):
//   rank = c[a0] + S[a0] * (c[a1] + S[a1] * c[a2])
// coord(), rank(), ranks_along() and tie_ranks() are pure arithmetic, usable
// without MPI (plan, tests).
//
// Groups (create() only): tp, dp, pp hold the ranks that differ from this one
// along that axis alone, ordered by that coordinate, so a group rank IS the
// coordinate (tp().rank() == coord().tp). tie holds the first and last pp
// stage of this rank's (tp, dp) column (ranks that hold tied parameters);
// ranks of middle stages get a group of themselves. tp_pp holds every rank of
// this rank's dp replica (grad norm over model shards), ordered by world rank.
// world is the communicator the mesh was created from.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"

namespace lattice::mesh {

enum class Axis { tp, dp, pp };

std::string_view axis_name(Axis a);
// "tp", "dp", "pp"; anything else throws "parallel.order: unknown axis 'xp' ...".
Axis axis_from_name(std::string_view name);
std::vector<Axis> default_order();  // {tp, dp, pp}

struct MeshSizes {
  int tp = 1, pp = 1, dp = 0;  // dp 0: world / (tp * pp)
};

struct Coord {
  int tp = 0, dp = 0, pp = 0;
  int operator[](Axis a) const { return a == Axis::tp ? tp : a == Axis::dp ? dp : pp; }
  int& operator[](Axis a) { return a == Axis::tp ? tp : a == Axis::dp ? dp : pp; }
  bool operator==(const Coord&) const = default;
};

class ProcessGroupMesh {
 public:
  // A pure layout over `world_size` ranks. Throws one-line errors for sizes
  // below 1, a product that is not the world size (naming every factor), an
  // order with a repeated or missing axis.
  ProcessGroupMesh(MeshSizes sizes, int world_size, std::vector<Axis> order = default_order());

  // The layout plus this rank's groups, split from `world` (collective over
  // world; the mesh takes ownership of it). world.rank() is this rank.
  static ProcessGroupMesh create(comm::Group world, MeshSizes sizes, std::vector<Axis> order = default_order());

  // ---- pure layout ----
  int size(Axis a) const { return a == Axis::tp ? tp_size_ : a == Axis::dp ? dp_size_ : pp_size_; }
  int world_size() const { return tp_size_ * dp_size_ * pp_size_; }
  const std::vector<Axis>& order() const { return order_; }
  Coord coord(int rank) const;
  int rank(const Coord& c) const;
  // World ranks of the group along `axis` through `c`, by that coordinate.
  std::vector<int> ranks_along(Axis axis, const Coord& c) const;
  // World ranks of the first and last pp stage of c's (tp, dp) column; one rank when pp == 1.
  std::vector<int> tie_ranks(const Coord& c) const;
  // World ranks of c's dp replica (all tp and pp coordinates), ascending.
  std::vector<int> tp_pp_ranks(const Coord& c) const;
  // "mesh tp=2 pp=2 dp=1 order [tp, dp, pp]" and one line per rank.
  std::string describe() const;

  // ---- this rank (create() only) ----
  bool has_groups() const { return world_.valid(); }
  int this_rank() const;
  Coord this_coord() const { return coord(this_rank()); }
  comm::Group& world() { return checked(world_); }
  comm::Group& tp() { return checked(tp_); }
  comm::Group& dp() { return checked(dp_); }
  comm::Group& pp() { return checked(pp_); }
  comm::Group& tie() { return checked(tie_); }
  comm::Group& tp_pp() { return checked(tp_pp_); }
  comm::Group& group(Axis a) { return a == Axis::tp ? tp() : a == Axis::dp ? dp() : pp(); }

 private:
  comm::Group& checked(comm::Group& g);
  int stride(Axis a) const;

  int tp_size_ = 1, dp_size_ = 1, pp_size_ = 1;
  std::vector<Axis> order_;
  comm::Group world_, tp_, dp_, pp_, tie_, tp_pp_;
};

// The start-up rank map: one line per world rank with its host, mesh
// coordinates and device. Collective over mesh.world() (host names and
// devices are gathered from every rank); every rank gets the text, rank 0
// prints it. `device` is this rank's device ("cpu", "cuda:0").
std::string format_rank_map(ProcessGroupMesh& mesh, const std::string& device);

}  // namespace lattice::mesh
