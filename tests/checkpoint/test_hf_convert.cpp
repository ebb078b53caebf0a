// lattice convert's library (checkpoint/hf_gpt2.h, checkpoint/model_checkpoint.h):
//  - golden: a GPT-2 saved by transformers itself (scripts/make_hf_gpt2_golden.py)
//    imported and run by Lattice gives transformers' logits within 1e-4, so a
//    transposition or a mis-mapped tensor cannot hide behind a symmetric round trip;
//  - round trips: HF -> Lattice -> HF reproduces the HF file byte for byte, and
//    Lattice -> HF -> Lattice gives identical tensors (untied head included);
//  - every malformed input is one Error line naming the file or key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/hf_gpt2.h"
#include "checkpoint/index.h"
#include "checkpoint_test_util.h"
#include "comm/self_communicator.h"
#include "hf_test_util.h"
#include "models/gpt2/gpt2.h"
#include "models/registry.h"
#include "support/test_support.h"
#include "tp/sharding.h"

using namespace lattice;
using namespace lattice::checkpoint;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kGolden = LATTICE_HF_GOLDEN_DIR;

using namespace test_hf;

std::string edited_golden(
    const std::string& dir, const std::function<void(json&)>& edit_config,
    const std::function<void(NamedTensors&)>& edit_tensors = [](NamedTensors&) {}) {
  return test_hf::edited_golden(kGolden, dir, edit_config, edit_tensors);
}

Tensor lattice_logits(const LogicalModel& m, const Tensor& ids, int64_t vocab_multiple) {
  return test_hf::lattice_logits(m, ids, vocab_multiple, [](LanguageModel& model, const ModelContext& ctx) {
    return dynamic_cast<gpt2::Gpt2&>(model).logits(ctx);
  });
}

class HfConvert : public ::testing::Test {
 protected:
  void SetUp() override { dir = test::make_temp_dir("hf_convert"); }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
};

}  // namespace

TEST(HfGpt2Names, DeriveFromTheParameterTable) {
  ModelConfig m;
  m.n_layer = 2, m.n_head = 2, m.d_model = 8, m.d_ff = 32, m.vocab_size = 11, m.max_seq_len = 4;
  m.tie_embeddings = false;
  std::map<std::string, HfTensorName> got;
  int transposed = 0;
  for (const ParamSpec& s : model_param_specs(m)) {
    got[s.name] = gpt2_hf_name(s);
    transposed += got[s.name].transposed;
  }
  const std::vector<std::tuple<std::string, std::string, bool>> want = {
      {"wte.weight", "transformer.wte.weight", false},
      {"wpe.weight", "transformer.wpe.weight", false},
      {"h.0.ln_1.weight", "transformer.h.0.ln_1.weight", false},
      {"h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.weight", true},
      {"h.0.attn.c_attn.bias", "transformer.h.0.attn.c_attn.bias", false},
      {"h.0.attn.c_proj.weight", "transformer.h.0.attn.c_proj.weight", true},
      {"h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_fc.weight", true},
      {"h.1.mlp.c_proj.weight", "transformer.h.1.mlp.c_proj.weight", true},
      {"h.1.mlp.c_proj.bias", "transformer.h.1.mlp.c_proj.bias", false},
      {"ln_f.bias", "transformer.ln_f.bias", false},
      {"lm_head.weight", "lm_head.weight", false}};
  for (const auto& [lattice_name, hf_name, t] : want) {
    ASSERT_TRUE(got.count(lattice_name)) << lattice_name;
    EXPECT_EQ(got[lattice_name].name, hf_name);
    EXPECT_EQ(got[lattice_name].transposed, t) << lattice_name;
  }
  EXPECT_EQ(transposed, 4 * m.n_layer);  // c_attn, attn.c_proj, c_fc, mlp.c_proj per block
}

