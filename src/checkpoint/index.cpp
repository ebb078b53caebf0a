#include "checkpoint/index.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace lattice::checkpoint {

std::string index_json(const TensorIndex& index) {
  nlohmann::ordered_json j;
  j["metadata"]["total_size"] = index.total_size;
  j["weight_map"] = nlohmann::ordered_json::object();
  for (const auto& [name, file] : index.weight_map) j["weight_map"][name] = file;
  return j.dump(2) + "\n";
}

TensorIndex read_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LATTICE_CHECK(in.good(), "{}: cannot open the tensor index (is this a checkpoint directory?)", path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  LATTICE_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", path);
  TensorIndex index;
  if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size")) {
    LATTICE_CHECK(j["metadata"]["total_size"].is_number_unsigned(), "{}: metadata.total_size is not a byte count",
                  path);
    index.total_size = j["metadata"]["total_size"].get<uint64_t>();
  }
  LATTICE_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "{}: no weight_map object", path);
  for (const auto& [name, file] : j["weight_map"].items()) {
    LATTICE_CHECK(file.is_string(), "{}: weight_map['{}'] is not a file name", path, name);
    const std::string f = file.get<std::string>();
    LATTICE_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                  "{}: weight_map['{}'] = '{}' is not a file name in the checkpoint directory", path, name, f);
    index.weight_map[name] = f;
  }
  return index;
}

std::string shard_file_name(const std::string& prefix, int k, int n) {
  return fmt::format("{}-{:05d}-of-{:05d}.safetensors", prefix, k, n);
}

IndexedTensors IndexedTensors::open(const std::string& dir, const std::string& index_name) {
  IndexedTensors t;
  t.dir_ = dir;
  t.index_path_ = dir + "/" + index_name;
  t.index_ = read_index(t.index_path_);
  for (const auto& [name, file] : t.index_.weight_map) {
    auto& f = t.files_[file];
    if (!f) f = std::make_shared<SafetensorsFile>(SafetensorsFile::open(dir + "/" + file));
    LATTICE_CHECK(f->contains(name), "{}: names '{}' in {}, which does not hold it", t.index_path_, name, file);
  }
  return t;
}

std::vector<std::string> IndexedTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : index_.weight_map) out.push_back(name);
  return out;
}

const SafetensorsFile& IndexedTensors::file_of(const std::string& name) const {
  auto it = index_.weight_map.find(name);
  LATTICE_CHECK(it != index_.weight_map.end(), "{}: no tensor '{}' in the checkpoint", index_path_, name);
  return *files_.at(it->second);
}

const SafetensorsInfo& IndexedTensors::info(const std::string& name) const { return file_of(name).info(name); }

Tensor IndexedTensors::read(const std::string& name) const { return file_of(name).read(name); }

}  // namespace lattice::checkpoint
