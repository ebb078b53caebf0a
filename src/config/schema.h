// Internal to src/config: the one key table that drives decoding, to_yaml,
// the set of known keys and the "did you mean" suggestions, plus the Locator
// that turns a key path and a YAML mark into "FILE:LINE:COL" or "override 'k=v'".
//
// A key path joins names with '.', list elements with "[i]":
// "optimizer.schedule.warmup_steps", "parallel.layers_per_stage[2]".
// Sections ("model", "optimizer.schedule") are the proper prefixes of the
// leaf paths; they hold mappings.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"

namespace lattice::config_detail {

class Locator {
 public:
  explicit Locator(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }
  // Keys at or below `path` were set by override `text`.
  void add_override(const std::string& path, const std::string& text) { overrides_[path] = text; }
  KeyLocation locate(const std::string& path, const YAML::Mark& mark) const;
  // Throws ConfigError "LOCATION: PATH: what".
  [[noreturn]] void fail(const std::string& path, const YAML::Mark& mark, const std::string& what) const;
  // `key: ` with nothing after it: yaml-cpp marks the empty value where the
  // next token starts (the next line), so errors about it point at its key.
  void empty_value_at(const std::string& path, const YAML::Mark& key) const { empty_values_[path] = key; }

 private:
  std::string source_;
  std::map<std::string, std::string> overrides_;
  mutable std::map<std::string, YAML::Mark> empty_values_;
};

std::string format_location(const std::string& source, const KeyLocation& loc);
// "a.b[2].c" -> "a.b[2]" -> "a.b" -> "a" -> "".
std::string parent_path(const std::string& path);
std::string join_path(const std::string& prefix, const std::string& name);

struct Field {
  std::string path;
  bool required = false;
  // `node` is defined; errors name `path` and the node's mark.
  std::function<void(const YAML::Node& node, Config& cfg, const Locator& loc)> decode;
  // Writes the value (only the value: the key is already out).
  std::function<void(const Config& cfg, YAML::Emitter& out)> emit;
};

const std::vector<Field>& fields();  // in documented order
const Field* find_field(const std::string& path);
bool is_section(const std::string& path);  // "" (the root) is a section too
// Names directly under a section, in documented order.
std::vector<std::string> child_names(const std::string& section);
// A known key path close to the unknown `path`, or "".
std::string suggest_key(const std::string& path);

// A value as shown in messages: 'text' (one line, shortened), a list, a mapping, an empty value.
std::string show(const YAML::Node& node);
// Levenshtein distance.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace lattice::config_detail
