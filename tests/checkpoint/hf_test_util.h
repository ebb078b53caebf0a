// Helpers of the HF interop tests (test_hf_convert.cpp, test_hf_llama.cpp):
// reading golden HF directories, editing copies of them, and running a
// logical model on one rank to get its logits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/model_checkpoint.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "comm/self_communicator.h"
#include "models/registry.h"
#include "support/test_support.h"
#include "tp/sharding.h"

namespace lattice::checkpoint::test_hf {

using json = nlohmann::json;

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::equal(static_cast<const char*>(a.raw()), static_cast<const char*>(a.raw()) + a.nbytes(),
                    static_cast<const char*>(b.raw()));
}

inline json read_json_file(const std::string& path) { return json::parse(test::read_bytes(path)); }

inline NamedTensors read_all(const std::string& path) {
  SafetensorsFile f = SafetensorsFile::open(path);
  NamedTensors out;
  for (const std::string& n : f.names()) out.emplace_back(n, f.read(n));
  return out;
}

// A copy of the HF directory `golden` in `dir`, with its config and tensors edited.
inline std::string edited_golden(
    const std::string& golden, const std::string& dir, const std::function<void(json&)>& edit_config,
    const std::function<void(NamedTensors&)>& edit_tensors = [](NamedTensors&) {}) {
  std::filesystem::create_directories(dir);
  json c = read_json_file(golden + "/config.json");
  edit_config(c);
  test::write_bytes(dir + "/config.json", c.dump(2));
  NamedTensors t = read_all(golden + "/model.safetensors");
  edit_tensors(t);
  write_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
  return dir;
}

// How a test reads the (B, T, V_l) logits a model's last forward computed.
using LogitsOf = std::function<Tensor(LanguageModel&, const ModelContext&)>;

// Lattice's logits (B, T, V) for `ids` with the weights of `m`, on one rank
// whose vocabulary is padded to a multiple of `vocab_multiple`.
inline Tensor lattice_logits(const LogicalModel& m, const Tensor& ids, int64_t vocab_multiple,
                             const LogitsOf& logits_of) {
  comm::Group tp = comm::self_group("tp");
  std::vector<ParamSpec> specs = model_param_specs(m.config);
  TpShard shard{.vocab_multiple = vocab_multiple};
  FlatParams params(specs, DType::f32, Device::cpu(), shard);
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor dst = params.value(specs[i].name);
    dst.copy_from(tp::shard_from_logical(specs[i], shard, m.tensors[i].second, false));
  }
  auto model = build_model(m.config, params, tp);
  const int64_t B = ids.dim(0), T = ids.dim(1), V = m.config.vocab_size;
  auto ctx = model->make_context(B, T);
  Tensor targets = Tensor::zeros({B, T}, DType::i32);
  model->forward(*ctx, ids, targets, {.seed = 1, .step = 1, .sample0 = 0, .train = false});
  Tensor padded = logits_of(*model, *ctx);
  const int64_t Vp = padded.dim(-1);
  EXPECT_EQ(Vp, padded_vocab(V, shard));
  Tensor out = Tensor::empty({B, T, V}, DType::f32);
  for (int64_t r = 0; r < B * T; ++r) std::copy_n(padded.data<float>() + r * Vp, V, out.data<float>() + r * V);
  return out;
}

}  // namespace lattice::checkpoint::test_hf
