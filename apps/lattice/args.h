// How every subcommand reads its command line: one walk over the arguments,
// one set of error lines.
//
//   ArgReader r("sample", usage, args);
//   while (r.next()) {
//     if (r.is("--tokens")) tokens = r.number<int64_t>(1, 1 << 20, "an integer in [1, 1048576]");
//     else if (r.is("--prompt")) prompt = r.value();
//     else r.fail_unknown();
//   }
//
// An option's value is the next argument (`--tokens 5`) or what follows '='
// (`--tokens=5`). A next argument that starts with "--" is taken for a
// forgotten value, not read as one (`--prompt --tokens 5`); such a value goes
// after '=' (`--prompt=--x`). Every error is one InputError line that starts
// with the command and names the option and the value.
//
// The commands that run a config (train, verify-layout, plan, eval) share
// read_config_args: CONFIG, then key=value overrides, with their options
// anywhere among them.
#pragma once

#include <charconv>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cli.h"
#include "core/error.h"

namespace lattice::cli {

class ArgReader {
 public:
  // usage: the command's synopsis ("lattice plan CONFIG [--world N] ..."), quoted by the errors.
  ArgReader(std::string command, std::string usage, const Args& args);

  // Moves to the next argument; false past the last.
  bool next();
  // The current argument as given.
  const std::string& arg() const { return args_[i_]; }
  // Whether the current argument looks like an option ("--...").
  bool is_option() const { return arg().rfind("--", 0) == 0; }
  // Whether the current argument is option `name`, given as `name` or
  // `name=VALUE` (that value is then value()'s).
  bool is(std::string_view name);
  // Whether the current argument is the option `name` that takes no value
  // (`name=VALUE` is one error line).
  bool flag(std::string_view name);
  // The current option's value: after its '=', else the next argument (which
  // it consumes). None is one error line.
  const std::string& value();
  // value() that names a file or directory: an empty one (`--checkpoint=`,
  // `--checkpoint "$UNSET"`) is one error line, never taken for the option
  // left out.
  const std::string& path();
  // value() and the arguments after it up to the next option (`--input a b`).
  std::vector<std::string> values();
  // value() as a number in [lo, hi] (NaN never is); otherwise one line that
  // says `what` the option expects.
  template <typename T>
  T number(T lo, T hi, std::string_view what) {
    const std::string& v = value();
    T n{};
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size() || !(n >= lo && n <= hi)) fail_value(v, what);
    return n;
  }

  // One error line each.
  [[noreturn]] void fail_unknown() const;                  // the current argument is no option of the command
  [[noreturn]] void fail(std::string_view message) const;  // "COMMAND: message (usage: USAGE)"

  const std::string& command() const { return command_; }

 private:
  [[noreturn]] void fail_value(const std::string& v, std::string_view what) const;

  std::string command_, usage_;
  const Args& args_;
  size_t i_ = size_t(-1);
  std::string name_;                   // the option is() matched, without its '=VALUE'
  std::optional<std::string> inline_;  // its '=VALUE'
};

// CONFIG [key=value ...] of a command that runs a config.
struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
};

// Walks the arguments: each option goes to `option`, which reads it (and its
// value) and returns true, or returns false for one the command does not
// take (one error line); the first other argument is CONFIG, the rest are
// overrides. No CONFIG is one error line.
ConfigArgs read_config_args(ArgReader& r, const std::function<bool(ArgReader&)>& option);

}  // namespace lattice::cli
