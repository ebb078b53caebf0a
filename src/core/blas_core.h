// The OpenBLAS kernel set for this CPU.
//
// An OpenBLAS built with DYNAMIC_ARCH picks its kernels when it is loaded, by
// CPU model. Releases that do not know a model fall back to their SSE3
// "Prescott" kernels: Debian 12's 0.3.21 does so on Sapphire and Emerald
// Rapids, where sgemm then runs at about 17 GFLOP/s per core instead of the
// 95-120 of its AVX-512 kernels (BENCHMARKS.md). OpenBLAS reads
// OPENBLAS_CORETYPE only at load time, so the fix is to start again:
// `lattice` calls reexec_for_blas_kernels() first thing, which, when OpenBLAS
// chose a pre-AVX set on a CPU with AVX, sets OPENBLAS_CORETYPE to the set
// the CPU's instructions allow and executes the same binary with the same
// arguments (same pid, so mpirun and Slurm see nothing). A user's own
// OPENBLAS_CORETYPE is never changed.
#pragma once

#include <string>
#include <string_view>

namespace lattice {

// The instruction-set features that choose between OpenBLAS's x86-64 sets.
struct CpuIsa {
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false, avx512cd = false;
};
CpuIsa host_cpu_isa();  // this CPU, as the compiler's runtime sees it (CPUID and the OS's saved state)

// True for OpenBLAS x86 kernel sets without AVX (Prescott, Core2, Nehalem, ...).
bool blas_core_is_pre_avx(std::string_view core);

// The OPENBLAS_CORETYPE to restart with when OpenBLAS picked `picked`, or ""
// when `picked` is right for `isa`: SkylakeX with AVX-512 (F, CD, BW, DQ, VL),
// Haswell with AVX2 and FMA, Sandybridge with AVX, and only when `picked` is
// a pre-AVX set.
std::string better_blas_core(std::string_view picked, const CpuIsa& isa);

// Restarts the process (execv of /proc/self/exe with `argv`) when
// better_blas_core() names a set and OPENBLAS_CORETYPE is unset; returns
// without doing anything otherwise, or if the exec fails. Call before
// anything else in main: nothing done before it survives.
void reexec_for_blas_kernels(char** argv);

// After such a restart: "OpenBLAS picked its Prescott kernels for this CPU;
// restarted with OPENBLAS_CORETYPE=SkylakeX"; "" in a process that did not
// restart.
std::string blas_core_restart_note();

}  // namespace lattice
