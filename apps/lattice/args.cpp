#include "args.h"

#include <utility>

namespace lattice::cli {

ArgReader::ArgReader(std::string command, std::string usage, const Args& args)
    : command_(std::move(command)), usage_(std::move(usage)), args_(args) {}

bool ArgReader::next() {
  name_.clear(), inline_.reset();
  return ++i_ < args_.size();
}

bool ArgReader::is(std::string_view name) {
  const std::string& a = arg();
  if (a == name) {
    name_ = name, inline_.reset();
    return true;
  }
  if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
    name_ = name, inline_ = a.substr(name.size() + 1);
    return true;
  }
  return false;
}

bool ArgReader::flag(std::string_view name) {
  if (!is(name)) return false;
  if (inline_) fail(fmt::format("{} takes no value, got '{}'", name, arg()));
  return true;
}

const std::string& ArgReader::value() {
  if (inline_) return *inline_;
  if (i_ + 1 >= args_.size()) fail(fmt::format("{} needs a value", name_));
  if (args_[i_ + 1].rfind("--", 0) == 0)
    fail(fmt::format("{} needs a value, got the option '{}' (a value that starts with -- goes after '=': {}=VALUE)",
                     name_, args_[i_ + 1], name_));
  return args_[++i_];
}

const std::string& ArgReader::path() {
  const std::string& v = value();
  if (v.empty()) fail_value(v, "a path");
  return v;
}

std::vector<std::string> ArgReader::values() {
  std::vector<std::string> out{value()};
  while (i_ + 1 < args_.size() && args_[i_ + 1].rfind("--", 0) != 0) out.push_back(args_[++i_]);
  return out;
}

void ArgReader::fail_unknown() const {
  fail(fmt::format("unknown {} '{}'", is_option() ? "option" : "argument", arg()));
}

void ArgReader::fail(std::string_view message) const {
  LATTICE_INPUT_FAIL("{}: {} (usage: {})", command_, message, usage_);
}

void ArgReader::fail_value(const std::string& v, std::string_view what) const {
  LATTICE_INPUT_FAIL("{}: {} expects {}, got '{}'", command_, name_, what, v);
}

ConfigArgs read_config_args(ArgReader& r, const std::function<bool(ArgReader&)>& option) {
  ConfigArgs c;
  while (r.next()) {
    if (r.is_option()) {
      if (!option(r)) r.fail_unknown();
    } else if (c.path.empty()) {
      c.path = r.arg();
    } else {
      c.overrides.push_back(r.arg());
    }
  }
  if (c.path.empty()) r.fail("no config file given");
  return c;
}

}  // namespace lattice::cli
