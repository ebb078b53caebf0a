#!/usr/bin/env bash
# scripts/gpu-bundle-run.sh: runs scripts/gpu-first-run.sh on a GPU machine
# that cannot build Lattice, from a bundle made by scripts/gpu-bundle.sh on a
# machine that can (docs/gpu.md, "A GPU machine without the build
# dependencies"). Run it from the repository root there.
#
#   1. unpacks the bundle into DEST (again only when its MANIFEST differs);
#   2. finds the CUDA libraries the bundle names (cuBLAS, cuBLASLt, cuDNN,
#      NCCL) on this machine: $LATTICE_CUDA_LIB_DIRS (colon-separated) first,
#      then $CUDA_HOME, /usr/local/cuda, the system library folders and the
#      nvidia/*/lib folders of Python's site-packages (the pip wheels that
#      PyTorch brings); one line per soname says where, and a missing one is
#      an error naming every folder searched;
#   3. points the loader at the bundle's libraries and those folders, and at
#      the bundle's libstdc++ only where this machine's is older than the
#      build's; sets Open MPI up for single-process runs from the bundle
#      (MPI's singleton mode without a daemon, components from the bundle);
#   4. runs gpu-first-run.sh with BUILD_DIR=DEST and the given parts (never
#      `build`), its logs in a work folder, and packs them (checkpoints and
#      token files left out) into OUT/gpu-first-run-logs.tar.gz, with the
#      summary table also in OUT/gpu-first-run-summary.txt.
#
# Usage: scripts/gpu-bundle-run.sh [--bundle FILE] [--dest DIR] [--check] [--parts LIST] [--time S]
#                                  [--exec CMD ARGS...]
#   --bundle  default gpu-bundle/lattice-gpu.tar.xz
#   --dest    default /tmp/lattice-gpu
#   --check   steps 1-3 only, then `ldd` of every binary through that setup (exit 1 if a library is missing)
#   --exec    steps 1-3, then CMD ARGS (the rest of the line) in that setup instead of step 4, e.g.
#             --exec /tmp/lattice-gpu/tests/test_cuda_sdpa --gtest_filter='*Causal*'
#   --parts   gpu-first-run.sh's parts, default info,tests,cudnn,sanitize,train,bench
#             (each under the device tool's 10-minute limit per call: split them over calls,
#             e.g. info,tests,cudnn then sanitize then train,bench)
#   --time    the whole run ends within S seconds of its start, logs packed: a part is cut
#             short or not started (out of time) rather than the caller killing it all;
#             default 560 where $OUT is set (the device tool's 600 s per command), else none
# OUT: where the packed logs go (the device tool's $OUT; default the current folder).
# Exit status: gpu-first-run.sh's (0 passed, 1 a part failed, 77 no CUDA device); 1 a library
# is missing; 2 bad usage.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 2
bundle="gpu-bundle/lattice-gpu.tar.xz"
dest="/tmp/lattice-gpu"
check=0
exec_cmd=()
start_epoch=$(date +%s)
budget=""  # --time; default 560 under the device tool ($OUT set), else none
parts="info,tests,cudnn,sanitize,train,bench"
usage() { echo "gpu-bundle-run.sh: $1 (usage: scripts/gpu-bundle-run.sh [--bundle FILE] [--dest DIR] [--check] [--parts LIST] [--time S] [--exec CMD...])" >&2; exit 2; }
while (( $# > 0 )); do
  case "$1" in
    --bundle) bundle="${2:-}"; [[ -n "$bundle" ]] || usage "--bundle needs a file"; shift 2 ;;
    --dest) dest="${2:-}"; [[ -n "$dest" ]] || usage "--dest needs a folder"; shift 2 ;;
    --check) check=1; shift ;;
    --exec) shift; (( $# > 0 )) || usage "--exec needs a command"; exec_cmd=("$@"); break ;;
    --parts) parts="${2:-}"; [[ -n "$parts" ]] || usage "--parts needs a list"; shift 2 ;;
    --time) budget="${2:-}"; [[ "$budget" =~ ^[0-9]+$ ]] || usage "--time expects seconds, got '$budget'"; shift 2 ;;
    -h|--help) sed -n '2,38p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
[[ ",$parts," == *",build,"* ]] && usage "--parts: a bundle is already built; leave 'build' out"
[[ -f "$bundle" ]] || { echo "gpu-bundle-run.sh: no bundle at $bundle: make it with scripts/gpu-bundle.sh where Lattice builds, and carry it here" >&2; exit 2; }

# ---- 1. unpack ----
manifest_of() {  # the bundle's MANIFEST, read from the archive
  if command -v xz > /dev/null; then xz -dc "$1" | tar -xOf - ./MANIFEST 2> /dev/null
  else python3 -c 'import sys, tarfile; sys.stdout.write(tarfile.open(sys.argv[1]).extractfile("./MANIFEST").read().decode())' "$1"
  fi
}
want="$(manifest_of "$bundle")" || { echo "gpu-bundle-run.sh: $bundle is not a bundle of scripts/gpu-bundle.sh (no MANIFEST)" >&2; exit 2; }
if [[ ! -f "$dest/MANIFEST" || "$(cat "$dest/MANIFEST")" != "$want" ]]; then
  rm -rf "$dest" && mkdir -p "$dest" || exit 2
  if command -v xz > /dev/null; then xz -dc "$bundle" | tar -xf - -C "$dest"
  else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$dest"
  fi || { echo "gpu-bundle-run.sh: could not unpack $bundle into $dest" >&2; exit 2; }
