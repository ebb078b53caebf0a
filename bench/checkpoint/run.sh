#!/usr/bin/env bash
# bench/checkpoint/run.sh: save and load throughput of the GPT-2 124M checkpoint
# (configs/gpt2-small.yaml: model + AdamW state, ~1.5 GB) at (tp, pp, dp) =
# (1,1,1) and (2,2,1), next to the `dd` write speed of the same disk.
#
# Usage: bench/checkpoint/run.sh [--dir DIR]   (DIR on the disk to measure; default /tmp)
# Environment: BENCH (the bench_checkpoint binary, default build/bin/bench_checkpoint), REPEATS (3).
# Loads follow `sync; echo 3 > /proc/sys/vm/drop_caches` when that is allowed (root on a
# real kernel); otherwise they may read from the page cache and the script says so.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bench="${BENCH:-$repo/build/bin/bench_checkpoint}"
repeats="${REPEATS:-3}"
dir=/tmp
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$bench" ]] || { echo "run.sh: no bench_checkpoint at $bench (build with -DLATTICE_BENCH=ON)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$dir/lattice-ckpt-bench.$$"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

echo "# Lattice checkpoint bench ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB;" \
     "disk of $dir: $(df -h "$dir" | awk 'NR == 2 {print $1, $2}'); load $(cut -d' ' -f1-3 /proc/loadavg)"
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "(page cache dropped)" || echo "(page cache NOT dropped: loads may be cached)"; }

echo "dd: 1 GiB written with conv=fsync, 3 runs:"
for i in 1 2 3; do
  dd if=/dev/zero of="$work/dd.bin" bs=1M count=1024 conv=fsync 2>&1 | tail -1
  rm -f "$work/dd.bin"
done

run() {  # run RANKS OVERRIDES...
  local ranks="$1"; shift
  echo
  drop_caches
  mpirun -q -np "$ranks" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$bench" "$repo/configs/gpt2-small.yaml" \
      --dir "$work/ckpt" --repeats "$repeats" runtime.threads=1 "$@"
}
run 1
run 4 parallel.tp=2 parallel.pp=2
