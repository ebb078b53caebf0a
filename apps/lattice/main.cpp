// lattice: train, plan, verify-layout, data, convert, sample. Prints one line per error and exits non-zero.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "booster/version_info.h"
#include "cli.h"
#include "config/config.h"
#include "core/blas_core.h"
#include "core/error.h"

int main(int argc, char** argv) {
  using namespace lattice;
  reexec_for_blas_kernels(argv);  // first: OpenBLAS chose its kernels when it was loaded (core/blas_core.h)
  cli::Args args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
      std::fputs(cli::usage().c_str(), args.empty() ? stderr : stdout);
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
      fmt::print("lattice {} ({})\n", kLatticeVersion, kLatticeGitCommit);
      return 0;
    }
    const std::string cmd = args[0];
    cli::Args rest(args.begin() + 1, args.end());
    if (std::any_of(rest.begin(), rest.end(), [](const std::string& a) { return a == "-h" || a == "--help"; })) {
      std::fputs(cli::usage().c_str(), stdout);  // `lattice train --help` is help, not a bad option
      return 0;
    }
    if (cmd == "train") return cli::train(&argc, &argv, rest);
    if (cmd == "data") return cli::data(rest);
    if (cmd == "plan") return cli::plan(rest);
    if (cmd == "verify-layout") return cli::verify_layout(&argc, &argv, rest);
    if (cmd == "convert") return cli::convert(rest);
    if (cmd == "sample") return cli::sample(rest);
    if (cmd == "eval") return cli::eval(&argc, &argv, rest);
    fmt::print(stderr,
               "lattice: unknown command '{}' (expected train, eval, plan, verify-layout, data, convert or sample; see "
               "lattice --help)\n",
               cmd);
    return 2;
  } catch (const InputError& e) {  // a ConfigError too
    fmt::print(stderr, "lattice: error: {}\n", e.message());
  } catch (const Error& e) {
    fmt::print(stderr, "lattice: error: {}\n", e.describe());
  } catch (const std::exception& e) {
    fmt::print(stderr, "lattice: error: {}\n", describe_exception(e));
  }
  return 1;
}
