// The models bench_train_step measures: the two GPT-2 shapes of the PyTorch
// reference (shared/reference/torch_gpt2_bench.py, CONFIGS), and the zoo
// models (llama, bert) at the shapes of a config file (configs/<arch>-tiny.yaml
// by default, bench_configs.cpp); plus small statistics helpers shared by the
// measuring files.
//
// Shapes: L layers, C model width, NH heads, V vocabulary, T sequence length,
// B batch rows, F MLP width, block = max_seq_len (rows of a position table).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/tensor.h"

namespace lattice::bench {

struct BenchConfig {
  std::string name;  // printed label: small, tiny (gpt2), llama-tiny, bert-tiny
  int L = 0, C = 0, NH = 0, V = 0, T = 0, B = 0, block = 0;
  int F = 0;               // MLP width (4 C for gpt2)
  int data_vocab = 0;      // token ids of the random batches: [0, data_vocab) (bert: its ordinary ids)
  ModelConfig model;       // what the registry builds (model.arch picks the model)
  std::string source;      // the config file the shapes came from ("" for the built-in gpt2 shapes)
  std::string ref_config;  // --config value for the PyTorch script
};

// The built-in GPT-2 configs: small (124M, B=4, T=256) and tiny, as the
// reference's CONFIGS; dropout 0, tied embeddings, no vocabulary padding.
const std::vector<BenchConfig>& gpt2_bench_configs();

// A zoo model at the shapes of `yaml_path` (load_config): model.*, B =
// train.micro_batch, T = train.seq_len; dropout forced to 0 (as for gpt2).
BenchConfig bench_config_from_file(const std::string& name, const std::string& yaml_path);

// A new f32 tensor of uniform values in [-scale / 2, scale / 2), from the
// data-purpose RNG stream of `seed` (the measuring files' inputs and weights).
Tensor uniform_tensor(Shape shape, float scale, uint64_t seed);

// Median, min and max of a non-empty sample (seconds or any unit).
struct Stats {
  double median = 0, min = 0, max = 0;
};

inline Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

}  // namespace lattice::bench
