// format_rank_map: gathers every rank's host name and device over the world
// group (fixed-size byte records carried as i32) and lays out the table.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "mesh/process_group_mesh.h"

namespace lattice::mesh {

namespace {

constexpr int kRecordInts = 32;  // 128 bytes: host name, '\0', device, '\0'

Tensor pack_record(const std::string& host, const std::string& device) {
  Tensor t = Tensor::zeros({kRecordInts}, DType::i32);
  std::string text = host.substr(0, 100) + '\0' + device.substr(0, 24);
  std::memcpy(t.raw(), text.data(), std::min(text.size(), size_t(kRecordInts * 4 - 1)));
  return t;
}

}  // namespace

std::string format_rank_map(ProcessGroupMesh& mesh, const std::string& device) {
  comm::Group& world = mesh.world();
  Tensor mine = pack_record(host_name(), device);
  Tensor all = Tensor::zeros({int64_t(world.size()) * kRecordInts}, DType::i32);
  world.all_gather(all, mine)->wait();

  std::vector<std::string> hosts, devices;
  size_t host_w = 4;
  for (int r = 0; r < world.size(); ++r) {
    const char* rec = static_cast<const char*>(all.raw()) + size_t(r) * kRecordInts * 4;
    hosts.emplace_back(rec);
    devices.emplace_back(rec + hosts.back().size() + 1);
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
