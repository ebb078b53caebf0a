// Runs a PyTorch reference (shared/reference/torch_gpt2_bench.py, or
// bench/train_step/torch_{llama,bert}_bench.py for the zoo models) as a child
// process and parses its "RESULT key=value ..." summary line.
//
// The child gets OMP_WAIT_POLICY=PASSIVE: Debian's torch runs its OpenMP pool
// next to the pthreads OpenBLAS pool, and spinning OpenMP workers steal the
// cores the BLAS threads need (this setting is the script's best case).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lattice::bench {

struct TorchRun {
  std::string python = "/usr/bin/python3";  // the interpreter that has torch
  std::string script;                       // path to the reference script
  std::string config;
  std::vector<std::string> extra_args;  // appended as given (the zoo scripts' shapes)
  int threads = 1, steps = 5, warmup = 2;
  double peak_gflops = 0;  // passed on for the script's MFU column
};

struct TorchResult {
  std::map<std::string, std::string> fields;  // the RESULT line's key=value pairs
  std::string result_line;
  double median_ms = 0, tokens_per_s = 0, gflops = 0;
};

// Throws lattice::Error when the script is missing, fails, or prints no RESULT.
// Every output line of the child goes to `log` as it arrives.
TorchResult run_torch(const TorchRun& run, const std::function<void(const std::string&)>& log);

}  // namespace lattice::bench
