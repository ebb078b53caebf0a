// lattice convert's LLaMA path (checkpoint/hf_llama.h, and the arch dispatch
// of convert_to_hf / convert_from_hf in checkpoint/hf_gpt2.h):
//  - golden: a LlamaForCausalLM saved by transformers itself
//    (scripts/make_hf_llama_golden.py: grouped-query attention, untied head,
//    rope_theta 500, random RMSNorm weights) imported and run by Lattice gives
//    transformers' logits within 1e-4, so a mis-mapped tensor, a k/v grouping
//    or a rotary convention mismatch cannot hide behind a symmetric round trip;
//  - round trips: HF -> Lattice -> HF reproduces the HF file byte for byte, and
//    Lattice -> HF -> Lattice gives identical tensors (tied head included);
//  - every config.json setting Lattice's LLaMA cannot compute is one Error line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/hf_gpt2.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/index.h"
#include "checkpoint_test_util.h"
#include "hf_test_util.h"
#include "comm/self_communicator.h"
#include "models/llama/llama.h"
#include "models/registry.h"
#include "support/test_support.h"
#include "tp/sharding.h"

using namespace lattice;
using namespace lattice::checkpoint;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kGolden = LATTICE_HF_LLAMA_GOLDEN_DIR;

using namespace test_hf;

std::string edited_golden(
    const std::string& dir, const std::function<void(json&)>& edit_config,
    const std::function<void(NamedTensors&)>& edit_tensors = [](NamedTensors&) {}) {
  return test_hf::edited_golden(kGolden, dir, edit_config, edit_tensors);
}

Tensor lattice_logits(const LogicalModel& m, const Tensor& ids, int64_t vocab_multiple) {
  return test_hf::lattice_logits(m, ids, vocab_multiple, [](LanguageModel& model, const ModelContext& ctx) {
    return dynamic_cast<llama::Llama&>(model).logits(ctx);
  });
}

class HfLlamaConvert : public ::testing::Test {
 protected:
  void SetUp() override { dir = test::make_temp_dir("hf_llama"); }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
};

}  // namespace

TEST(HfLlamaGolden, LogitsMatchTransformers) {
  LogicalModel m = read_hf_llama(kGolden);
  EXPECT_EQ(m.config.arch, ModelArch::llama);
  EXPECT_EQ(m.config.n_layer, 2);
  EXPECT_EQ(m.config.n_head, 4);
  EXPECT_EQ(m.config.n_kv_head, 2);
  EXPECT_EQ(m.config.d_model, 32);
  EXPECT_EQ(m.config.d_ff, 64);
  EXPECT_EQ(m.config.vocab_size, 300);
  EXPECT_EQ(m.config.max_seq_len, 16);
  EXPECT_EQ(m.config.rope_theta, 500.0);
  EXPECT_EQ(m.config.norm_eps, 1e-6);
  EXPECT_FALSE(m.config.tie_embeddings);
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
    std::printf("llama vocab_multiple %d: max |logits - transformers| = %.3g (max |logit| %.3g)\n", int(vocab_multiple),
                max_diff, max_abs);
    EXPECT_GT(max_abs, 1.0);  // the logits carry signal
  }
}

TEST(HfLlamaGolden, RopeThetaAndKvGroupingShowInTheLogits) {
  // The golden test can fail: the same weights with the default rope_theta,
  // or with the k/v heads of a layer swapped, give other logits.
  LogicalModel m = read_hf_llama(kGolden);
  SafetensorsFile golden = SafetensorsFile::open(kGolden + "/golden_logits.safetensors");
  Tensor ids = golden.read("input_ids"), want = golden.read("logits");
  auto max_diff = [&](const LogicalModel& x) {
    Tensor got = lattice_logits(x, ids, 1);
    double d = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      d = std::max(d, double(std::fabs(got.data<float>()[i] - want.data<float>()[i])));
    return d;
  };
  LogicalModel theta = m;
  theta.config.rope_theta = 10000.0;
  EXPECT_GT(max_diff(theta), 1e-3);
  LogicalModel swapped = m;
  for (auto& [name, t] : swapped.tensors)
    if (name == "model.layers.0.self_attn.k_proj.weight") {  // (2 HS, C): swap the two heads' rows
      Tensor s = t.clone();
      const int64_t half = t.numel() / 2;
      std::copy_n(t.data<float>(), half, s.data<float>() + half);
      std::copy_n(t.data<float>() + half, half, s.data<float>());
      t = s;
    }
  EXPECT_GT(max_diff(swapped), 1e-3);
}

TEST(HfLlamaGolden, TensorsKeepHfNamesAndLayout) {
  LogicalModel m = read_hf_llama(kGolden);
  SafetensorsFile hf = SafetensorsFile::open(kGolden + "/model.safetensors");
  EXPECT_EQ(m.tensors.size(), hf.names().size());
  for (const auto& [name, t] : m.tensors) {
    ASSERT_TRUE(hf.contains(name)) << name;
    EXPECT_TRUE(same_bytes(t, hf.read(name))) << name;  // (out, in) on both sides: no transpose
  }
}

