#include "core/plugin_library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <vector>

namespace lattice {

namespace {

std::string exe_dir() {
  char buf[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, size_t(n));
  return p.substr(0, p.find_last_of('/'));
}

}  // namespace

LoadedSymbol load_library_symbol(const std::string& library, const char* env_var, const char* symbol) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv(env_var)) candidates.push_back(env);
  candidates.push_back(exe_dir() + "/../lib/" + library);
  candidates.push_back(library);
  LoadedSymbol out;
  for (const std::string& path : candidates) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      out.errors += fmt::format("{}{}", out.errors.empty() ? "" : "; ", dlerror());
      continue;
    }
    if ((out.symbol = dlsym(h, symbol))) return out;
    out.errors += fmt::format("; {}: no symbol {}", path, symbol);
  }
  return out;
}

}  // namespace lattice
