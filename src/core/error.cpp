#include "core/error.h"

#include <unistd.h>

#include <atomic>
#include <new>

namespace lattice {

namespace {
std::atomic<int> g_rank{-1};
}

void set_error_rank(int rank) { g_rank = rank; }
int error_rank() { return g_rank; }

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

Error::Error(std::string message, std::string expression, const char* file, int line)
    : std::runtime_error(message),
      message_(std::move(message)),
      expression_(std::move(expression)),
      file_(file ? file : ""),
      line_(line) {}

std::string Error::describe() const {
  std::string who = g_rank >= 0 ? fmt::format("{} rank {}", host_name(), int(g_rank)) : host_name();
  std::string where;
  if (!file_.empty()) {
    where = expression_.empty() ? fmt::format(" [{}:{}]", file_, line_)
                                : fmt::format(" [{} at {}:{}]", expression_, file_, line_);
  }
  return fmt::format("{}: {}{}", who, message_, where);
}

std::string describe_exception(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) == nullptr) return e.what();
  std::string who = g_rank >= 0 ? fmt::format("{} rank {}", host_name(), int(g_rank)) : host_name();
  return fmt::format(
      "{}: out of host memory (std::bad_alloc) — the config asks for more than this machine has; `lattice plan "
      "CONFIG` predicts each rank's memory: lower the model size, batch or microbatches, or add ranks",
      who);
}

void throw_input_error(std::string message, const char* expr, const char* file, int line) {
  throw InputError(std::move(message), expr ? expr : "", file ? file : "", line);
}

void throw_error(std::string message, const char* expr, const char* file, int line) {
  // Strip the build directory prefix so reports stay short.
  std::string f = file ? file : "";
  if (auto pos = f.find("/src/"); pos != std::string::npos) f = f.substr(pos + 1);
  throw Error(std::move(message), expr ? expr : "", f.c_str(), line);
}

}  // namespace lattice
