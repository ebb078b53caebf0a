// The Hugging Face sharded-tensor index (`model.safetensors.index.json`) and a
// reader of tensors spread over the files it names.
//
//   {"metadata": {"total_size": <bytes of tensor data in all files>},
//    "weight_map": {"<tensor name>": "<file name in the same directory>", ...}}
//
// Lattice checkpoints use one index for the model and one for the optimizer
// state (docs/checkpoint-format.md); HF exports use the model one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace lattice::checkpoint {

struct TensorIndex {
  uint64_t total_size = 0;
  std::map<std::string, std::string> weight_map;  // tensor name -> file name
};

std::string index_json(const TensorIndex& index);
// Parses and checks an index file: one Error line naming the file and the field.
TensorIndex read_index(const std::string& path);

// "model-00002-of-00004.safetensors" for (prefix "model", k = 2, n = 4).
std::string shard_file_name(const std::string& prefix, int k, int n);

// The tensors an index names, read through memory maps of its files (each
// opened and validated once). Names the index lists must exist in the file
// the index names, with that file inside the directory.
class IndexedTensors {
 public:
  static IndexedTensors open(const std::string& dir, const std::string& index_name);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.weight_map.count(name) != 0; }
  const SafetensorsInfo& info(const std::string& name) const;  // Error naming the index if absent
  Tensor read(const std::string& name) const;                  // a new CPU tensor

 private:
  const SafetensorsFile& file_of(const std::string& name) const;
  std::string dir_, index_path_;
  TensorIndex index_;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files_;  // file name -> opened file
};

}  // namespace lattice::checkpoint
