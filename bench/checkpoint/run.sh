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
BENCH_NAME=bench/checkpoint/run.sh
# shellcheck source=bench/common.sh
source "$here/../common.sh"
bench="${BENCH:-$repo/build/bin/bench_checkpoint}"
repeats="${REPEATS:-3}"
bench_parse_args "${BASH_SOURCE[0]}" 2,9 --dir /tmp "$@"
dir="$BENCH_ARG"
bench_need_exe "$bench" "build it: scripts/build.sh; or set BENCH=..."
bench_allow_mpirun_as_root
work="$dir/lattice-ckpt-bench.$$"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
bench="$(bench_private_copy "$bench" "$work")"

echo "# Lattice checkpoint bench ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB;" \
     "disk of $dir: $(df -h "$dir" | awk 'NR == 2 {print $1, $2}'); load $(cut -d' ' -f1-3 /proc/loadavg)"
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "(page cache dropped)" || echo "(page cache NOT dropped: loads may be cached)"; }

echo "dd: 1 GiB written with conv=fsync, 3 runs:"
for _ in 1 2 3; do
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