TEST(HfGpt2Golden, LogitsMatchTransformers) {
  LogicalModel m = read_hf_gpt2(kGolden);
  EXPECT_EQ(m.config.n_layer, 2);
  EXPECT_EQ(m.config.d_model, 32);
  EXPECT_EQ(m.config.vocab_size, 300);
  EXPECT_TRUE(m.config.tie_embeddings);
  SafetensorsFile golden = SafetensorsFile::open(kGolden + "/golden_logits.safetensors");
  Tensor ids = golden.read("input_ids"), want = golden.read("logits");
  ASSERT_EQ(want.shape(), (Shape{ids.dim(0), ids.dim(1), 300}));
  for (int64_t vocab_multiple : {1, 64}) {  // unpadded, and padded to 320 rows
    Tensor got = lattice_logits(m, ids, vocab_multiple);
    double max_diff = 0, max_abs = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(got.data<float>()[i] - want.data<float>()[i])));
      max_abs = std::max(max_abs, double(std::fabs(want.data<float>()[i])));
    }
    EXPECT_LT(max_diff, 1e-4) << "vocab_multiple " << vocab_multiple;
    std::printf("vocab_multiple %d: max |logits - transformers| = %.3g (max |logit| %.3g)\n", int(vocab_multiple),
                max_diff, max_abs);
    EXPECT_GT(max_abs, 1.0);  // the logits carry signal
  }
}

TEST(HfGpt2Golden, ImportTransposesConv1DWeights) {
  LogicalModel m = read_hf_gpt2(kGolden);
  SafetensorsFile hf = SafetensorsFile::open(kGolden + "/model.safetensors");
  Tensor conv = hf.read("transformer.h.1.mlp.c_fc.weight");  // (C, 4C)
  const Tensor* fc = nullptr;
  for (const auto& [n, t] : m.tensors)
    if (n == "h.1.mlp.c_fc.weight") fc = &t;
  ASSERT_NE(fc, nullptr);
  ASSERT_EQ(fc->shape(), (Shape{128, 32}));
  for (int64_t o = 0; o < 128; ++o)
    for (int64_t c = 0; c < 32; ++c) ASSERT_EQ(fc->data<float>()[o * 32 + c], conv.data<float>()[c * 128 + o]);
}

TEST_F(HfConvert, HfRoundTripReproducesTheFile) {
  ConvertSummary in = convert_from_hf(kGolden, dir + "/ckpt");
  EXPECT_EQ(fs::path(in.out).filename(), "step_0000000");
  EXPECT_EQ(in.parameters, 300 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32);
  verify_checkpoint_dir(in.out);
  EXPECT_EQ(test::read_bytes(dir + "/ckpt/latest"), "step_0000000\n");
  EXPECT_FALSE(fs::exists(in.out + "/optimizer.safetensors.index.json"));
  json state = read_json_file(in.out + "/trainer_state.json");
  EXPECT_EQ(state["step"], 0);
  EXPECT_EQ(state["optimizer_updates"], 0);
  EXPECT_FALSE(state.contains("config"));
  EXPECT_EQ(state["model"], json::parse(R"({"arch": "gpt2", "n_layer": 2, "n_head": 2, "d_model": 32,
      "vocab_size": 300, "max_seq_len": 16, "tie_embeddings": true, "norm_eps": 1e-5})"));

  ConvertSummary out = convert_to_hf(in.out, dir + "/hf");
  EXPECT_EQ(out.parameters, in.parameters);
  NamedTensors a = read_all(kGolden + "/model.safetensors"), b = read_all(dir + "/hf/model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(same_bytes(a[i].second, b[i].second)) << a[i].first;
  }
  EXPECT_EQ(test::read_bytes(kGolden + "/model.safetensors"), test::read_bytes(dir + "/hf/model.safetensors"));
  json c0 = read_json_file(kGolden + "/config.json"), c1 = read_json_file(dir + "/hf/config.json");
  for (const char* key : {"model_type", "architectures", "activation_function", "vocab_size", "n_positions", "n_embd",
                          "n_layer", "n_head", "n_inner", "layer_norm_epsilon", "scale_attn_weights",
                          "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"})
    EXPECT_EQ(c0[key], c1[key]) << key;
  EXPECT_EQ(c1["tie_word_embeddings"], true);  // transformers' default, written explicitly
}

