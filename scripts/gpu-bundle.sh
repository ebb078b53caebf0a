#!/usr/bin/env bash
# scripts/gpu-bundle.sh: packs what the first GPU session runs into one file,
# for a GPU machine that cannot build Lattice: one with the NVIDIA driver and
# CUDA libraries but no package manager, network or Lattice dependencies (the
# device machines of docs/gpu.md, "A GPU machine without the build
# dependencies"). Run it here, on the build machine; carry the file there and
# run scripts/gpu-bundle-run.sh.
#
# The bundle holds, from an existing build with the CUDA backend:
#   bin/    lattice, bench_gpu_info, bench_nccl_busbw
#   tests/  the GPU tests and the host-side plans they rest on (the binaries
#           gpu-first-run.sh's `tests` part runs)
#   lib/    liblattice_cuda.so, liblattice_nccl.so (found from bin/ and
#           tests/ as ../lib, as in the build tree)
#   sys/    every shared library those need that is not glibc and not a CUDA
#           library (OpenBLAS, oneDNN, fmt, yaml-cpp, Open MPI, ...), resolved
#           by ldd here
#   sys-cxx/  libstdc++ and libgcc_s, used only where the machine's own are
#           older than the build's (gpu-bundle-run.sh decides)
#   openmpi/  Open MPI's components and help texts, for single-process runs
#           (MPI's singleton mode, no mpirun)
#   MANIFEST  the commit, the build, the CUDA sonames the backend needs
# The CUDA libraries themselves (cuBLAS, cuBLASLt, cuDNN, NCCL) are the GPU
# machine's: the bundle names their sonames, gpu-bundle-run.sh finds them.
#
# Usage: scripts/gpu-bundle.sh [--out FILE] [--no-build]
#   --out FILE   default gpu-bundle/lattice-gpu.tar.xz (gpu-bundle/ is ignored by git)
#   --no-build   pack the build as it is (default: bring it up to date first)
# Environment: BUILD_DIR (build).
# Exit status: 0 written; 1 the build has no CUDA backend, or a library could not be resolved; 2 bad usage.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${BUILD_DIR:-build}"
out="gpu-bundle/lattice-gpu.tar.xz"
do_build=1
while (( $# > 0 )); do
  case "$1" in
    --out) out="${2:?--out needs a file}"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu-bundle.sh: unknown argument '$1' (usage: scripts/gpu-bundle.sh [--out FILE] [--no-build])" >&2
       exit 2 ;;
  esac
done

if (( do_build )); then BUILD_DIR="$build" scripts/build.sh > /dev/null; fi
if [[ ! -f "$build/lib/liblattice_cuda.so" ]]; then
  echo "gpu-bundle.sh: $build/lib/liblattice_cuda.so is not built: configure where the CUDA toolkit is" \
    "(/usr/local/cuda/bin/nvcc; scripts/install-deps.sh installs it), then run again" >&2
  exit 1
fi

bins=(lattice bench_gpu_info bench_nccl_busbw)
# The GPU tests and their host-side plans: what gpu-tests.sh (gpu-first-run.sh's `tests` part on a bundle) runs.
mapfile -t tests < <(scripts/gpu-tests.sh "$build" --list)
libs=(liblattice_cuda.so liblattice_nccl.so)

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,tests,lib,sys,sys-cxx,openmpi}
for b in "${bins[@]}"; do cp "$build/bin/$b" "$stage/bin/"; done
for t in "${tests[@]}"; do cp "$build/tests/$t" "$stage/tests/"; done
for l in "${libs[@]}"; do [[ -f "$build/lib/$l" ]] && cp "$build/lib/$l" "$stage/lib/"; done

# Libraries that come from the GPU machine: glibc's, and CUDA's (with the driver's).
machine_lib() {
  [[ "$1" =~ ^(ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libcuda\.so|libcudart\.so|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink|libcupti) ]]
}
cxx_lib() { [[ "$1" =~ ^(libstdc\+\+\.so|libgcc_s\.so) ]]; }

