#include "checkpoint/safetensors.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "checkpoint/posix_file.h"
#include "core/error.h"

// What the reader checks, each as one Error line naming the file:
//   the file holds the 8-byte length; N <= 100 MB (kSafetensorsMaxHeader);
//   8 + N <= file size; the header is UTF-8 JSON and an object; no key
//   appears twice in any object; __metadata__ is an object of strings;
//   each tensor is an object of exactly dtype / shape / data_offsets; dtype is
//   one Lattice has or another of the format's (read() refuses those); shape is a list of non-negative integers;
//   data_offsets is [begin, end] of unsigned integers with begin <= end <= buffer size; end - begin == dtype size x
//   numel; the tensors, sorted by offset, start at 0 and leave no gap or overlap; the last ends at the end of the file.
// Like the reference reader, a header not padded to a multiple of 8 is read
// (old writers did not pad); the writer always pads.

namespace lattice::checkpoint {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr DType kDTypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i32, DType::u16};
// The format's other dtypes and their element sizes: listed, never read.
constexpr std::pair<std::string_view, uint64_t> kForeignDTypes[] = {
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U32", 4}, {"I64", 8}, {"U64", 8}};

std::string_view json_kind(const json& j) {
  if (j.is_object()) return "an object";
  if (j.is_array()) return "a list";
  if (j.is_string()) return "a string";
  if (j.is_boolean()) return "a boolean";
  if (j.is_null()) return "null";
  if (j.is_number_float()) return "a non-integer number";
  if (j.is_number_integer() && !j.is_number_unsigned()) return "a negative number";
  return "a number";
}

// ---------------------------------------------------------------- writing

// Buffers small pieces into large sequential writes and checksums every byte.
class HashingWriter {
 public:
  explicit HashingWriter(PosixFile& file) : file_(file) { stage_.reserve(kStage); }
  void put(const void* data, size_t bytes) {
    sum_.update(data, bytes);
    if (bytes >= kDirect) {
      flush();
      file_.write_all(data, bytes);
      return;
    }
    if (stage_.size() + bytes > kStage) flush();
    auto* p = static_cast<const char*>(data);
    stage_.insert(stage_.end(), p, p + bytes);
  }
  void flush() {
    file_.write_all(stage_.data(), stage_.size());
    stage_.clear();
  }
  FileDigest digest() const { return {sum_.bytes(), sum_.digest()}; }

 private:
  static constexpr size_t kStage = size_t(8) << 20, kDirect = size_t(1) << 20;
  PosixFile& file_;
  Checksum64 sum_;
  std::vector<char> stage_;
};

std::string build_header(const std::string& path, const std::vector<TensorDecl>& decls,
                         const std::map<std::string, std::string>& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const TensorDecl& d : decls) {
    LATTICE_CHECK(!d.name.empty() && d.name != kMetadataKey, "safetensors {}: '{}' is not a usable tensor name", path,
                  d.name);
    LATTICE_CHECK(!header.contains(d.name), "safetensors {}: tensor '{}' is given twice", path, d.name);
    uint64_t end = offset + d.nbytes();
    header[d.name] = {
        {"dtype", std::string(safetensors_dtype_name(d.dtype))}, {"shape", d.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    LATTICE_FAIL("safetensors {}: tensor names and metadata must be valid UTF-8 ({})", path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f64:
      return "F64";
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::u16:
      return "U16";
  }
  return "?";
}

DType dtype_from_safetensors(std::string_view name) {
  for (DType t : kDTypes)
    if (safetensors_dtype_name(t) == name) return t;
  LATTICE_FAIL("dtype '{}' is not one Lattice reads (expected F64, F32, BF16, F16, I32 or U16)", name);
}

std::string_view SafetensorsInfo::dtype_name() const {
  return foreign.empty() ? safetensors_dtype_name(dtype) : std::string_view(foreign);
}

uint64_t TensorDecl::nbytes() const { return uint64_t(shape_numel(shape)) * dtype_size(dtype); }

struct SafetensorsWriter::Out {
  explicit Out(const std::string& path) : file(PosixFile::create(path)), hashing(file) {}
  PosixFile file;
  HashingWriter hashing;
};

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorDecl> decls,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), decls_(std::move(decls)) {
  const std::string header = build_header(path, decls_, metadata);
  const uint64_t length = header.size();
  unsigned char length_le[8];
  for (int i = 0; i < 8; ++i) length_le[i] = static_cast<unsigned char>(length >> (8 * i));
  out_ = std::make_unique<Out>(path);
  out_->hashing.put(length_le, 8);
  out_->hashing.put(header.data(), header.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::put(const std::string& name, const Tensor& t) {
  LATTICE_CHECK(out_ != nullptr, "safetensors {}: tensor '{}' after finish()", path_, name);
  LATTICE_CHECK(next_ < decls_.size(), "safetensors {}: tensor '{}' beyond the {} declared", path_, name,
                decls_.size());
  const TensorDecl& d = decls_[next_];
  LATTICE_CHECK(t.defined(), "safetensors {}: tensor '{}' is undefined", path_, name);
  LATTICE_CHECK(name == d.name && t.dtype() == d.dtype && t.shape() == d.shape,
                "safetensors {}: tensor {} is '{}' {} {}, declared as '{}' {} {}", path_, next_, name,
                safetensors_dtype_name(t.dtype()), shape_str(t.shape()), d.name, safetensors_dtype_name(d.dtype),
                shape_str(d.shape));
  ++next_;
  if (t.nbytes() == 0) return;
  if (t.device().is_cpu()) return out_->hashing.put(t.raw(), t.nbytes());
  const Tensor host = t.to(Device::cpu());
  out_->hashing.put(host.raw(), host.nbytes());
}

FileDigest SafetensorsWriter::finish() {
  LATTICE_CHECK(out_ != nullptr, "safetensors {}: finish() twice", path_);
  LATTICE_CHECK(next_ == decls_.size(), "safetensors {}: {} of {} declared tensors written (next: '{}')", path_, next_,
                decls_.size(), next_ < decls_.size() ? decls_[next_].name : "");
  out_->hashing.flush();
  out_->file.sync();
  out_->file.close();
  const FileDigest d = out_->hashing.digest();
  out_.reset();
  return d;
}

FileDigest write_safetensors(const std::string& path, const NamedTensors& tensors,
                             const std::map<std::string, std::string>& metadata) {
  std::vector<TensorDecl> decls;
  for (const auto& [name, t] : tensors) {
    LATTICE_CHECK(t.defined(), "safetensors {}: tensor '{}' is undefined", path, name);
    decls.push_back({name, t.dtype(), t.shape()});
  }
  SafetensorsWriter w(path, std::move(decls), metadata);
  for (const auto& [name, t] : tensors) w.put(name, t);
  return w.finish();
}

// ---------------------------------------------------------------- reading

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t bytes = 0;
  Mapping(void* a, size_t n) : addr(a), bytes(n) {}
  ~Mapping() { ::munmap(addr, bytes); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const std::byte* data() const { return static_cast<const std::byte*>(addr); }
};

namespace {

// Parses the header text; duplicate keys (which JSON parsers silently merge)
// are an error naming the key and the object that holds it.
json parse_header_json(const std::string& path, std::string_view text) {
  std::vector<std::set<std::string>> seen(4);  // keys per object depth
  std::vector<std::string> last_key(4);
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    size_t d = size_t(depth);
    if (d + 2 > seen.size()) seen.resize(d + 2), last_key.resize(d + 2);
    if (event == json::parse_event_t::object_start) seen[d + 1].clear();
    if (event == json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen[d].insert(key).second) {
        if (d == 1) LATTICE_FAIL("safetensors {}: header: '{}' appears twice", path, key);
        LATTICE_FAIL("safetensors {}: header: '{}' has the key '{}' twice", path, last_key[d - 1], key);
      }
      last_key[d] = key;
    }
    return true;
  };
  // nlohmann's lexer stops at a NUL as at the end of input; JSON allows none.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos)
    LATTICE_FAIL("safetensors {}: header is not valid JSON: a NUL byte at byte {} of {}", path, nul, text.size());
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    LATTICE_FAIL("safetensors {}: header is not valid JSON: {}", path, what);
  }
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& j) {
  LATTICE_CHECK(j.is_object(), "safetensors {}: header: __metadata__ is {}, expected an object of strings", path,
                json_kind(j));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    LATTICE_CHECK(value.is_string(), "safetensors {}: header: __metadata__['{}'] is {}, expected a string", path, key,
                  json_kind(value));
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

Shape parse_shape(const std::string& where, const json& j) {
  LATTICE_CHECK(j.is_array(), "{}: shape is {}, expected a list of non-negative integers", where, json_kind(j));
  Shape shape;
  for (const json& d : j) {
    LATTICE_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX),
                  "{}: shape {} has an entry that is {}, expected non-negative integers", where, j.dump(),
                  json_kind(d));
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

SafetensorsInfo parse_tensor_info(const std::string& path, const std::string& name, const json& j,
                                  uint64_t buffer_size) {
  std::string where = fmt::format("safetensors {}: tensor '{}'", path, name);
  LATTICE_CHECK(j.is_object(), "{}: is {}, expected an object with dtype, shape and data_offsets", where, json_kind(j));
  for (const auto& [key, value] : j.items())
    LATTICE_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
                  "{}: unknown field '{}' (expected dtype, shape and data_offsets)", where, key);
  for (const char* key : {"dtype", "shape", "data_offsets"})
    LATTICE_CHECK(j.contains(key), "{}: the field '{}' is missing", where, key);

  SafetensorsInfo info;
  const json& dtype = j["dtype"];
  LATTICE_CHECK(dtype.is_string(), "{}: dtype is {}, expected a string such as \"F32\"", where, json_kind(dtype));
  auto dtype_name = dtype.get<std::string>();
  auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                            [&](DType t) { return safetensors_dtype_name(t) == dtype_name; });
  auto foreign = std::find_if(std::begin(kForeignDTypes), std::end(kForeignDTypes),
                              [&](const auto& d) { return d.first == dtype_name; });
  LATTICE_CHECK(known != std::end(kDTypes) || foreign != std::end(kForeignDTypes),
                "{}: dtype '{}' is not a safetensors dtype (Lattice reads F64, F32, BF16, F16, I32 and U16)", where,
                dtype_name);
  if (known != std::end(kDTypes))
    info.dtype = *known;
  else
    info.foreign = dtype_name;
  info.shape = parse_shape(where, j["shape"]);

  const json& off = j["data_offsets"];
  bool pair = off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned();
  LATTICE_CHECK(pair, "{}: data_offsets is {}, expected [begin, end] with non-negative integers", where, off.dump());
  info.begin = off[0].get<uint64_t>();
  info.end = off[1].get<uint64_t>();
  LATTICE_CHECK(info.begin <= info.end, "{}: data_offsets [{}, {}] end before they begin", where, info.begin, info.end);
  LATTICE_CHECK(info.end <= buffer_size,
                "{}: data_offsets [{}, {}] run past the end of the data buffer ({} bytes): the file is truncated",
                where, info.begin, info.end, buffer_size);

  uint64_t expect = info.foreign.empty() ? dtype_size(info.dtype) : foreign->second;
  for (int64_t d : info.shape)
    LATTICE_CHECK(!__builtin_mul_overflow(expect, uint64_t(d), &expect), "{}: shape {} overflows 64 bits", where,
                  shape_str(info.shape));
  LATTICE_CHECK(info.nbytes() == expect, "{}: data_offsets [{}, {}] hold {} bytes, but {} {} needs {}", where,
                info.begin, info.end, info.nbytes(), dtype_name, shape_str(info.shape), expect);
  return info;
}

// The tensors, in offset order, must tile [0, buffer_size) exactly.
void check_tiling(const std::string& path, const std::vector<std::string>& names,
                  const std::unordered_map<std::string, SafetensorsInfo>& infos, uint64_t buffer_size) {
  uint64_t covered = 0;
  const std::string* prev = nullptr;
  for (const std::string& name : names) {
    const SafetensorsInfo& info = infos.at(name);
    if (info.begin > covered) {
      if (prev == nullptr)
        LATTICE_FAIL("safetensors {}: gap: the first tensor '{}' begins at byte {} of the data buffer, not at 0", path,
                     name, info.begin);
      LATTICE_FAIL("safetensors {}: gap of {} bytes between tensor '{}' (ends at {}) and tensor '{}' (begins at {})",
                   path, info.begin - covered, *prev, covered, name, info.begin);
    }
    if (info.begin < covered)
      LATTICE_FAIL("safetensors {}: tensor '{}' at [{}, {}] overlaps tensor '{}', which ends at {}", path, name,
                   info.begin, info.end, *prev, covered);
    covered = info.end;
    prev = &name;
  }
  if (covered != buffer_size)
    LATTICE_FAIL(
        "safetensors {}: {} trailing bytes after the last tensor{} (the tensors cover {} of the {}-byte "
        "data buffer)",
        path, buffer_size - covered, prev ? fmt::format(" '{}'", *prev) : std::string(), covered, buffer_size);
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  {
    PosixFile file = PosixFile::open_read(path);
    f.file_size_ = file.size();
    LATTICE_CHECK(f.file_size_ >= 8,
                  "safetensors {}: the file has {} bytes; a safetensors file starts with an 8-byte header length", path,
                  f.file_size_);
    void* addr = ::mmap(nullptr, f.file_size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    LATTICE_CHECK(addr != MAP_FAILED, "safetensors {}: mmap failed: {}", path, std::strerror(errno));
    f.map_ = std::make_shared<const Mapping>(addr, size_t(f.file_size_));
  }
  const std::byte* base = f.map_->data();
  for (int i = 7; i >= 0; --i) f.header_size_ = (f.header_size_ << 8) | uint64_t(base[i]);
  LATTICE_CHECK(f.header_size_ <= kSafetensorsMaxHeader,
                "safetensors {}: header length {} exceeds the limit of {} bytes: not a safetensors file?", path,
                f.header_size_, kSafetensorsMaxHeader);
  LATTICE_CHECK(f.header_size_ <= f.file_size_ - 8,
                "safetensors {}: header length {} runs past the end of the {}-byte file: truncated?", path,
                f.header_size_, f.file_size_);
  uint64_t buffer_size = f.file_size_ - 8 - f.header_size_;

  json header = parse_header_json(path, {reinterpret_cast<const char*>(base + 8), size_t(f.header_size_)});
  LATTICE_CHECK(header.is_object(), "safetensors {}: header is {}, expected a JSON object", path, json_kind(header));
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      f.metadata_ = parse_metadata(path, value);
      continue;
    }
    f.infos_.emplace(name, parse_tensor_info(path, name, value, buffer_size));
    f.names_.push_back(name);
  }
  std::sort(f.names_.begin(), f.names_.end(), [&](const std::string& a, const std::string& b) {
    const SafetensorsInfo &x = f.infos_.at(a), &y = f.infos_.at(b);
    return std::tie(x.begin, x.end, a) < std::tie(y.begin, y.end, b);
  });
  check_tiling(path, f.names_, f.infos_, buffer_size);
  return f;
}

const SafetensorsInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  LATTICE_CHECK(it != infos_.end(), "safetensors {}: no tensor named '{}' ({} tensors in the file)", path_, name,
                names_.size());
  return it->second;
}

const SafetensorsInfo& SafetensorsFile::readable(const std::string& name) const {
  const SafetensorsInfo& i = info(name);
  LATTICE_INPUT_CHECK(i.foreign.empty(),
                      "safetensors {}: tensor '{}' is {}, which Lattice does not read (F64, F32, BF16, F16, I32, U16)",
                      path_, name, i.foreign);
  return i;
}

std::span<const std::byte> SafetensorsFile::bytes(const std::string& name) const {
  const SafetensorsInfo& i = readable(name);
  return {map_->data() + 8 + header_size_ + i.begin, size_t(i.nbytes())};
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsInfo& i = readable(name);
  LATTICE_CHECK(i.shape.size() <= 8, "safetensors {}: tensor '{}' has shape {}; Lattice tensors have at most 8 dims",
                path_, name, shape_str(i.shape));
  Tensor t = Tensor::empty(i.shape, i.dtype);
  read_into(name, t);
  return t;
}

void SafetensorsFile::read_into(const std::string& name, Tensor& dst) const {
  const SafetensorsInfo& i = info(name);
  LATTICE_CHECK(i.is(dst.dtype()) && dst.shape() == i.shape,
                "safetensors {}: tensor '{}' is {} {} in the file, but the destination is {} {}", path_, name,
                i.dtype_name(), shape_str(i.shape), safetensors_dtype_name(dst.dtype()), shape_str(dst.shape()));
  if (i.nbytes() == 0) return;
  std::span<const std::byte> src = bytes(name);
  if (!dst.device().is_cpu()) {
    Tensor host = Tensor::empty(i.shape, i.dtype);
    std::memcpy(host.raw(), src.data(), src.size());
    dst.copy_from(host);
    return;
  }
  std::memcpy(dst.raw(), src.data(), src.size());
}

}  // namespace lattice::checkpoint
