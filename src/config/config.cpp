// Loading: read the file, apply overrides onto the YAML tree, check every key
// against the table, decode each known key, fill derived defaults, validate.
// Also to_yaml, which walks the same table.
#include "config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "config/schema.h"

namespace lattice {

using namespace config_detail;

namespace {

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  return parts;
}

// Whether the quoted scalar opening at text[pos] has its closing quote.
// yaml-cpp accepts a quote left open up to the end of the input (the value
// then swallows every later line), so this is checked here.
bool quote_closed(const std::string& text, size_t pos) {
  const char q = text[pos];
  for (size_t i = pos + 1; i < text.size(); ++i) {
    if (q == '"' && text[i] == '\\') {
      ++i;  // an escape: the next character is not the end
    } else if (text[i] == q) {
      if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a single quote inside a single-quoted scalar
      } else {
        return true;
      }
    }
  }
  return false;
}

// Throws at the first quoted scalar (key or value) under `node` whose quote is never closed.
void check_quotes(const YAML::Node& node, const std::string& text, const std::string& path, const Locator& loc) {
  if (node.IsScalar()) {
    const YAML::Mark m = node.Mark();
    if (node.Tag() == "!" && m.pos >= 0 && size_t(m.pos) < text.size() && (text[m.pos] == '"' || text[m.pos] == '\'') &&
        !quote_closed(text, size_t(m.pos)))
      loc.fail(path, m,
               fmt::format("malformed YAML: the {} quote opened here is never closed, so the value runs to the end "
                           "of the input — close it",
                           text[m.pos] == '"' ? "double" : "single"));
  } else if (node.IsMap()) {
    for (const auto& entry : node) {
      YAML::Node key = entry.first, value = entry.second;
      check_quotes(key, text, path, loc);
      check_quotes(value, text, key.IsScalar() ? join_path(path, key.Scalar()) : path, loc);
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) check_quotes(node[i], text, fmt::format("{}[{}]", path, i), loc);
  }
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    // yaml-cpp finds an unclosed bracket where the input ends; say what to look for.
    const bool flow = e.msg == YAML::ErrorMsg::END_OF_SEQ_FLOW || e.msg == YAML::ErrorMsg::END_OF_MAP_FLOW;
    throw ConfigError(
        fmt::format("{}:{}:{}: malformed YAML: {} — {}", source, e.mark.line + 1, e.mark.column + 1, e.msg,
                    flow ? fmt::format("a '{}' opened before this position is never closed; close it",
                                       e.msg == YAML::ErrorMsg::END_OF_SEQ_FLOW ? '[' : '{')
                         : std::string("fix the syntax at this position")),
        "");
  }
  check_quotes(root, text, "", Locator(source));
  return root;
}

[[noreturn]] void fail_unknown(const std::string& path, const YAML::Mark& mark, const Locator& loc) {
  if (auto near = suggest_key(path); !near.empty())
    loc.fail(path, mark, fmt::format("unknown key — did you mean '{}'?", near));
  std::string section = parent_path(path);
  std::string names = fmt::format("{}", fmt::join(child_names(section), ", "));
  loc.fail(path, mark,
           fmt::format("unknown key — known keys {}: {}", section.empty() ? "at the top" : "in " + section, names));
}

// Sets root[a][b]... = value for a key path, creating sections as needed.
void set_path(YAML::Node& root, const std::vector<std::string>& parts, const YAML::Node& value, const Locator& loc) {
  YAML::Node node = root;
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path = join_path(path, parts[i]);
    const YAML::Node& cnode = node;  // const lookups never insert
    YAML::Node child = cnode[parts[i]];
    if (!child || child.IsNull()) {
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
    } else if (!child.IsMap()) {
      loc.fail(path, child.Mark(), fmt::format("expected a mapping of keys, got {}", show(child)));
    }
    node.reset(node[parts[i]]);
  }
  node[parts.back()] = value;
}

