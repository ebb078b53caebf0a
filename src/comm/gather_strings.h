// all_gather_strings: every rank's string, on every rank of a group, in
// group-rank order (variable lengths; bytes carried as i32 through the
// group's all_gather). Collective; for small control data (host names,
// checkpoint file digests), not for bulk data.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace lattice::comm {

std::vector<std::string> all_gather_strings(Group& g, const std::string& mine);

}  // namespace lattice::comm
