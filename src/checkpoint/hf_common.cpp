#include "checkpoint/hf_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/posix_file.h"

namespace lattice::checkpoint::hf {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxConfigBytes = size_t(16) << 20;

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

void prepare_out_dir(const std::string& out_dir) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    LATTICE_INPUT_CHECK(fs::is_directory(out_dir, ec), "{}: exists and is not a directory", out_dir);
    LATTICE_INPUT_CHECK(fs::is_empty(out_dir, ec), "{}: exists and is not empty; name a new or empty output directory",
                        out_dir);
  }
  fs::create_directories(out_dir, ec);
  LATTICE_INPUT_CHECK(!ec, "{}: cannot create: {}", out_dir, ec.message());
}

}  // namespace

double shortest(float v) { return std::stod(fmt::format("{}", v)); }

json read_json(const std::string& path, const char* what) {
  std::error_code ec;
  LATTICE_INPUT_CHECK(fs::is_regular_file(path, ec), "{}: missing ({})", path, what);
  json j = json::parse(read_text_file(path, kMaxConfigBytes), nullptr, false);
  LATTICE_INPUT_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", path);
  return j;
}

std::string model_type(const std::string& hf_dir) {
  std::error_code ec;
  LATTICE_INPUT_CHECK(fs::is_directory(hf_dir, ec), "{}: not a directory (expected an HF model directory)", hf_dir);
  const std::string path = hf_dir + "/config.json";
  json c = read_json(path, "an HF model directory holds config.json and model.safetensors");
  return config_value<std::string>(c, "model_type", "", path);
}

const json* find_key(const json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (c.contains(k) && !c[k].is_null()) return &c[k];
  return nullptr;
}

int config_int(const json& c, std::initializer_list<const char*> keys, const std::string& path, const char* cls) {
  const json* v = find_key(c, keys);
  const char* key = *keys.begin();
  LATTICE_INPUT_CHECK(v != nullptr, "{}: '{}' is missing ({} needs it)", path, key, cls);
  LATTICE_INPUT_CHECK(v->is_number_integer() && v->get<int64_t>() > 0 && v->get<int64_t>() <= INT32_MAX,
                      "{}: '{}' is {}, expected a positive integer", path, key, v->dump());
  return v->get<int>();
}

HfTensors::HfTensors(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir + "/" + kWeights, ec)) {
    where_ = dir + "/" + kWeights;
    single_ = SafetensorsFile::open(where_);
  } else if (fs::exists(dir + "/" + kIndex, ec)) {
    where_ = dir + "/" + kIndex;
    sharded_ = IndexedTensors::open(dir, kIndex);
  } else {
    LATTICE_INPUT_FAIL(
        "{}: no {} or {} (PyTorch .bin weights are not read: re-save with "
        "save_pretrained(dir, safe_serialization=True))",
        dir, kWeights, kIndex);
  }
}

std::vector<std::string> HfTensors::names() const { return single_ ? single_->names() : sharded_->names(); }
bool HfTensors::contains(const std::string& n) const { return single_ ? single_->contains(n) : sharded_->contains(n); }
const SafetensorsInfo& HfTensors::info(const std::string& n) const {
  return single_ ? single_->info(n) : sharded_->info(n);
}
Tensor HfTensors::read(const std::string& n) const { return single_ ? single_->read(n) : sharded_->read(n); }

Tensor read_param(const HfTensors& files, const std::string& name, const ParamSpec& spec, bool transposed,
                  const ModelConfig& cfg) {
  LATTICE_INPUT_CHECK(files.contains(name),
                      "{}: no tensor '{}', which config.json ({} layers, tie_word_embeddings {}) needs", files.where(),
                      name, cfg.n_layer, cfg.tie_embeddings);
  const SafetensorsInfo& info = files.info(name);
  Shape want = transposed ? Shape{spec.shape[1], spec.shape[0]} : spec.shape;
  LATTICE_INPUT_CHECK(info.shape == want, "{}: '{}' has shape {}, expected {}{} from config.json", files.where(), name,
                      shape_str(info.shape), shape_str(want), transposed ? " (HF Conv1D layout: (in, out))" : "");
  LATTICE_INPUT_CHECK(info.foreign.empty() && is_float(info.dtype),
                      "{}: '{}' is {}, expected a float dtype (F32, F16, BF16, F64)", files.where(), name,
                      info.dtype_name());
  Tensor t = files.read(name);
  if (t.dtype() != DType::f32) t = t.to(DType::f32);
  return transposed ? transpose2d(t) : t;
}

void check_leftovers(const HfTensors& files, const std::set<std::string>& used, const LogicalModel& m,
                     const std::function<bool(const std::string&)>& skip, const char* cls) {
  for (const std::string& name : files.names()) {
    if (used.count(name) || skip(name)) continue;
    if (name == "lm_head.weight" && m.config.tie_embeddings) {
      const Tensor& embedding = m.tensors.front().second;
      const SafetensorsInfo& info = files.info(name);
      bool same = info.shape == embedding.shape() && info.foreign.empty() && is_float(info.dtype);
      if (same) {
        Tensor head = files.read(name).to(DType::f32);
        same = std::equal(head.data<float>(), head.data<float>() + head.numel(), embedding.data<float>());
      }
      LATTICE_INPUT_CHECK(same,
                          "{}: lm_head.weight differs from the token embedding, but config.json has "
                          "tie_word_embeddings true (set it to false for an untied head)",
                          files.where());
      continue;
    }
    LATTICE_INPUT_FAIL("{}: tensor '{}' is not a parameter of {} ({} layers); Lattice cannot import it", files.where(),
                       name, cls, m.config.n_layer);
  }
}

Tensor transpose2d(const Tensor& t) {
  LATTICE_CHECK(t.ndim() == 2 && t.dtype() == DType::f32 && t.device().is_cpu(), "transpose2d: got {} {}",
                shape_str(t.shape()), dtype_name(t.dtype()));
  const int64_t R = t.dim(0), K = t.dim(1);
  Tensor out = Tensor::empty({K, R}, DType::f32);
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) dst[k * R + r] = src[r * K + k];
  return out;
}

void write_hf_dir(NamedTensors tensors, const std::string& config_json, const std::string& out_dir) {
  // The reference writer's order: larger dtypes first, then by name.
  std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    size_t sa = dtype_size(a.second.dtype()), sb = dtype_size(b.second.dtype());
    return sa != sb ? sa > sb : a.first < b.first;
  });
  std::error_code ec;
  const bool existed = fs::exists(out_dir, ec);
  prepare_out_dir(out_dir);  // empty or new: every file in it is this command's
  try {
    write_safetensors(out_dir + "/" + kWeights, tensors, {{"format", "pt"}});
    write_file_synced(out_dir + "/config.json", config_json);
    fsync_path(out_dir);
  } catch (const WriteError& e) {
    // A partial model.safetensors would make the same command refuse the
    // directory as not empty (and is no model): leave it as it was.
    fs::remove(out_dir + "/" + kWeights, ec);
    fs::remove(out_dir + "/config.json", ec);
    if (!existed) fs::remove(out_dir, ec);
    fail_output_write(e, out_dir, fmt::format("nothing was left in '{}'", out_dir));
  }
}

}  // namespace lattice::checkpoint::hf
