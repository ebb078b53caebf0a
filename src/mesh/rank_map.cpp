// format_rank_map: gathers every rank's host name and device over the world
// group (comm::all_gather_strings) and lays out the table.
#include <fmt/format.h>

#include <algorithm>

#include "comm/gather_strings.h"
#include "core/error.h"
#include "mesh/process_group_mesh.h"

namespace lattice::mesh {

std::string format_rank_map(ProcessGroupMesh& mesh, const std::string& device) {
  comm::Group& world = mesh.world();
  std::vector<std::string> hosts, devices;
  size_t host_w = 4;
  for (const std::string& rec : comm::all_gather_strings(world, host_name() + '\0' + device)) {
    const size_t nul = rec.find('\0');
    hosts.push_back(rec.substr(0, nul));
    devices.push_back(rec.substr(nul + 1));
    host_w = std::max(host_w, hosts.back().size());
  }
  std::string s = fmt::format("rank map: tp={} pp={} dp={} ({} ranks)\n", mesh.size(Axis::tp), mesh.size(Axis::pp),
                              mesh.size(Axis::dp), world.size());
  s += fmt::format("{:<6} {:<{}}  {:>3} {:>3} {:>3}  {}\n", "rank", "host", host_w, "tp", "dp", "pp", "device");
  for (int r = 0; r < world.size(); ++r) {
    Coord c = mesh.coord(r);
    s += fmt::format("{:<6} {:<{}}  {:>3} {:>3} {:>3}  {}\n", r, hosts[size_t(r)], host_w, c.tp, c.dp, c.pp,
                     devices[size_t(r)]);
  }
  return s;
}

}  // namespace lattice::mesh