ompi_pkglib=""
for d in /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi /usr/lib64/openmpi/lib/openmpi; do
  [[ -d "$d" ]] && { ompi_pkglib="$d"; break; }
done
ompi_data=""
for d in /usr/share/openmpi /usr/share/openmpi3; do [[ -d "$d" ]] && { ompi_data="$d"; break; }; done
if [[ -n "$ompi_pkglib" ]]; then
  mkdir -p "$stage/openmpi/components"
  cp "$ompi_pkglib"/*.so "$stage/openmpi/components/"
fi
[[ -n "$ompi_data" ]] && cp -r "$ompi_data" "$stage/openmpi/share"

# Resolve every dependency once (ldd follows them transitively); CUDA's own are left out.
unresolved=()
declare -A seen=()
while read -r name path; do
  [[ -n "${seen[$name]:-}" ]] && continue
  seen[$name]=1
  machine_lib "$name" && continue
  if [[ "$path" == "not" || -z "$path" ]]; then unresolved+=("$name"); continue; fi
  if cxx_lib "$name"; then cp -L "$path" "$stage/sys-cxx/$name"; else cp -L "$path" "$stage/sys/$name"; fi
done < <(for f in "$stage"/bin/* "$stage"/tests/* "$stage"/lib/*.so "$stage"/openmpi/components/*.so; do
           [[ -f "$f" ]] && ldd "$f" 2> /dev/null | awk '/=>/ {print $1, $3}'
         done | sort -u)
# A component whose dependency is missing here (a network transport not installed) is left out of the bundle:
# Open MPI skips it there as it would here.
if (( ${#unresolved[@]} > 0 )); then
  for c in "$stage"/openmpi/components/*.so; do
    if ldd "$c" 2> /dev/null | grep -q "not found"; then rm "$c"; fi
  done
  for f in "$stage"/bin/* "$stage"/tests/* "$stage"/lib/*.so; do
    if LD_LIBRARY_PATH="$stage/sys" ldd "$f" 2> /dev/null | grep "not found" | grep -vqE 'lib(cuda|cudart|cublas|cudnn|nccl)'; then
      echo "gpu-bundle.sh: $f needs a library that is not installed here:" >&2
      LD_LIBRARY_PATH="$stage/sys" ldd "$f" | grep "not found" >&2
      exit 1
    fi
  done
fi

{
  echo "commit $(git rev-parse HEAD 2> /dev/null || echo unknown)$(git diff --quiet 2> /dev/null || echo ' (with uncommitted changes)')"
  echo "made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}'))"
  echo "version $("$build/bin/lattice" --version 2> /dev/null | head -1)"
  # The GPU code the backend was compiled for (sm_80 and sm_90 with their PTX by default: cmake/Cuda.cmake).
  echo "cuda-code $(grep -o 'generate-code=arch=compute_[0-9a-z]*,code=\[[a-z_0-9,]*\]' "$build/build.ninja" | sort -u |
    sed 's/.*code=\[\(.*\)\]/\1/' | tr '\n' ' ')"
  echo "openmpi $( [[ -n "$ompi_pkglib" ]] && ompi_info --version 2> /dev/null | head -1 || echo none)"
  # The CUDA sonames the backend and NCCL libraries load, for gpu-bundle-run.sh to find on the GPU machine.
  for l in "$stage"/lib/*.so; do
    readelf -d "$l" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | while read -r so; do
      if [[ "$so" =~ ^lib(cudart|cublas|cublasLt|cudnn|nccl)\.so ]]; then echo "needs $so"; fi
    done
  done | sort -u
} > "$stage/MANIFEST"

mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - . | xz -T0 -6 > "$out.tmp"
mv "$out.tmp" "$out"
echo "gpu-bundle.sh: wrote $out ($(du -h "$out" | cut -f1); $(ls "$stage/tests" | wc -l) test binaries, $(ls "$stage/sys" | wc -l) libraries)"
sed 's/^/  /' "$stage/MANIFEST"
