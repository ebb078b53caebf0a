// The key table and the typed value decoders/emitters (see schema.h).
#include "config/schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

namespace lattice::config_detail {

// ---- locations ----

KeyLocation Locator::locate(const std::string& path, const YAML::Mark& mark) const {
  for (std::string p = path; !p.empty(); p = parent_path(p))
    if (auto it = overrides_.find(p); it != overrides_.end()) return {0, 0, it->second};
  if (mark.is_null()) return {};
  return {mark.line + 1, mark.column + 1, ""};
}

void Locator::fail(const std::string& path, const YAML::Mark& mark, const std::string& what) const {
  const auto empty = empty_values_.find(path);
  const YAML::Mark& at = empty == empty_values_.end() ? mark : empty->second;
  throw ConfigError(
      fmt::format("{}: {}: {}", format_location(source_, locate(path, at)), path.empty() ? "config" : path, what),
      path);
}

std::string format_location(const std::string& source, const KeyLocation& loc) {
  if (!loc.override_text.empty()) return fmt::format("override '{}'", loc.override_text);
  if (loc.line > 0) return fmt::format("{}:{}:{}", source, loc.line, loc.column);
  return source;
}

std::string parent_path(const std::string& path) {
  auto pos = path.find_last_of(".[");
  return pos == std::string::npos ? std::string() : path.substr(0, pos);
}

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string show(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
    default:
      return "nothing";
  }
  std::string s = "'";
  for (char c : node.Scalar()) {
    if (c == '\n') {
      s.append("\\n");
    } else {
      s.push_back(c);
    }
  }
  if (s.size() > 61) s.resize(58), s.append("...");
  s.push_back('\'');
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

namespace {

// Closest candidate within a small edit distance, or "".
std::string closest(const std::string& name, const std::vector<std::string>& candidates) {
  size_t limit = name.size() <= 3 ? 1 : name.size() <= 8 ? 2 : 3;
  std::string best;
  size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    size_t d = edit_distance(name, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

// ---- scalar parsing ----

std::optional<long long> parse_integer(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_number(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<bool> parse_bool(std::string_view s) {
  for (auto t : {"true", "True", "TRUE", "yes", "Yes", "on", "On"})
    if (s == t) return true;
  for (auto f : {"false", "False", "FALSE", "no", "No", "off", "Off"})
    if (s == f) return false;
  return std::nullopt;
}

const std::string& scalar_or_fail(const YAML::Node& n, const std::string& path, const Locator& loc,
                                  const char* expected) {
  if (!n.IsScalar()) loc.fail(path, n.Mark(), fmt::format("expected {}, got {}", expected, show(n)));
  return n.Scalar();
}

// ---- decoders, one per value type ----

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, long long lo, long long hi,
                  long long& out) {
  auto v = parse_integer(scalar_or_fail(n, path, loc, "an integer"));
  if (!v) loc.fail(path, n.Mark(), fmt::format("expected an integer, got {}", show(n)));
  if (*v < lo || *v > hi)
    loc.fail(path, n.Mark(), fmt::format("{} is out of range — expected an integer in [{}, {}]", *v, lo, hi));
  out = *v;
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, int& out) {
  long long v = 0;
  decode_value(n, path, loc, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), v);
  out = int(v);
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, uint64_t& out) {
  const std::string& s = scalar_or_fail(n, path, loc, "a non-negative integer");
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    loc.fail(path, n.Mark(), fmt::format("expected a non-negative integer, got {}", show(n)));
  out = v;
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, double& out) {
  auto v = parse_number(scalar_or_fail(n, path, loc, "a number"));
  if (!v) loc.fail(path, n.Mark(), fmt::format("expected a number, got {}", show(n)));
  out = *v;
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, float& out) {
  double v = 0;
  decode_value(n, path, loc, v);
  out = float(v);
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, bool& out) {
  auto v = parse_bool(scalar_or_fail(n, path, loc, "true or false"));
  if (!v) loc.fail(path, n.Mark(), fmt::format("expected true or false, got {}", show(n)));
  out = *v;
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, std::string& out) {
  out = n.IsNull() ? std::string() : scalar_or_fail(n, path, loc, "a string");
}

template <NamedEnum E>
void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, E& out) {
  std::string expected = "one of " + enum_choices<E>();
  const std::string& s = scalar_or_fail(n, path, loc, expected.c_str());
  if (auto v = enum_from_name<E>(s)) {
    out = *v;
    return;
  }
  std::vector<std::string> names(EnumNames<E>::names.begin(), EnumNames<E>::names.end());
  std::string guess = closest(s, names);
  loc.fail(path, n.Mark(),
           fmt::format("unknown value {} — expected {}{}", show(n), expected,
                       guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, std::array<double, 2>& out) {
  if (!n.IsSequence() || n.size() != 2)
    loc.fail(path, n.Mark(),
             fmt::format("expected a list of 2 numbers like [0.9, 0.95], got {}",
                         n.IsSequence() ? fmt::format("a list of {}", n.size()) : show(n)));
  for (size_t i = 0; i < 2; ++i) decode_value(n[i], fmt::format("{}[{}]", path, i), loc, out[i]);
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, std::vector<std::string>& out) {
  if (!n.IsSequence()) loc.fail(path, n.Mark(), fmt::format("expected a list like [tp, dp, pp], got {}", show(n)));
  out.assign(n.size(), "");
  for (size_t i = 0; i < n.size(); ++i) {
    auto p = fmt::format("{}[{}]", path, i);
    out[i] = scalar_or_fail(n[i], p, loc, "a name");
  }
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, std::vector<int>& out) {
  if (!n.IsSequence())
    loc.fail(path, n.Mark(), fmt::format("expected a list of integers like [2, 1], got {}", show(n)));
  out.assign(n.size(), 0);
  for (size_t i = 0; i < n.size(); ++i) decode_value(n[i], fmt::format("{}[{}]", path, i), loc, out[i]);
}

void decode_value(const YAML::Node& n, const std::string& path, const Locator& loc, LayersPerStage& out) {
  constexpr const char* expected = "uniform, balanced or a list of layer counts like [3, 5, 5, 3]";
  if (n.IsScalar()) {
    auto v = enum_from_name<LayerSplit>(n.Scalar());
    if (!v) loc.fail(path, n.Mark(), fmt::format("expected {}, got {}", expected, show(n)));
    out = {*v, {}};
    return;
  }
  if (!n.IsSequence() || n.size() == 0)
    loc.fail(path, n.Mark(), fmt::format("expected {}, got {}", expected, n.IsSequence() ? "an empty list" : show(n)));
  out = {LayerSplit::list, std::vector<int>(n.size())};
  for (size_t i = 0; i < n.size(); ++i) decode_value(n[i], fmt::format("{}[{}]", path, i), loc, out.counts[i]);
}

// data.train: a glob (one source of weight 1; "" or nothing: none) or a
// mixture, a list of {path: GLOB, weight: W}. Each element's keys get their
// locations, so validate() puts "data.train[1].weight: must be > 0" at its line.
void decode_sources(const YAML::Node& n, const std::string& path, const Locator& loc, Config& cfg) {
  std::vector<DataSource>& out = cfg.data.train;
  out.clear();
  if (n.IsNull() || (n.IsScalar() && n.Scalar().empty())) return;
  if (n.IsScalar()) {
    out.push_back({n.Scalar(), 1.0});
    return;
  }
  if (!n.IsSequence())
    loc.fail(
        path, n.Mark(),
        fmt::format("expected a shard glob, or a list of {{path: GLOB, weight: W}} for a mixture, got {}", show(n)));
  const std::vector<std::string> keys = {"path", "weight"};
  out.assign(n.size(), DataSource{});
  for (size_t i = 0; i < n.size(); ++i) {
    const YAML::Node e = n[i];
    const std::string at = fmt::format("{}[{}]", path, i);
    cfg.locations[at] = loc.locate(at, e.Mark());
    if (!e.IsMap()) loc.fail(at, e.Mark(), fmt::format("expected a source {{path: GLOB, weight: W}}, got {}", show(e)));
    std::set<std::string> seen;
    for (const auto& entry : e) {
      YAML::Node key = entry.first, value = entry.second;
      const std::string name = key.IsScalar() ? key.Scalar() : show(key);
      const std::string key_path = join_path(at, name);
      if (std::find(keys.begin(), keys.end(), name) == keys.end()) {
        std::string near = closest(name, keys);
        loc.fail(key_path, key.Mark(),
                 fmt::format("unknown key — a source has path: GLOB and weight: W{}",
                             near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near)));
      }
      if (!seen.insert(name).second) loc.fail(key_path, key.Mark(), "duplicate key — give it once per source");
      cfg.locations[key_path] = loc.locate(key_path, key.Mark());
      if (value.IsNull() && value.Mark().line != key.Mark().line) loc.empty_value_at(key_path, key.Mark());
      if (name == "path") {
        decode_value(value, key_path, loc, out[i].path);
      } else {
        decode_value(value, key_path, loc, out[i].weight);
      }
    }
    if (!seen.count("path")) loc.fail(at, e.Mark(), "has no path — add path: GLOB, the source's training shards");
    if (!seen.count("weight"))
      loc.fail(at, e.Mark(), "has no weight — add weight: W, a positive number: the source's share before normalising");
  }
}

// ---- emitters: numbers in shortest round-trip form, free strings quoted ----

// Shortest text that parses back to the same value; "1.0e-05" rather than
// "1e-05" so YAML 1.1 readers (PyYAML) also see a float.
template <class T>
std::string number_text(T v) {
  std::string s = fmt::format("{}", v);
  if (auto e = s.find('e'); e != std::string::npos && s.find('.') == std::string::npos) s.insert(e, ".0");
  return s;
}

void emit_value(YAML::Emitter& out, int v) { out << fmt::format("{}", v); }
void emit_value(YAML::Emitter& out, uint64_t v) { out << fmt::format("{}", v); }
void emit_value(YAML::Emitter& out, double v) { out << number_text(v); }
void emit_value(YAML::Emitter& out, float v) { out << number_text(v); }
void emit_value(YAML::Emitter& out, bool v) { out << (v ? "true" : "false"); }
void emit_value(YAML::Emitter& out, const std::string& v) { out << YAML::DoubleQuoted << v; }
template <NamedEnum E>
void emit_value(YAML::Emitter& out, E v) {
  out << std::string(enum_name(v));
}
void emit_value(YAML::Emitter& out, const std::array<double, 2>& v) {
  out << YAML::Flow << YAML::BeginSeq << number_text(v[0]) << number_text(v[1]) << YAML::EndSeq;
}
void emit_value(YAML::Emitter& out, const std::vector<std::string>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& s : v) out << s;
  out << YAML::EndSeq;
}
void emit_value(YAML::Emitter& out, const std::vector<int>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (int c : v) out << fmt::format("{}", c);
  out << YAML::EndSeq;
}
void emit_value(YAML::Emitter& out, const LayersPerStage& v) {
  if (v.split != LayerSplit::list) {
    out << std::string(enum_name(v.split));
    return;
  }
  out << YAML::Flow << YAML::BeginSeq;
  for (int c : v.counts) out << fmt::format("{}", c);
  out << YAML::EndSeq;
}

// One source of weight 1 as its glob (what a config without a mixture says),
// else the list, one flow mapping per source, the weights as given.
void emit_sources(YAML::Emitter& out, const std::vector<DataSource>& sources) {
  if (sources.empty() || (sources.size() == 1 && sources[0].weight == 1.0)) {
    emit_value(out, sources.empty() ? std::string() : sources[0].path);
    return;
  }
  out << YAML::BeginSeq;
  for (const DataSource& s : sources)
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted << s.path
        << YAML::Key << "weight" << YAML::Value << number_text(s.weight) << YAML::EndMap;
  out << YAML::EndSeq;
}

Field data_train_field() {
  Field f;
  f.path = "data.train";
  f.required = true;
  f.decode = [](const YAML::Node& n, Config& c, const Locator& loc) { decode_sources(n, "data.train", loc, c); };
  f.emit = [](const Config& c, YAML::Emitter& out) { emit_sources(out, c.data.train); };
  return f;
}

// `get` is a generic lambda returning the member for both Config& and const Config&.
template <class Get>
Field make_field(std::string path, bool required, Get get) {
  Field f;
  f.path = path;
  f.required = required;
  f.decode = [get, path](const YAML::Node& n, Config& c, const Locator& loc) { decode_value(n, path, loc, get(c)); };
  f.emit = [get](const Config& c, YAML::Emitter& out) { emit_value(out, get(c)); };
  return f;
}

constexpr bool required = true, optional = false;
#define LATTICE_KEY(section, key, presence) \
  make_field(                               \
      #section "." #key, presence, [](auto& c) -> auto& { return c.section.key; })

std::vector<Field> build_fields() {
  return {
      LATTICE_KEY(model, arch, optional),
      LATTICE_KEY(model, n_layer, required),
      LATTICE_KEY(model, n_head, required),
      LATTICE_KEY(model, n_kv_head, optional),
      LATTICE_KEY(model, d_model, required),
      LATTICE_KEY(model, d_ff, optional),
      LATTICE_KEY(model, vocab_size, required),
      LATTICE_KEY(model, max_seq_len, required),
      LATTICE_KEY(model, tie_embeddings, optional),
      LATTICE_KEY(model, dropout, optional),
      LATTICE_KEY(model, norm_eps, optional),
      LATTICE_KEY(model, rope_theta, optional),
      LATTICE_KEY(model, init_std, optional),
      LATTICE_KEY(model, vocab_multiple, optional),
      LATTICE_KEY(parallel, tp, optional),
      LATTICE_KEY(parallel, pp, optional),
      LATTICE_KEY(parallel, dp, optional),
      LATTICE_KEY(parallel, order, optional),
      LATTICE_KEY(parallel, schedule, optional),
      LATTICE_KEY(parallel, microbatches, optional),
      LATTICE_KEY(parallel, virtual_stages, optional),
      LATTICE_KEY(parallel, layers_per_stage, optional),
      LATTICE_KEY(parallel, zero, optional),
      LATTICE_KEY(parallel, dp_bucket_mb, optional),
      LATTICE_KEY(parallel, recompute_layers_per_stage, optional),
      LATTICE_KEY(parallel, recompute_attention, optional),
      LATTICE_KEY(parallel, head_chunk_tokens, optional),
      LATTICE_KEY(parallel, cpu_attention, optional),
      LATTICE_KEY(train, steps, required),
      LATTICE_KEY(train, stop_at_step, optional),
      LATTICE_KEY(train, global_batch, required),
      LATTICE_KEY(train, micro_batch, required),
      LATTICE_KEY(train, seq_len, required),
      LATTICE_KEY(train, eval_every, optional),
      LATTICE_KEY(train, eval_steps, optional),
      LATTICE_KEY(optimizer, name, optional),
      LATTICE_KEY(optimizer, lr, required),
      LATTICE_KEY(optimizer, betas, optional),
      LATTICE_KEY(optimizer, eps, optional),
      LATTICE_KEY(optimizer, weight_decay, optional),
      LATTICE_KEY(optimizer, grad_clip, optional),
      LATTICE_KEY(optimizer, momentum, optional),
      LATTICE_KEY(optimizer.schedule, warmup_steps, optional),
      LATTICE_KEY(optimizer.schedule, decay_steps, optional),
      LATTICE_KEY(optimizer.schedule, decay, optional),
      LATTICE_KEY(optimizer.schedule, min_lr, optional),
      data_train_field(),
      LATTICE_KEY(data, val, optional),
      LATTICE_KEY(data, tokenizer, optional),
      LATTICE_KEY(data, vocab_dir, optional),
      LATTICE_KEY(checkpoint, dir, optional),
      LATTICE_KEY(checkpoint, every, optional),
      LATTICE_KEY(checkpoint, keep_last, optional),
      LATTICE_KEY(checkpoint, resume, optional),
      LATTICE_KEY(checkpoint, init_from, optional),
      LATTICE_KEY(checkpoint, at_end, optional),
      LATTICE_KEY(log, dir, optional),
      LATTICE_KEY(log, every, optional),
      LATTICE_KEY(log, tensorboard, optional),
      LATTICE_KEY(log, trace, optional),
      LATTICE_KEY(log, per_rank, optional),
      LATTICE_KEY(runtime, device, optional),
      LATTICE_KEY(runtime, precision, optional),
      LATTICE_KEY(runtime.loss_scale, initial, optional),
      LATTICE_KEY(runtime.loss_scale, growth_factor, optional),
      LATTICE_KEY(runtime.loss_scale, backoff_factor, optional),
      LATTICE_KEY(runtime.loss_scale, growth_interval, optional),
      LATTICE_KEY(runtime.loss_scale, min, optional),
      LATTICE_KEY(runtime.loss_scale, max, optional),
      LATTICE_KEY(runtime, seed, optional),
      LATTICE_KEY(runtime, threads, optional),
      LATTICE_KEY(runtime, comm_timeout_s, optional),
      LATTICE_KEY(runtime, peak_flops, optional),
  };
}
#undef LATTICE_KEY

const std::set<std::string>& sections() {
  static const std::set<std::string> s = [] {
    std::set<std::string> out{""};
    for (const auto& f : fields())
      for (std::string p = parent_path(f.path); !p.empty(); p = parent_path(p)) out.insert(p);
    return out;
  }();
  return s;
}

}  // namespace

const std::vector<Field>& fields() {
  static const std::vector<Field> table = build_fields();
  return table;
}

const Field* find_field(const std::string& path) {
  for (const auto& f : fields())
    if (f.path == path) return &f;
  return nullptr;
}

bool is_section(const std::string& path) { return sections().count(path) > 0; }

std::vector<std::string> child_names(const std::string& section) {
  std::vector<std::string> out;
  auto add = [&](const std::string& path) {
    std::string name = section.empty() ? path : path.substr(section.size() + 1);
    name = name.substr(0, name.find('.'));
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  for (const auto& f : fields())
    if (section.empty() || f.path.rfind(section + ".", 0) == 0) add(f.path);
  return out;
}

std::string suggest_key(const std::string& path) {
  std::string section = parent_path(path);
  std::string name = section.empty() ? path : path.substr(section.size() + 1);
  if (is_section(section))
    if (auto near = closest(name, child_names(section)); !near.empty()) return join_path(section, near);
  // The same name in another section ("train.lr" -> "optimizer.lr").
  for (const auto& f : fields())
    if (f.path.size() > name.size() &&
        f.path.compare(f.path.size() - name.size() - 1, std::string::npos, "." + name) == 0)
      return f.path;
  return "";
}

}  // namespace lattice::config_detail
