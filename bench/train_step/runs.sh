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
# Environment: BENCH (default build/bin/bench_train_step), RUNS (5), STEPS (5), WARMUP (1),
#   THREADS (2), LOAD_MAX (1.0) and MAX_WAIT_S (600): wait up to that long, in all, for the
#   1-minute load to drop below LOAD_MAX before the first run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bench="${BENCH:-$repo/build/bin/bench_train_step}"
runs="${RUNS:-5}" steps="${STEPS:-5}" warmup="${WARMUP:-1}" threads="${THREADS:-2}"
load_max="${LOAD_MAX:-1.0}" max_wait="${MAX_WAIT_S:-600}"
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "runs.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$bench" ]] || { echo "runs.sh: no bench_train_step at $bench (build it, or set BENCH=...)" >&2; exit 2; }
(( runs >= 1 )) || { echo "runs.sh: RUNS ($runs) must be at least 1" >&2; exit 2; }
work="${out:-$(mktemp -d /tmp/lattice-train-step.XXXXXX)}"
mkdir -p "$work"

load1() { cut -d' ' -f1 /proc/loadavg; }
waited=0
while awk -v l="$(load1)" -v m="$load_max" 'BEGIN { exit !(l > m) }' && (( waited < max_wait )); do
  echo "load $(load1) > $load_max: waiting (${waited}s of ${max_wait}s)"; sleep 20; waited=$((waited + 20))
done

echo "# bench/train_step/runs.sh ($(date -u '+%Y-%m-%d %H:%M UTC')): $runs runs, $steps steps after $warmup warm-up, $threads threads"
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc) cores; flags: $(grep -o -w 'avx512f\|avx512_bf16\|avx512_fp16\|amx_bf16' /proc/cpuinfo | sort -u | paste -sd' ' -)"
echo "repo HEAD $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'); work dir $work; load at start $(load1)"
common=(--threads "$threads" --steps "$steps" --warmup "$warmup")
for ((rep = 1; rep <= runs; ++rep)); do
  breakdown=(); (( rep == 1 )) || breakdown=(--no-breakdown)
  echo "run $rep: fp32 (load $(load1))"
  "$bench" --config all --torch "${common[@]}" "${breakdown[@]}" > "$work/run$rep.fp32.log" 2>&1
  echo "run $rep: bf16 (load $(load1))"
  "$bench" --config small --precision bf16 "${common[@]}" "${breakdown[@]}" > "$work/run$rep.bf16.log" 2>&1
done
echo "load at end: $(load1)"
python3 "$here/summarize_runs.py" "$work"/run*.log
