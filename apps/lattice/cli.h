// The lattice command line: one binary, one function per subcommand.
// Each returns the process exit code; errors propagate as lattice::Error and
// main prints them as one line.
#pragma once

#include <string>
#include <vector>

namespace lattice::cli {

using Args = std::vector<std::string>;

// lattice train CONFIG [key=value ...] [--print-config]: initialises MPI and
// reports its own errors (one line, then the whole job ends).
int train(int* argc, char*** argv, const Args& args);
int data(const Args& args);          // lattice data prepare ...
std::string usage();

}  // namespace lattice::cli