TEST_F(HfConvert, LatticeCheckpointRoundTripUntied) {
  Config cfg = parse_config(R"(model: { arch: gpt2, n_layer: 2, n_head: 4, d_model: 16, vocab_size: 270,
                                        max_seq_len: 8, tie_embeddings: false, dropout: 0.1, norm_eps: 1.0e-6 }
train: { steps: 10, global_batch: 2, micro_batch: 2, seq_len: 8 }
optimizer: { lr: 0.001 }
data: { train: "x_*.bin", tokenizer: bytes }
)");
  LogicalModel m{cfg.model, {}};
  uint64_t seed = 1;
  for (const ParamSpec& s : model_param_specs(cfg.model))
    m.tensors.emplace_back(s.name, test::random_tensor(s.shape, DType::f32, seed++));
  // A training checkpoint: the run's config in trainer_state.json.
  CheckpointWriter w;
  w.begin(dir + "/run/" + step_dir_name(5));
  TensorIndex index;
  for (const auto& [n, t] : m.tensors) {
    index.weight_map[n] = shard_file_name("model", 1, 1);
    index.total_size += t.nbytes();
  }
  w.write_safetensors(shard_file_name("model", 1, 1), m.tensors);
  w.write_file("model.safetensors.index.json", index_json(index));
  w.write_file("trainer_state.json", json{{"step", 5}, {"config", to_yaml(cfg)}}.dump());
  const std::string step_dir = w.commit();

  convert_to_hf(step_dir, dir + "/hf");
  json c = read_json_file(dir + "/hf/config.json");
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["layer_norm_epsilon"], 1e-6);
  EXPECT_EQ(c["resid_pdrop"], 0.1);
  EXPECT_EQ(c["n_positions"], 8);
  SafetensorsFile hf = SafetensorsFile::open(dir + "/hf/model.safetensors");
  EXPECT_EQ(hf.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_TRUE(same_bytes(hf.read("lm_head.weight"), m.tensors.back().second));  // (V, C), not transposed
  EXPECT_EQ(hf.info("transformer.h.0.attn.c_attn.weight").shape, (Shape{16, 48}));

  convert_from_hf(dir + "/hf", dir + "/back");
  LogicalModel back = read_logical_model(dir + "/back/step_0000000");
  EXPECT_EQ(back.config.n_head, 4);
  EXPECT_EQ(back.config.norm_eps, 1e-6);
  EXPECT_FALSE(back.config.tie_embeddings);
  ASSERT_EQ(back.tensors.size(), m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, m.tensors[i].first);
    EXPECT_TRUE(same_bytes(back.tensors[i].second, m.tensors[i].second)) << m.tensors[i].first;
  }
}

TEST_F(HfConvert, ReadsShardedAndBareGpt2ModelFiles) {
  LogicalModel want = read_hf_gpt2(kGolden);
  NamedTensors all = read_all(kGolden + "/model.safetensors");
  // Sharded: two files named by model.safetensors.index.json.
  fs::create_directories(dir + "/sharded");
  fs::copy_file(kGolden + "/config.json", dir + "/sharded/config.json");
  TensorIndex index;
  NamedTensors part[2];
  for (size_t i = 0; i < all.size(); ++i) {
    std::string file = shard_file_name("model", int(i % 2) + 1, 2);
    part[i % 2].push_back(all[i]);
    index.weight_map[all[i].first] = file;
    index.total_size += all[i].second.nbytes();
  }
  for (int k = 0; k < 2; ++k) write_safetensors(dir + "/sharded/" + shard_file_name("model", k + 1, 2), part[k]);
  test::write_bytes(dir + "/sharded/model.safetensors.index.json", index_json(index));
  // Bare GPT2Model names (no `transformer.`), with the old causal-mask buffers.
  edited_golden(
      dir + "/bare", [](json&) {},
      [](NamedTensors& t) {
        for (auto& [n, x] : t) n = n.substr(std::string("transformer.").size());
        t.emplace_back("h.0.attn.bias", Tensor::zeros({1, 1, 16, 16}, DType::f32));
        t.emplace_back("h.0.attn.masked_bias", Tensor::zeros({}, DType::f32));
      });
  for (const std::string& d : {dir + "/sharded", dir + "/bare"}) {
    LogicalModel got = read_hf_gpt2(d);
    ASSERT_EQ(got.tensors.size(), want.tensors.size()) << d;
    for (size_t i = 0; i < got.tensors.size(); ++i)
      EXPECT_TRUE(same_bytes(got.tensors[i].second, want.tensors[i].second)) << d << " " << got.tensors[i].first;
  }
}

