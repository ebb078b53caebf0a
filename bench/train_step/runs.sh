#!/usr/bin/env bash
# bench/train_step/runs.sh: the single-rank GPT-2 step, RUNS times, with medians over the runs.
#
# One run is two back-to-back invocations of bench_train_step:
#   1. fp32: Lattice and the PyTorch reference on the small (124M) and tiny shapes
#      (--config all --torch); the sgemm rate is measured inside the same invocation;
#   2. bf16: Lattice's matmuls in bf16 (runtime.precision: bf16 on the CPU), small shape.
# Every ratio (Lattice / PyTorch, Lattice / sgemm, bf16 / fp32) is taken within one run, then
# summarize_runs.py prints the median over the runs and their range. The per-phase replay runs in
# the first run only (it does not change the timed steps, but it costs time).
#
# Usage: bench/train_step/runs.sh [--out DIR]
# Environment: BENCH (default build/bin/bench_train_step; the runs use a copy of it in DIR/bin,
#   so a rebuild meanwhile cannot mix two binaries), RUNS (5), STEPS (5), WARMUP (1),
#   THREADS (2), LOAD_MAX (1.0) and MAX_WAIT_S (600): wait up to that long, in all, for the
#   1-minute load to drop below LOAD_MAX before the first run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BENCH_NAME=bench/train_step/runs.sh
# shellcheck source=bench/common.sh
source "$here/../common.sh"
bench="${BENCH:-$repo/build/bin/bench_train_step}"
runs="${RUNS:-5}" steps="${STEPS:-5}" warmup="${WARMUP:-1}" threads="${THREADS:-2}"
load_max="${LOAD_MAX:-1.0}" max_wait="${MAX_WAIT_S:-600}"
bench_parse_args "${BASH_SOURCE[0]}" 2,16 --out "" "$@"
out="$BENCH_ARG"
bench_need_exe "$bench" "build it, or set BENCH=..."
(( runs >= 1 )) || bench_die "RUNS ($runs) must be at least 1"
work="${out:-$(mktemp -d /tmp/lattice-train-step.XXXXXX)}"
mkdir -p "$work"
bench_src="$bench"
bench="$(bench_private_copy "$bench" "$work")"

bench_wait_for_quiet "$load_max" "$max_wait"

echo "# bench/train_step/runs.sh ($(date -u '+%Y-%m-%d %H:%M UTC')): $runs runs, $steps steps after $warmup warm-up, $threads threads"
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc) cores; flags: $(grep -o -w 'avx512f\|avx512_bf16\|avx512_fp16\|amx_bf16' /proc/cpuinfo | sort -u | paste -sd' ' -)"
echo "repo HEAD $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'); work dir $work; load at start $(bench_load1)"
echo "bench_train_step: $bench_src, copied to $bench"
common=(--threads "$threads" --steps "$steps" --warmup "$warmup")
for ((rep = 1; rep <= runs; ++rep)); do
  breakdown=(); (( rep == 1 )) || breakdown=(--no-breakdown)
  echo "run $rep: fp32 (load $(bench_load1))"
  "$bench" --config all --torch "${common[@]}" "${breakdown[@]}" > "$work/run$rep.fp32.log" 2>&1
  echo "run $rep: bf16 (load $(bench_load1))"
  "$bench" --config small --precision bf16 "${common[@]}" "${breakdown[@]}" > "$work/run$rep.bf16.log" 2>&1
done
echo "load at end: $(bench_load1)"
python3 "$here/summarize_runs.py" "$work"/run*.log
