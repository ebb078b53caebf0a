// The GPT-2 shapes bench_train_step measures, the same two configs as the
// PyTorch reference (shared/reference/torch_gpt2_bench.py, CONFIGS), and small
// statistics helpers shared by the measuring files.
//
// Shapes: L layers, C model width, NH heads, V vocabulary, T sequence length,
// B batch rows, block = max_seq_len (rows of wpe).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace lattice::bench {

struct BenchConfig {
  std::string name;
  int L, C, NH, V, T, B, block;
};

inline const std::vector<BenchConfig>& bench_configs() {
  static const std::vector<BenchConfig> configs = {
      {"small", 12, 768, 12, 50257, 256, 4, 1024},  // GPT-2 124M, B=4, T=256
      {"tiny", 4, 256, 4, 8192, 128, 8, 128},
  };
  return configs;
}

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
