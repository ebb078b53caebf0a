// Running the lattice binary from a test: LATTICE_BIN (set by CTest) in a
// given directory, optionally under mpirun with N ranks and with extra
// environment variables; stdout and stderr come back together with the exit
// status.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace lattice::test {

struct CmdResult {
  int status = -1;
  std::string out;  // stdout and stderr together
};

inline std::string lattice_bin() {
  const char* b = std::getenv("LATTICE_BIN");
  return b ? b : "lattice";
}

// The contents of a file ("" when it cannot be read).
inline std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The launcher as the tests use it, up to its first app context: -q keeps
// Open MPI's own abort banner out of the output.
inline std::string mpirun() {
  return std::string(LATTICE_MPIEXEC) + " -q --oversubscribe --bind-to none -x OMP_NUM_THREADS=1";
}

// A shell command line run in `cwd`; stdout and stderr together.
inline CmdResult run_command(const std::string& command, const std::string& cwd) {
  const std::string cmd = "cd '" + cwd + "' && " + command + " 2>&1";
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// env: "VAR=value ..." set for the command (under mpirun every local rank inherits it).
inline CmdResult run_lattice(const std::string& args, const std::string& cwd, int ranks = 0,
                             const std::string& env = "") {
  const std::string launcher = ranks > 0 ? mpirun() + " -np " + std::to_string(ranks) + " " : "";
  return run_command((env.empty() ? "" : "env " + env + " ") + launcher + "'" + lattice_bin() + "' " + args, cwd);
}

}  // namespace lattice::test