void apply_override(YAML::Node& root, const std::string& text, Locator& loc) {
  auto eq = text.find('=');
  if (eq == std::string::npos)
    throw ConfigError(fmt::format("override '{}': missing '=' — write key.path=value, e.g. train.steps=50", text), "");
  std::string path = trim(text.substr(0, eq));
  Locator here(loc.source());
  here.add_override(path, text);
  if (path.empty())
    throw ConfigError(fmt::format("override '{}': empty key — write key.path=value, e.g. train.steps=50", text), "");
  if (is_section(path))
    here.fail(
        path, {},
        fmt::format("is a section — set its keys one at a time, e.g. {}.{}=...", path, child_names(path).front()));
  if (!find_field(path)) {
    std::string near = suggest_key(path);
    here.fail(path, {},
              near.empty() ? "unknown key — see docs/config.md for the keys"
                           : fmt::format("unknown key — did you mean '{}'?", near));
  }
  YAML::Node value;
  const std::string value_text = text.substr(eq + 1);
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::ParserException& e) {
    here.fail(path, {}, fmt::format("malformed value: {} — quote it or fix the YAML", e.msg));
  }
  check_quotes(value, value_text, path, here);
  if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
  set_path(root, split_path(path), value, loc);
  loc.add_override(path, text);
}

// Every key must be known; sections must be mappings; keys appear once.
void check_keys(const YAML::Node& map, const std::string& section, const Locator& loc, Config& cfg) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    YAML::Node key = entry.first, value = entry.second;  // handles, not references into the iterator
    if (!key.IsScalar()) loc.fail(section, key.Mark(), fmt::format("keys must be plain names, got {}", show(key)));
    std::string path = join_path(section, key.Scalar());
    if (!seen.insert(key.Scalar()).second)
      loc.fail(path, key.Mark(),
               fmt::format("duplicate key (first set at {}) — each key may appear once in its section",
                           format_location(loc.source(), cfg.locations[path])));
    cfg.locations[path] = loc.locate(path, key.Mark());
    if (value.IsNull() && value.Mark().line != key.Mark().line) loc.empty_value_at(path, key.Mark());
    if (is_section(path)) {
      if (value.IsMap()) {
        check_keys(value, path, loc, cfg);
      } else if (!value.IsNull()) {
        loc.fail(path, value.Mark(), fmt::format("expected a mapping of keys, got {}", show(value)));
      }
    } else if (!find_field(path)) {
      fail_unknown(path, key.Mark(), loc);
    }
  }
}

// The node at a key path, or an undefined node; also the deepest section seen.
YAML::Node lookup(const YAML::Node& root, const std::string& path, std::string& deepest) {
  YAML::Node node = root;
  std::string at;
  for (const auto& part : split_path(path)) {
    if (!node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& cnode = node;
    YAML::Node child = cnode[part];
    if (!child) return child;
    at = join_path(at, part);
    if (is_section(at)) deepest = at;
    node.reset(child);
  }
  return node;
}

void decode_fields(const YAML::Node& root, const Locator& loc, Config& cfg) {
  for (const auto& f : fields()) {
    std::string section;
    YAML::Node node = lookup(root, f.path, section);
    if (node) {
      f.decode(node, cfg, loc);
      continue;
    }
    if (!f.required) continue;
    std::string name = f.path.substr(f.path.rfind('.') + 1);
    std::string want = parent_path(f.path);
    auto it = cfg.locations.find(section);
    KeyLocation where = it != cfg.locations.end() ? it->second : KeyLocation{};
    throw ConfigError(fmt::format("{}: {}: required key is missing — add '{}: ...' under '{}:'",
                                  format_location(loc.source(), where), f.path, name, want),
                      f.path);
  }
}

void emit_section(YAML::Emitter& out, const std::string& section, const Config& cfg) {
  out << YAML::BeginMap;
  for (const auto& name : child_names(section)) {
    std::string path = join_path(section, name);
    // Only fp16 reads it, and validate refuses it set with another precision.
    if (path == "runtime.loss_scale" && cfg.runtime.precision != Precision::fp16) continue;
    // Likewise another optimizer's keys (betas with sgd, momentum with adamw).
    if (auto owner = optimizer_key_owner(path); owner && *owner != cfg.optimizer.name) continue;
    out << YAML::Key << name << YAML::Value;
    if (is_section(path)) {
      emit_section(out, path, cfg);
    } else {
      find_field(path)->emit(cfg, out);
    }
  }
  out << YAML::EndMap;
}

// For parse_written_config: removes from `root` the keys set there that
// cfg's optimizer does not read; whether there were any.
bool drop_other_optimizer_keys(const YAML::Node& root, const Config& cfg) {
  bool dropped = false;
  for (const auto& f : fields()) {
    auto owner = optimizer_key_owner(f.path);
    if (!owner || *owner == cfg.optimizer.name || !cfg.locations.count(f.path)) continue;
    std::string section;
    YAML::Node parent = lookup(root, parent_path(f.path), section);
    parent.remove(f.path.substr(f.path.rfind('.') + 1));
    dropped = true;
  }
  return dropped;
}

std::string config_name(const std::string& source) {
  std::string stem = std::filesystem::path(source).stem().string();
  if (!stem.empty() && stem.front() == '<' && stem.back() == '>') stem = stem.substr(1, stem.size() - 2);
  return stem.empty() ? "run" : stem;
}

}  // namespace

