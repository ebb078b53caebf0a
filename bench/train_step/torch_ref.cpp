#include "train_step/torch_ref.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.h"

namespace lattice::bench {

namespace {

// Single-quotes `s` for /bin/sh.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::map<std::string, std::string> parse_fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream in(line);
  std::string tok;
  while (in >> tok) {
    auto eq = tok.find('=');
    if (eq != std::string::npos) f[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return f;
}

double number(const std::map<std::string, std::string>& f, const std::string& key, const std::string& line) {
  auto it = f.find(key);
  LATTICE_CHECK(it != f.end(), "torch reference: RESULT line has no {}: {}", key, line);
  return std::stod(it->second);
}

}  // namespace

TorchResult run_torch(const TorchRun& run, const std::function<void(const std::string&)>& log) {
  LATTICE_CHECK(std::filesystem::exists(run.script),
                "torch reference: {} not found; pass --reference PATH to the script", run.script);
  std::string cmd = "OMP_WAIT_POLICY=PASSIVE " + shell_quote(run.python) + " " + shell_quote(run.script) +
                    " --config " + shell_quote(run.config) + " --threads " + std::to_string(run.threads) + " --steps " +
                    std::to_string(run.steps) + " --warmup " + std::to_string(run.warmup);
  if (run.peak_gflops > 0) cmd += " --peak-gflops " + std::to_string(run.peak_gflops);
  for (const std::string& a : run.extra_args) cmd.append(" ").append(shell_quote(a));
  cmd += " 2>&1";
  log("$ " + cmd);
  FILE* pipe = popen(cmd.c_str(), "r");
  LATTICE_CHECK(pipe != nullptr, "torch reference: cannot start: {}", cmd);
  TorchResult res;
  std::string line;
  char buf[4096];
  while (fgets(buf, sizeof(buf), pipe)) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;  // a longer line: keep reading
    line.pop_back();
    log(line);
    if (line.rfind("RESULT", 0) == 0) res.result_line = line;
    line.clear();
  }
  if (!line.empty()) {  // a last line without a newline
    log(line);
    if (line.rfind("RESULT", 0) == 0) res.result_line = line;
  }
  const int status = pclose(pipe);
  LATTICE_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "torch reference failed (status {}): {}",
                status, cmd);
  LATTICE_CHECK(!res.result_line.empty(), "torch reference printed no RESULT line: {}", cmd);
  res.fields = parse_fields(res.result_line);
  res.median_ms = number(res.fields, "median_ms", res.result_line);
  res.tokens_per_s = number(res.fields, "tokens_per_s", res.result_line);
  res.gflops = number(res.fields, "achieved_GFLOPs", res.result_line);
  return res;
}

}  // namespace lattice::bench
