// safetensors: the tensor file format of the Hugging Face ecosystem.
//
// Layout, exactly as the reference implementation writes it:
//   [8 bytes]  N, the header length, unsigned little-endian
//   [N bytes]  UTF-8 JSON object, padded with spaces (0x20) to a multiple of 8:
//              { "__metadata__": {"key": "value", ...},          (optional)
//                "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ... }
//   [rest]     the byte buffer; data_offsets are relative to its start.
// Tensors are row-major, little-endian, and tile the buffer in offset order
// with no gaps or overlaps; the last one ends at the end of the file.
// Lattice reads and writes the dtypes it has: F64, F32, BF16, F16, I32, U16.
// A tensor of another safetensors dtype (BOOL, U8, I64, ...; the causal-mask
// buffers older transformers saved) is listed with its name and size, so a
// file holding one opens, but reading it is an Error naming the dtype.
//
// Invariants: a SafetensorsFile is a read-only memory map of a file that
// passed every check of the format (the reader's list is in safetensors.cpp);
// each malformed file is one lattice::Error line naming the file, the tensor
// or field, what was found and what was expected. The writer writes tensors in
// the order given (pass them largest dtype first to keep every tensor aligned
// to its element size, as the reference does) and fsyncs the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "checkpoint/checksum.h"
#include "core/tensor.h"

namespace lattice::checkpoint {

// The reference implementation's limit on the JSON header.
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

std::string_view safetensors_dtype_name(DType t);  // "F32", ...
// Lattice's dtype for a safetensors name; an Error for names Lattice lacks.
DType dtype_from_safetensors(std::string_view name);

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (any device; copied to the host when needed) in the given
// order with `metadata` as __metadata__ (omitted when empty), then fsyncs.
// Returns the size and Checksum64 of the bytes written, computed on the way.
FileDigest write_safetensors(const std::string& path, const NamedTensors& tensors,
                             const std::map<std::string, std::string>& metadata = {});

// A tensor as the header names it, before its bytes exist.
struct TensorDecl {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t nbytes() const;
};

// Writes a safetensors file one tensor at a time: the header from the
// declarations at construction, then each tensor's bytes as it is given, in
// the declared order, so a caller holds one tensor at a time (a checkpoint's
// logical tensors, gathered one by one). The bytes are write_safetensors'
// for the same tensors. Each put() checks the tensor against its
// declaration; finish() checks that every one came, then fsyncs.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorDecl> decls,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void put(const std::string& name, const Tensor& t);  // any device
  FileDigest finish();
  const std::vector<TensorDecl>& decls() const { return decls_; }

 private:
  struct Out;
  std::string path_;
  std::vector<TensorDecl> decls_;
  size_t next_ = 0;
  std::unique_ptr<Out> out_;
};

struct SafetensorsInfo {
  DType dtype = DType::f32;  // meaningless when `foreign` is set
  std::string foreign;       // a safetensors dtype Lattice has no DType for ("BOOL", "I64", ...), else empty
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
  uint64_t nbytes() const { return end - begin; }
  bool is(DType t) const { return foreign.empty() && dtype == t; }
  std::string_view dtype_name() const;  // "F32", or the foreign name
};

class SafetensorsFile {
 public:
  // Maps and validates the whole file; throws on the first problem.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t header_size() const { return header_size_; }             // N, without the 8-byte length
  const std::vector<std::string>& names() const { return names_; }  // in offset order
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  const SafetensorsInfo& info(const std::string& name) const;  // Error naming the file if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes inside the mapping; valid while this object lives.
  std::span<const std::byte> bytes(const std::string& name) const;
  Tensor read(const std::string& name) const;  // a new CPU tensor
  // Copies into `dst` (any device), whose dtype and shape must match the file.
  void read_into(const std::string& name, Tensor& dst) const;

 private:
  // info(name) of a tensor Lattice reads: a foreign dtype is one InputError line.
  const SafetensorsInfo& readable(const std::string& name) const;
  struct Mapping;
  std::string path_;
  std::shared_ptr<const Mapping> map_;
  uint64_t file_size_ = 0, header_size_ = 0;
  std::vector<std::string> names_;
  std::unordered_map<std::string, SafetensorsInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace lattice::checkpoint