fi
echo "bundle: $bundle -> $dest"
sed 's/^/  /' "$dest/MANIFEST"

# ---- 2. the machine's CUDA libraries ----
search=()
IFS=: read -r -a from_env <<< "${LATTICE_CUDA_LIB_DIRS:-}"
search+=("${from_env[@]}")
for home in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [[ -n "$home" ]] && search+=("$home/lib64" "$home/lib" "$home/targets/x86_64-linux/lib")
done
search+=(/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib)
site_dirs() {
  for py in python3 /usr/bin/python3; do
    command -v "$py" > /dev/null && "$py" -c 'import site; print("\n".join(site.getsitepackages()))' 2> /dev/null
  done
  ls -d /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages 2> /dev/null
}
while read -r sp; do
  for d in "$sp"/nvidia/*/lib; do [[ -d "$d" ]] && search+=("$d"); done
done < <(site_dirs | sort -u)
cuda_dirs=()
missing=0
while read -r so; do
  found=""
  for d in "${search[@]}"; do
    [[ -n "$d" && -e "$d/$so" ]] && { found="$d"; break; }
  done
  if [[ -z "$found" ]]; then
    echo "gpu-bundle-run.sh: $so (which the bundle's CUDA backend needs) is in none of: ${search[*]};" \
      "set LATTICE_CUDA_LIB_DIRS to the folder that holds it" >&2
    missing=1
    continue
  fi
  echo "  $so: $found"
  [[ " ${cuda_dirs[*]} " == *" $found "* ]] || cuda_dirs+=("$found")
done < <(sed -n 's/^needs //p' "$dest/MANIFEST")
(( missing )) && exit 1

# ---- 3. the loader and Open MPI ----
ld_path="$dest/sys"
for d in "${cuda_dirs[@]}"; do ld_path+=":$d"; done
# The build's libstdc++ only where this machine's lacks a version the binaries ask for.
# (ldd's output read whole first: under pipefail, `ldd | grep -q` is false when grep's early exit kills ldd with SIGPIPE.)
if grep -qE "version .(GLIBCXX|CXXABI|GCC)_[0-9.]+. not found" <<< "$(LD_LIBRARY_PATH="$ld_path" ldd "$dest/bin/lattice" 2>&1)"; then
  ld_path="$dest/sys-cxx:$ld_path"
  echo "  libstdc++: the bundle's (this machine's is older than the build's)"
fi
export LD_LIBRARY_PATH="$ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# MPI singleton mode (a process not started by mpirun) without its helper daemon, Open MPI's
# components and help texts from the bundle, no complaints about the transports this machine lacks.
export OMPI_MCA_ess_singleton_isolated=1
export OMPI_MCA_mca_base_component_path="$dest/openmpi/components"
export OMPI_MCA_mca_base_component_show_load_errors=0
export OPAL_PKGDATADIR="$dest/openmpi/share"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if (( check )); then
  bad=0
  for f in "$dest"/bin/* "$dest"/tests/* "$dest"/lib/*.so; do
    deps="$(ldd "$f" 2>&1)"
    if grep -q "not found" <<< "$deps"; then
      echo "gpu-bundle-run.sh: $f:" >&2
      grep "not found" <<< "$deps" >&2
      bad=1
    fi
  done
  (( bad )) || echo "check: every binary of the bundle resolves all its libraries"
  exit "$bad"
fi

if (( ${#exec_cmd[@]} > 0 )); then exec "${exec_cmd[@]}"; fi

# ---- 4. gpu-first-run.sh, its logs packed ----
work="$(mktemp -d /tmp/gpu-first-run.XXXXXX)"
[[ -z "$budget" && -n "${OUT:-}" ]] && budget=560
deadline=""
if [[ -n "$budget" ]]; then
  deadline=$(( start_epoch + budget - 15 ))  # 15 s kept for packing the logs
  echo "time: the parts end within $budget s of the start (--time)"
fi
rc=0
GPU_FIRST_RUN_DEADLINE="$deadline" BUILD_DIR="$dest" scripts/gpu-first-run.sh --parts "$parts" --out "$work" 2>&1 | tee "$work/console.log"
rc=${PIPESTATUS[0]}
outdir="${OUT:-.}"
mkdir -p "$outdir"
sed -n '/^part     exit/,$p' "$work/console.log" > "$outdir/gpu-first-run-summary.txt"
# No table (no CUDA device: gpu-first-run.sh stops after its info part): the end of the console.
[[ -s "$outdir/gpu-first-run-summary.txt" ]] || tail -n 5 "$work/console.log" > "$outdir/gpu-first-run-summary.txt"
tar -C "$work" --exclude='*/checkpoints' --exclude='*.bin' -czf "$outdir/gpu-first-run-logs.tar.gz" .
echo "logs: $outdir/gpu-first-run-logs.tar.gz, summary: $outdir/gpu-first-run-summary.txt"
exit "$rc"
