// Text for communicator errors, shared by the MPI and NCCL backends so every
// timeout reads the same: "recv from rank 1 (world rank 3) of group pp (world
// ranks 1,3) timed out after 0.5 s".
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

namespace lattice::comm {

// "0,1" or "0,1,...,15,... (64 ranks)": long lists are cut after 16 ranks.
inline std::string rank_list(const std::vector<int>& ranks) {
  std::string list;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) list += fmt::format("{}{}", i ? "," : "", ranks[i]);
  if (ranks.size() > 16) list += fmt::format(",... ({} ranks)", ranks.size());
  return list;
}

// "group tp (world ranks 0,1)".
inline std::string describe_group(const std::string& name, const std::vector<int>& world_ranks) {
  return fmt::format("group {} (world ranks {})", name, rank_list(world_ranks));
}

// "send to rank 1 (world rank 3)" / "recv from rank 1 (world rank 3)".
inline std::string describe_p2p(bool is_send, int peer, const std::vector<int>& world_ranks) {
  int world = peer >= 0 && size_t(peer) < world_ranks.size() ? world_ranks[size_t(peer)] : -1;
  return fmt::format("{} rank {} (world rank {})", is_send ? "send to" : "recv from", peer, world);
}

// What a rank blocked in an NCCL operation answers a roll call with
// (comm/roll_call.h): "all_reduce on group dp (NCCL)". behind_previous: it is
// waiting for the operation before it, which the compute stream waits for
// (NcclCommunicator::before_device_wait).
inline std::string describe_nccl_wait(const std::string& what, const std::string& group_name, bool behind_previous) {
  return fmt::format("{} on group {} (NCCL{})", what, group_name,
                     behind_previous ? ", for the operation before it" : "");
}

// "timed out after 0.5 s (runtime.comm_timeout_s) — ...": the limit, its key
// and what to look at, the end of every timeout message.
inline std::string describe_timeout(double timeout_s) {
  return fmt::format(
      "timed out after {} s (runtime.comm_timeout_s) — a rank of the group is stopped, dead or far behind (its own "
      "error line, if any, says why); raise runtime.comm_timeout_s only if its steps are really that slow",
      timeout_s);
}

}  // namespace lattice::comm
