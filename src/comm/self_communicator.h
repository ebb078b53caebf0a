// A communicator over one rank (this process), needing no MPI: what a
// single-rank job and single-process tests give to code that takes a Group.
// Collectives complete at once (all_reduce and broadcast leave the data as it
// is; all_gather and reduce_scatter copy); P2P has no peer and throws.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace lattice::comm {

std::unique_ptr<Communicator> make_self_communicator(const std::string& name = "self");
inline Group self_group(const std::string& name = "self") { return Group(make_self_communicator(name)); }

}  // namespace lattice::comm
