// first_difference: the first key (in to_yaml order) whose value differs
// between two configs, read back from their YAML so every key type compares
// the way it prints.
#include <yaml-cpp/yaml.h>

#include "config/config.h"

namespace lattice {

namespace {

YAML::Node at_path(const YAML::Node& root, const std::string& path) {
  YAML::Node n = YAML::Clone(root);
  size_t start = 0;
  while (n && start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    n = n[part];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return n;
}

// Flow style all the way down, so a block list (data.train's sources) is one line too.
void set_flow(YAML::Node n) {
  n.SetStyle(YAML::EmitterStyle::Flow);
  if (n.IsSequence())
    for (YAML::Node child : n) set_flow(child);
  if (n.IsMap())
    for (auto entry : n) set_flow(entry.second);
}

std::string text_of(const YAML::Node& n) {
  if (!n || n.IsNull()) return "null";
  YAML::Node flow = YAML::Clone(n);
  set_flow(flow);
  YAML::Emitter e;
  e << flow;
  return e.c_str();
}

}  // namespace

Config with_resumable_settings(Config saved, const Config& now) {
  saved.parallel = now.parallel;
  saved.runtime.threads = now.runtime.threads;
  saved.log = now.log;
  saved.checkpoint = now.checkpoint;
  saved.train.stop_at_step = now.train.stop_at_step;
  return saved;
}

std::optional<ConfigDifference> first_difference(const Config& a, const Config& b) {
  const YAML::Node ya = YAML::Load(to_yaml(a)), yb = YAML::Load(to_yaml(b));
  for (const std::string& key : config_key_paths()) {
    std::string va = text_of(at_path(ya, key)), vb = text_of(at_path(yb, key));
    if (va != vb) return ConfigDifference{key, va, vb};
  }
  return std::nullopt;
}

}  // namespace lattice
