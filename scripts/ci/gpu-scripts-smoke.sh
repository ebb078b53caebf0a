#!/usr/bin/env bash
# The GPU scripts on the CI machine: without a GPU each must stop at once with
# its one "no CUDA device: <reason>" line and exit 77.
#   scripts/gpu-first-run.sh --parts info   the device report only (exit 0 on a GPU machine)
#   bench/gpu/run.sh                        checked only where there is no GPU (with one it
#                                           would run the whole bench)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
tmp="$(mktemp -d /tmp/lattice-gpu-scripts.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME CMD...
  local name="$1" rc=0
  shift
  "$@" > "$tmp/out" 2>&1 || rc=$?
  if (( rc == 77 )) && grep -q '^no CUDA device: ' "$tmp/out"; then
    echo "gpu-scripts-smoke: $name: no GPU, stopped cleanly: $(grep -m1 '^no CUDA device: ' "$tmp/out")"
  elif (( rc == 0 )); then
    echo "gpu-scripts-smoke: $name: a GPU is visible, ran"
  else
    echo "gpu-scripts-smoke: $name: exit $rc; its output:"
    sed 's/^/    /' "$tmp/out"
    fail=1
  fi
}
if [[ -x build/bin/bench_gpu_info ]]; then
  check "scripts/gpu-first-run.sh" scripts/gpu-first-run.sh --parts info --out "$tmp/first-run"
  if ! build/bin/bench_gpu_info > /dev/null 2>&1; then
    check "bench/gpu/run.sh" bench/gpu/run.sh --no-nccl --out "$tmp/bench"
  fi
else
  echo "gpu-scripts-smoke: SKIP: build/bin/bench_gpu_info is not built (no CUDA toolkit found when configuring)"
fi
(( fail == 0 )) && echo "gpu-scripts-smoke: PASS"
exit "$fail"