TEST_F(HfLlamaConvert, HfRoundTripReproducesTheFile) {
  ConvertSummary in = convert_from_hf(kGolden, dir + "/ckpt");  // dispatched on model_type
  EXPECT_EQ(in.hf_class, "LlamaForCausalLM");
  EXPECT_EQ(in.model.arch, ModelArch::llama);
  const int64_t per_layer = 2 * 32 * 32 + 2 * 16 * 32 + 3 * 32 * 64 + 2 * 32;  // q, o; k, v (KV HS = 16); MLP; norms
  EXPECT_EQ(in.parameters, 2 * 300 * 32 + 2 * per_layer + 32);
  verify_checkpoint_dir(in.out);
  json state = read_json_file(in.out + "/trainer_state.json");
  EXPECT_EQ(state["model"], json::parse(R"({"arch": "llama", "n_layer": 2, "n_head": 4, "d_model": 32,
      "vocab_size": 300, "max_seq_len": 16, "tie_embeddings": false, "norm_eps": 1e-6,
      "n_kv_head": 2, "d_ff": 64, "rope_theta": 500.0})"));

  ConvertSummary out = convert_to_hf(in.out, dir + "/hf");  // dispatched on the checkpoint's arch
  EXPECT_EQ(out.hf_class, "LlamaForCausalLM");
  EXPECT_EQ(out.parameters, in.parameters);
  EXPECT_EQ(test::read_bytes(kGolden + "/model.safetensors"), test::read_bytes(dir + "/hf/model.safetensors"));
  json c0 = read_json_file(kGolden + "/config.json"), c1 = read_json_file(dir + "/hf/config.json");
  for (const char* key : {"model_type", "architectures", "hidden_act", "hidden_size", "intermediate_size",
                          "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
                          "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "attention_bias",
                          "tie_word_embeddings", "attention_dropout", "initializer_range", "pretraining_tp"})
    EXPECT_EQ(c0[key], c1[key]) << key;
  EXPECT_EQ(c1["head_dim"], 8);
  EXPECT_EQ(c1["mlp_bias"], false);
  // And the export reads back as the same model.
  LogicalModel a = read_hf_llama(kGolden), b = read_hf_llama(dir + "/hf");
  EXPECT_EQ(a.config, b.config);
}

TEST_F(HfLlamaConvert, LatticeCheckpointRoundTripTied) {
  Config cfg = parse_config(R"(model: { arch: llama, n_layer: 2, n_head: 4, n_kv_head: 1, d_model: 16, d_ff: 40,
                                        vocab_size: 270, max_seq_len: 8, tie_embeddings: true, norm_eps: 1.0e-6,
                                        rope_theta: 250000 }
train: { steps: 10, global_batch: 2, micro_batch: 2, seq_len: 8 }
optimizer: { lr: 0.001 }
data: { train: "x_*.bin", tokenizer: bytes }
)");
  LogicalModel m{cfg.model, {}};
  uint64_t seed = 1;
  for (const ParamSpec& s : model_param_specs(cfg.model))
    m.tensors.emplace_back(s.name, test::random_tensor(s.shape, DType::f32, seed++));
  CheckpointWriter w;  // a training checkpoint: the run's config in trainer_state.json
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

  ConvertSummary s = convert_to_hf(step_dir, dir + "/hf");
  EXPECT_EQ(s.hf_class, "LlamaForCausalLM");
  json c = read_json_file(dir + "/hf/config.json");
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["num_key_value_heads"], 1);
  EXPECT_EQ(c["intermediate_size"], 40);
  EXPECT_EQ(c["rope_theta"], 250000.0);
  EXPECT_EQ(c["rms_norm_eps"], 1e-6);
  SafetensorsFile hf = SafetensorsFile::open(dir + "/hf/model.safetensors");
  EXPECT_FALSE(hf.contains("lm_head.weight"));  // tied: the embedding only, as save_pretrained writes
  EXPECT_EQ(hf.info("model.layers.1.self_attn.k_proj.weight").shape, (Shape{4, 16}));

  convert_from_hf(dir + "/hf", dir + "/back");
  LogicalModel back = read_logical_model(dir + "/back/step_0000000");
  EXPECT_EQ(back.config.arch, ModelArch::llama);
  EXPECT_EQ(back.config.n_kv_head, 1);
  EXPECT_EQ(back.config.d_ff, 40);
  EXPECT_EQ(back.config.rope_theta, 250000.0);
  EXPECT_TRUE(back.config.tie_embeddings);
  ASSERT_EQ(back.tensors.size(), m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, m.tensors[i].first);
    EXPECT_TRUE(same_bytes(back.tensors[i].second, m.tensors[i].second)) << m.tensors[i].first;
  }
}