// transformers 4.x saved GPT-2's causal mask `h.N.attn.bias` as a U8, later
// BOOL, buffer. The reader skips those buffers, but the safetensors reader
// refused the whole file at open ("dtype 'BOOL' is not one Lattice reads").
TEST_F(HfConvert, ReadsGpt2FilesWithBoolOrU8MaskBuffers) {
  LogicalModel want = read_hf_gpt2(kGolden);
  for (const char* dtype : {"BOOL", "U8"}) {
    const std::string d = dir + "/mask_" + dtype;
    fs::create_directories(d);
    fs::copy_file(kGolden + "/config.json", d + "/config.json");
    // The golden file with one more tensor at the end of its buffer.
    std::string file = test::read_bytes(kGolden + "/model.safetensors");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(file[i]);
    json header = json::parse(file.substr(8, n));
    const uint64_t end = file.size() - 8 - n;
    header["transformer.h.0.attn.bias"] = {
        {"dtype", dtype}, {"shape", {1, 1, 4, 4}}, {"data_offsets", {end, end + 16}}};
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    test::write_bytes(d + "/model.safetensors", test::le64(h.size()) + h + file.substr(8 + n) + std::string(16, '\1'));
    LogicalModel got = read_hf_gpt2(d);
    ASSERT_EQ(got.tensors.size(), want.tensors.size()) << dtype;
    for (size_t i = 0; i < got.tensors.size(); ++i)
      EXPECT_TRUE(same_bytes(got.tensors[i].second, want.tensors[i].second)) << dtype << " " << got.tensors[i].first;
  }
}

TEST_F(HfConvert, MalformedHfInputsAreOneLine) {
  auto nothing = [](auto&) {};
  fs::create_directories(dir + "/no_config");
  fs::copy_file(kGolden + "/model.safetensors", dir + "/no_config/model.safetensors");
  std::string e = test::error_text([&] { read_hf_gpt2(dir + "/no_config"); });
  EXPECT_HAS(e, "no_config/config.json: missing");

  fs::create_directories(dir + "/no_weights");
  fs::copy_file(kGolden + "/config.json", dir + "/no_weights/config.json");
  EXPECT_HAS(test::error_text([&] { read_hf_gpt2(dir + "/no_weights"); }), "no model.safetensors");

  auto wrong_shape = edited_golden(dir + "/shape", nothing, [](NamedTensors& t) {
    for (auto& [n, x] : t)  // stored in Lattice's (out, in) layout instead of Conv1D's
      if (n == "transformer.h.0.attn.c_attn.weight") x = x.reshape({96, 32});
  });
  e = test::error_text([&] { read_hf_gpt2(wrong_shape); });
  EXPECT_HAS(e, "'transformer.h.0.attn.c_attn.weight' has shape (96, 32), expected (32, 96)");

  auto llama = edited_golden(
      dir + "/llama", [](json& c) { c["model_type"] = "llama"; }, nothing);
  EXPECT_HAS(test::error_text([&] { read_hf_gpt2(llama); }), "model_type is 'llama', expected 'gpt2'");

  auto erf = edited_golden(
      dir + "/erf", [](json& c) { c["activation_function"] = "gelu"; }, nothing);
  e = test::error_text([&] { read_hf_gpt2(erf); });
  EXPECT_HAS(e, "erf/config.json: activation_function is 'gelu'");
  EXPECT_HAS(e, "tanh approximation");

  auto inner = edited_golden(
      dir + "/inner", [](json& c) { c["n_inner"] = 100; }, nothing);
  EXPECT_HAS(test::error_text([&] { read_hf_gpt2(inner); }), "n_inner is 100");

  // A value of the wrong JSON type is bad input, printed as one line without
  // the host and source location of an internal failure.
  auto eps = edited_golden(
      dir + "/eps", [](json& c) { c["layer_norm_epsilon"] = "1e-5"; }, nothing);
  EXPECT_THROW(read_hf_gpt2(eps), InputError);
  EXPECT_HAS(test::error_text([&] { read_hf_gpt2(eps); }),
             "eps/config.json: 'layer_norm_epsilon' is \"1e-5\", expected number");

  auto extra = edited_golden(dir + "/extra", nothing, [](NamedTensors& t) {
    t.emplace_back("score.weight", Tensor::zeros({2, 32}, DType::f32));
  });
  EXPECT_HAS(test::error_text([&] { read_hf_gpt2(extra); }), "tensor 'score.weight' is not a parameter");

  auto head = edited_golden(dir + "/head", nothing, [](NamedTensors& t) {
    t.emplace_back("lm_head.weight", Tensor::zeros({300, 32}, DType::f32));
  });
  EXPECT_HAS(test::error_text([&] { read_hf_gpt2(head); }), "tie_word_embeddings true");

  auto untied = edited_golden(
      dir + "/untied", [](json& c) { c["tie_word_embeddings"] = false; }, nothing);
  EXPECT_HAS(test::error_text([&] { read_hf_gpt2(untied); }), "no tensor 'lm_head.weight'");

  auto ints = edited_golden(
      dir + "/ints", [](json& c) { c["n_layer"] = "two"; }, nothing);
  EXPECT_HAS(test::error_text([&] { read_hf_gpt2(ints); }), "'n_layer' is \"two\", expected a positive integer");
}

