#!/usr/bin/env bash
# bench/threads/run.sh: what `runtime.threads: 0` costs two ranks launched
# the usual way, `mpirun -np 2 -x OMP_NUM_THREADS=1`, on a 2-core machine.
#
# `runtime.threads: 0` means the OpenMP default. Until 2026-11-25 Lattice
# took that to be every processor (omp_get_num_procs), whatever
# OMP_NUM_THREADS said, so each rank ran as many BLAS threads as the machine
# has cores. On this machine that is exactly what `runtime.threads=2` does
# now, so one binary shows both: "cores" (runtime.threads=2, the old
# behaviour of 0) against "omp" (runtime.threads=0, which now reads
# OMP_NUM_THREADS=1), for tp = 2, pp = 2 and dp = 2, next to one rank with 2
# threads. configs/llama-tiny.yaml with micro_batch 4 (4 microbatches of 4 x
# 128 tokens per step) on the byte-tokenized licence texts of
# /usr/share/common-licenses (as scripts/quickstart.sh). Medians of step_ms
# over steps SKIP+1..STEPS of metrics.jsonl.
#
# Usage: bench/threads/run.sh [--dir DIR]  (DIR: where the runs go; default a temp dir, removed after)
# Environment: LATTICE (build/bin/lattice), STEPS (20), SKIP (4)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BENCH_NAME=bench/threads/run.sh
# shellcheck source=bench/common.sh
source "$here/../common.sh"
bench_parse_args "${BASH_SOURCE[0]}" 2,18 --dir "" "$@"
bench_lattice_run_setup "$repo" 20 4
bench_enter_work_dir "$BENCH_ARG" lattice-bench-threads
"$lattice" data prepare --input /usr/share/common-licenses/* --tokenizer bytes --out data/lic --val-tokens 4096 >/dev/null
echo "# bench/threads/run.sh $(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $("$lattice" --version | head -1)"
echo "# 1-minute load before: $(bench_load1)"
printf '%-6s %-14s %-22s %10s\n' ranks layout threads "step_ms"
run() {  # RANKS LAYOUT(one|tp|pp|dp) RUNTIME_THREADS LABEL OMP_NUM_THREADS
  local dir="runs/$1_$2_$3" layout=()
  [[ "$2" == one ]] || layout=("parallel.$2=2")
  mpirun -np "$1" --oversubscribe --bind-to none -x OMP_NUM_THREADS="$5" "$lattice" train "$repo/configs/llama-tiny.yaml" \
    'data.train=data/lic_train_*.bin' 'data.val=data/lic_val_*.bin' train.steps="$steps" train.eval_every=0 \
    train.micro_batch=4 optimizer.schedule.warmup_steps=0 log.dir="$dir" checkpoint.resume=never log.every=1 \
    runtime.threads="$3" "${layout[@]}" >/dev/null
  python3 - "$dir/metrics.jsonl" "$skip" <<'PY' | xargs printf '%-6s %-14s %-22s %10s\n' "$1" "$2" "$4"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
print(f"{statistics.median(r['step_ms'] for r in rows[int(sys.argv[2]):]):.1f}")
PY
}
run 1 one 2 "2 (one rank)" 2
for layout in tp pp dp; do
  run 2 "$layout" 2 "cores (old 0)" 1
  run 2 "$layout" 0 "omp (new 0: 1)" 1
done