TEST_F(HfLlamaConvert, ReadsRotaryBuffersAndHalfPrecision) {
  LogicalModel want = read_hf_llama(kGolden);
  auto d = edited_golden(
      dir + "/old", [](json&) {},
      [](NamedTensors& t) {
        for (auto& [n, x] : t)
          if (n == "model.norm.weight") x = x.to(DType::f64);  // exact: F32 -> F64 -> F32
        t.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", Tensor::zeros({4}, DType::f32));
      });
  LogicalModel got = read_hf_llama(d);
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (size_t i = 0; i < got.tensors.size(); ++i)
    EXPECT_TRUE(same_bytes(got.tensors[i].second, want.tensors[i].second)) << got.tensors[i].first;
}

TEST_F(HfLlamaConvert, UnsupportedConfigsAreOneLine) {
  struct Case {
    const char* name;
    std::function<void(json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"scaling",
       [](json& c) {
         c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
       },
       "rope_scaling is {"},
      {"attn_bias", [](json& c) { c["attention_bias"] = true; }, "attention_bias is true"},
      {"mlp_bias", [](json& c) { c["mlp_bias"] = true; }, "mlp_bias is true"},
      {"act", [](json& c) { c["hidden_act"] = "gelu"; }, "hidden_act is 'gelu'"},
      {"head_dim", [](json& c) { c["head_dim"] = 16; }, "head_dim is 16; Lattice's LLaMA needs"},
      {"kv", [](json& c) { c["num_key_value_heads"] = 3; }, "num_attention_heads 4 is not divisible by"},
      {"missing", [](json& c) { c.erase("hidden_size"); }, "'hidden_size' is missing (LlamaConfig needs it)"},
      {"ints", [](json& c) { c["num_hidden_layers"] = "two"; }, "'num_hidden_layers' is \"two\", expected"},
      {"theta", [](json& c) { c["rope_theta"] = -1.0; }, "rope_theta is -1"},
  };
  for (const Case& k : cases) {
    std::string d = edited_golden(dir + "/" + k.name, k.edit);
    std::string e = test::error_text([&] { read_hf_llama(d); });
    EXPECT_HAS(e, std::string(k.name) + "/config.json: ");
    EXPECT_HAS(e, k.want);
    EXPECT_HAS(test::error_text([&] { convert_from_hf(d, dir + "/out_" + k.name); }), k.want);
    EXPECT_FALSE(fs::exists(dir + "/out_" + k.name)) << k.name;
  }
  auto other = edited_golden(dir + "/bert", [](json& c) { c["model_type"] = "bert"; });
  EXPECT_HAS(test::error_text([&] { convert_from_hf(other, dir + "/x"); }),
             "model_type is 'bert'; lattice convert --from-hf reads 'gpt2' and 'llama'");
  EXPECT_HAS(test::error_text([&] { read_hf_llama(other); }), "model_type is 'bert', expected 'llama'");
}

TEST_F(HfLlamaConvert, MalformedTensorsAreOneLine) {
  auto kv = edited_golden(dir + "/kv", [](json& c) { c["num_key_value_heads"] = 4; });  // k/v saved for 2 heads
  EXPECT_HAS(test::error_text([&] { read_hf_llama(kv); }),
             "'model.layers.0.self_attn.k_proj.weight' has shape (16, 32), expected (32, 32)");
  auto tied = edited_golden(dir + "/tied", [](json& c) { c["tie_word_embeddings"] = true; });
  EXPECT_HAS(test::error_text([&] { read_hf_llama(tied); }), "lm_head.weight differs from the token embedding");
  auto no_head = edited_golden(
      dir + "/no_head", [](json&) {},
      [](NamedTensors& t) { std::erase_if(t, [](const auto& x) { return x.first == "lm_head.weight"; }); });
  EXPECT_HAS(test::error_text([&] { read_hf_llama(no_head); }), "no tensor 'lm_head.weight'");
  auto extra = edited_golden(
      dir + "/extra", [](json&) {},
      [](NamedTensors& t) { t.emplace_back("model.layers.0.self_attn.q_proj.bias", Tensor::zeros({32}, DType::f32)); });
  EXPECT_HAS(test::error_text([&] { read_hf_llama(extra); }),
             "tensor 'model.layers.0.self_attn.q_proj.bias' is not a parameter of LlamaForCausalLM");
}

TEST(HfLlamaExport, RefusesOtherArchs) {
  ModelConfig gpt2 = read_hf_llama(kGolden).config;
  gpt2.arch = ModelArch::gpt2;
  EXPECT_HAS(test::error_text([&] { llama_hf_config_json(gpt2); }),
             "model.arch: 'gpt2' cannot be exported as HF LlamaForCausalLM");
}
