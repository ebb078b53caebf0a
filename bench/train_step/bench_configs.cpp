// The configs bench_train_step measures and the shared helpers (bench_config.h).
#include "core/error.h"
#include "core/rng.h"
#include "models/bert/bert.h"
#include "train_step/bench_config.h"

namespace lattice::bench {

namespace {

BenchConfig gpt2_config(const std::string& name, int L, int C, int NH, int V, int T, int B, int block) {
  BenchConfig b;
  b.name = name, b.L = L, b.C = C, b.NH = NH, b.V = V, b.T = T, b.B = B, b.block = block, b.F = 4 * C;
  b.data_vocab = V;
  ModelConfig& m = b.model;
  m.arch = ModelArch::gpt2;
  m.n_layer = L, m.n_head = NH, m.n_kv_head = NH, m.d_model = C, m.d_ff = 4 * C;
  m.vocab_size = V, m.max_seq_len = block;
  m.tie_embeddings = true, m.dropout = 0.0f;
  m.vocab_multiple = 1;  // the reference's tables have exactly V rows
  b.ref_config = name;
  return b;
}

}  // namespace

const std::vector<BenchConfig>& gpt2_bench_configs() {
  static const std::vector<BenchConfig> configs = {
      gpt2_config("small", 12, 768, 12, 50257, 256, 4, 1024),  // GPT-2 124M, B=4, T=256
      gpt2_config("tiny", 4, 256, 4, 8192, 128, 8, 128),
  };
  return configs;
}

Tensor uniform_tensor(Shape shape, float scale, uint64_t seed) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  RngKey k;
  k.seed = seed;
  k.purpose = RngPurpose::data;
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = (rng_uniform(k, 0, uint64_t(i)) - 0.5f) * scale;
  return t;
}

BenchConfig bench_config_from_file(const std::string& name, const std::string& yaml_path) {
  const Config cfg = load_config(yaml_path);
  const ModelConfig& m = cfg.model;
  BenchConfig b;
  b.name = name, b.L = m.n_layer, b.C = m.d_model, b.NH = m.n_head, b.V = m.vocab_size;
  b.T = cfg.train.seq_len, b.B = cfg.train.micro_batch, b.block = m.max_seq_len, b.F = m.d_ff;
  b.data_vocab = m.vocab_size;
  if (m.arch == ModelArch::bert) b.data_vocab = m.tokenizer_vocab;  // no [CLS] etc. in windows
  b.model = m;
  b.model.dropout = 0.0f;  // timing without dropout, as the gpt2 rows and the references
  b.source = yaml_path;
  b.ref_config = name;
  return b;
}

}  // namespace lattice::bench
