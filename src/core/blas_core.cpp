#include "core/blas_core.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>

#include "core/threads.h"

namespace lattice {

namespace {
// Set by the process that restarts, read (and removed) by the one it becomes.
constexpr const char* kRestartedFrom = "LATTICE_BLAS_RESTARTED_FROM";
std::string g_restart_note;
}  // namespace

CpuIsa host_cpu_isa() {
  CpuIsa isa;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  isa.avx = __builtin_cpu_supports("avx");
  isa.avx2 = __builtin_cpu_supports("avx2");
  isa.fma = __builtin_cpu_supports("fma");
  isa.avx512f = __builtin_cpu_supports("avx512f");
  isa.avx512bw = __builtin_cpu_supports("avx512bw");
  isa.avx512dq = __builtin_cpu_supports("avx512dq");
  isa.avx512vl = __builtin_cpu_supports("avx512vl");
  isa.avx512cd = __builtin_cpu_supports("avx512cd");
#endif
  return isa;
}

bool blas_core_is_pre_avx(std::string_view core) {
  // OpenBLAS's x86 DYNAMIC_ARCH names (driver/others/dynamic.c) of the sets without AVX.
  static constexpr std::array<std::string_view, 17> kPreAvx{
      "Unknown", "Katmai",  "Coppermine", "Northwood", "Prescott",     "Banias",    "Atom",  "Core2", "Penryn",
      "Dunnington", "Nehalem", "Athlon", "Opteron",   "Opteron_SSE3", "Barcelona", "Nano", "Bobcat"};
  return std::find(kPreAvx.begin(), kPreAvx.end(), core) != kPreAvx.end();
}

std::string better_blas_core(std::string_view picked, const CpuIsa& isa) {
  if (!blas_core_is_pre_avx(picked)) return "";
  if (isa.avx512f && isa.avx512cd && isa.avx512bw && isa.avx512dq && isa.avx512vl) return "SkylakeX";
  if (isa.avx2 && isa.fma) return "Haswell";
  if (isa.avx) return "Sandybridge";
  return "";
}

void reexec_for_blas_kernels(char** argv) {
  if (const char* from = std::getenv(kRestartedFrom)) {
    const char* asked = std::getenv("OPENBLAS_CORETYPE");
    const std::string now = blas_core(), want = asked ? asked : "";
    g_restart_note = "OpenBLAS picked its " + std::string(from) + " kernels (no AVX) for this CPU; restarted with " +
                     "OPENBLAS_CORETYPE=" + want + (now == want ? "" : ", and it runs " + now) +
                     " (set OPENBLAS_CORETYPE to choose)";
    unsetenv(kRestartedFrom);
    return;
  }
  if (std::getenv("OPENBLAS_CORETYPE")) return;  // the user's choice
  const std::string picked = blas_core();
  const std::string better = better_blas_core(picked, host_cpu_isa());
  if (better.empty()) return;
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  setenv(kRestartedFrom, picked.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Not restarted (no /proc, say): go on with the kernels OpenBLAS picked.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kRestartedFrom);
}

std::string blas_core_restart_note() { return g_restart_note; }

}  // namespace lattice