ConfigError::ConfigError(std::string message, std::string key_path)
    : InputError(
          [&] {
            for (char& c : message)
              if (c == '\n' || c == '\r') c = ' ';
            return message;
          }(),
          "", nullptr, 0),
      key_path_(std::move(key_path)) {}

bool Config::operator==(const Config& o) const {
  return model == o.model && parallel == o.parallel && train == o.train && optimizer == o.optimizer && data == o.data &&
         checkpoint == o.checkpoint && log == o.log && runtime == o.runtime;
}

namespace {

// parse_config, and with `written` parse_written_config.
Config parse(const std::string& yaml_text, const std::string& source_name, const std::vector<std::string>& overrides,
             bool written) {
  Config cfg;
  cfg.source = source_name;
  cfg.name = config_name(source_name);
  Locator loc(source_name);
  try {
    YAML::Node root = parse_yaml(yaml_text, source_name);
    if (!root.IsNull() && !root.IsMap())
      loc.fail("", root.Mark(),
               fmt::format("expected a mapping of sections (model:, train:, ...), got {}", show(root)));
    for (const auto& text : overrides) apply_override(root, text, loc);
    const Config blank = cfg;
    auto decode = [&] {
      if (root.IsMap()) check_keys(root, "", loc, cfg);
      decode_fields(root, loc, cfg);
    };
    decode();
    if (written && drop_other_optimizer_keys(root, cfg)) {  // again without them: they keep their defaults
      cfg = blank;
      decode();
    }
  } catch (const YAML::Exception& e) {  // anything yaml-cpp raises beyond syntax errors
    throw ConfigError(fmt::format("{}:{}:{}: config: {}", source_name, e.mark.line + 1, e.mark.column + 1, e.msg), "");
  }
  fill_derived(cfg);
  validate(cfg);
  return cfg;
}

std::string read_config_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw ConfigError(fmt::format("{}: config file '{}' not found — check the path (relative to {})", path, path,
                                  std::filesystem::current_path(ec).string()),
                      "");
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(fmt::format("{}: config file '{}' is a directory — pass a .yaml file", path, path), "");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError(fmt::format("{}: config file '{}' cannot be read — check its permissions", path, path), "");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  return parse(yaml_text, source_name, overrides, false);
}

Config parse_written_config(const std::string& yaml_text, const std::string& source_name) {
  return parse(yaml_text, source_name, {}, true);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_config_file(path), path, overrides);
}

Config load_written_config(const std::string& path) { return parse_written_config(read_config_file(path), path); }

std::string to_yaml(const Config& cfg) {
  YAML::Emitter out;
  out << YAML::Comment(fmt::format("effective config '{}' (from {}); keys: docs/config.md", cfg.name, cfg.source));
  out << YAML::Newline;
  emit_section(out, "", cfg);
  LATTICE_CHECK(out.good(), "to_yaml: {}", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> config_key_paths() {
  std::vector<std::string> out;
  for (const auto& f : fields()) out.push_back(f.path);
  return out;
}

}  // namespace lattice