TEST_F(HfConvert, RefusalsOnExportAndOutputDirectories) {
  ModelConfig m = read_hf_gpt2(kGolden).config;
  ModelConfig llama = m;
  llama.arch = ModelArch::llama;
  EXPECT_HAS(test::error_text([&] { gpt2_hf_config_json(llama); }), "model.arch: 'llama' cannot be exported");
  ModelConfig ff = m;
  ff.d_ff = 100;
  EXPECT_HAS(test::error_text([&] { gpt2_hf_config_json(ff); }), "model.d_ff: 100");

  ConvertSummary s = convert_from_hf(kGolden, dir + "/ckpt");
  EXPECT_HAS(test::error_text([&] { convert_from_hf(kGolden, dir + "/ckpt"); }), "already holds checkpoints");
  EXPECT_HAS(test::error_text([&] { convert_to_hf(dir + "/ckpt", dir + "/hf"); }),
             "name one of its step directories (latest: " + dir + "/ckpt/step_0000000)");
  fs::create_directories(dir + "/full");
  test::write_bytes(dir + "/full/x", "x");
  EXPECT_HAS(test::error_text([&] { convert_to_hf(s.out, dir + "/full"); }), "is not empty");
  // A damaged checkpoint is refused by name before anything is written.
  std::string shard = s.out + "/" + shard_file_name("model", 1, 1);
  std::string bytes = test::read_bytes(shard);
  test::write_bytes(shard, bytes.substr(0, bytes.size() - 4));
  EXPECT_HAS(test::error_text([&] { convert_to_hf(s.out, dir + "/hf"); }), "model-00001-of-00001.safetensors");
  EXPECT_FALSE(fs::exists(dir + "/hf"));
  // An arch without an exporter is said to have none (not refused as a bad GPT-2).
  LogicalModel neox;
  neox.config = m;
  neox.config.arch = ModelArch::neox;
  neox.config.rope_theta = 10000;
  for (const ParamSpec& spec : model_param_specs(neox.config))
    neox.tensors.emplace_back(spec.name, Tensor::zeros(spec.shape, DType::f32));
  const std::string neox_dir = write_model_checkpoint(neox, dir + "/neox");
  EXPECT_HAS(test::error_text([&] { convert_to_hf(neox_dir, dir + "/hf"); }),
             "model.arch is 'neox', and there is no Hugging Face exporter for neox models (convert --to-hf exports "
             "gpt2, llama)");
  EXPECT_FALSE(fs::exists(dir + "/hf"));
}
