#!/usr/bin/env bash
# bench/dp/run.sh: data parallelism on one CPU machine, in one invocation (issue 5).
#
# One config (GPT-2 shape, 6 layers, d 384, vocab 8192: 14.1M parameters, 56 MB of fp32
# gradients), one global batch of 8 sequences of 128 tokens per step:
#   single_t2      1 rank x 2 threads, micro_batch 8             (the baseline)
#   dp2_bucket4    2 ranks x 1 thread, dp 2, micro_batch 4, parallel.dp_bucket_mb=4
#   dp2_bucket25   the shipped default: 25 MiB buckets, no progress thread
#   dp2_bucket25_progress  the same with the progress thread every 50 us
#   dp2_nobucket   the same with dp_bucket_mb=0: one all-reduce after backward (no overlap)
#   dp2_bucket4_noprogress  dp2_bucket4 without the MPI progress thread (LATTICE_MPI_PROGRESS_US=0,
#                  the default): the open buckets advance only inside this rank's own MPI calls.
#                  The two runs above it run the thread every 50 us (LATTICE_MPI_PROGRESS_US=50).
#   zero1_bucket4  ZeRO-1 (parallel.zero=1) with 4 MiB buckets all-reduced during backward, no
#                  progress thread
#   zero1_nobucket ZeRO-1 with dp_bucket_mb=0: one reduce-scatter after backward
# Each run trains STEPS steps; the table has medians over steps > SKIP of tokens_per_s,
# step_ms and grad_sync_ms (metrics.jsonl: the slowest rank's time from the end of its
# schedule until its gradients were summed over dp — the exposed, not overlapped, part).
#
# Usage: bench/dp/run.sh [--out DIR]
# Environment: LATTICE (binary, default build/bin/lattice), STEPS (12), SKIP (3),
#   OPENBLAS_CORETYPE (passed through when set).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BENCH_NAME=bench/dp/run.sh
# shellcheck source=bench/common.sh
source "$here/../common.sh"
lattice="${LATTICE:-$repo/build/bin/lattice}"
steps="${STEPS:-12}"
skip="${SKIP:-3}"
bench_parse_args "${BASH_SOURCE[0]}" 2,20 --out "" "$@"
out="$BENCH_ARG"
bench_need_exe "$lattice" "set LATTICE=..."
bench_check_steps "$steps" "$skip"
bench_allow_mpirun_as_root
work="${out:-$(mktemp -d /tmp/lattice-dp.XXXXXX)}"
mkdir -p "$work/runs" "$work/logs"
lattice="$(bench_private_copy "$lattice" "$work")"

mapfile -t inputs < <(find /usr/share/common-licenses -maxdepth 1 -type f | sort)
"$lattice" data prepare --input "${inputs[@]}" --tokenizer bytes --out "$work/data/lic" > "$work/logs/prepare.log"
cat > "$work/dp.yaml" <<EOF2
model: { arch: gpt2, n_layer: 6, n_head: 6, d_model: 384, vocab_size: 8192, max_seq_len: 128, dropout: 0.0 }
train: { steps: $steps, global_batch: 8, micro_batch: 8, seq_len: 128 }
optimizer: { name: adamw, lr: 1.0e-3, schedule: { warmup_steps: 2 } }
data: { train: "$work/data/lic_train_*.bin", tokenizer: bytes }
log: { every: 1 }
runtime: { seed: 1337 }
EOF2

echo "# Lattice dp bench ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "lattice: $("$lattice" --version 2>/dev/null | head -1); repo HEAD $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}; $steps steps, medians over steps > $skip; config:"
sed 's/^/    /' "$work/dp.yaml"

run() {  # run [--env VAR=VALUE] NAME RANKS THREADS OVERRIDES...
  local -a x=(-x OMP_NUM_THREADS=1)
  if [[ "$1" == --env ]]; then
    x+=(-x "$2")
    shift 2
  fi
  local name="$1" ranks="$2" threads="$3"
  shift 3
  [[ -n "${OPENBLAS_CORETYPE:-}" ]] && x+=(-x OPENBLAS_CORETYPE)
  local rc=0
  if (( ranks == 1 )); then
    OMP_NUM_THREADS="$threads" "$lattice" train "$work/dp.yaml" runtime.threads="$threads" \
        log.dir="$work/runs/$name" "$@" > "$work/logs/$name.log" 2>&1 || rc=$?
  else
    mpirun -q -np "$ranks" --oversubscribe --bind-to none "${x[@]}" "$lattice" train "$work/dp.yaml" \
        runtime.threads="$threads" log.dir="$work/runs/$name" "$@" > "$work/logs/$name.log" 2>&1 || rc=$?
  fi
  (( rc == 0 )) || { echo "$name failed (rc $rc):"; tail -5 "$work/logs/$name.log"; exit 1; }
}

run single_t2 1 2
run --env LATTICE_MPI_PROGRESS_US=50 dp2_bucket4 2 1 parallel.dp=2 train.micro_batch=4 parallel.dp_bucket_mb=4
run --env LATTICE_MPI_PROGRESS_US=0 dp2_bucket25 2 1 parallel.dp=2 train.micro_batch=4 parallel.dp_bucket_mb=25
run --env LATTICE_MPI_PROGRESS_US=50 dp2_bucket25_progress 2 1 parallel.dp=2 train.micro_batch=4 \
    parallel.dp_bucket_mb=25
run --env LATTICE_MPI_PROGRESS_US=0 dp2_nobucket 2 1 parallel.dp=2 train.micro_batch=4 parallel.dp_bucket_mb=0
run --env LATTICE_MPI_PROGRESS_US=0 dp2_bucket4_noprogress 2 1 parallel.dp=2 train.micro_batch=4 \
    parallel.dp_bucket_mb=4
run --env LATTICE_MPI_PROGRESS_US=0 zero1_bucket4 2 1 parallel.dp=2 parallel.zero=1 train.micro_batch=4 \
    parallel.dp_bucket_mb=4
run --env LATTICE_MPI_PROGRESS_US=0 zero1_nobucket 2 1 parallel.dp=2 parallel.zero=1 train.micro_batch=4 \
    parallel.dp_bucket_mb=0

python3 - "$work/runs" "$skip" <<'EOF2'
import json, statistics, sys
runs, skip = sys.argv[1], int(sys.argv[2])
def med(name, key):
    rows = [json.loads(l) for l in open(f"{runs}/{name}/metrics.jsonl") if l.strip()]
    return statistics.median(r[key] for r in rows if "tokens_per_s" in r and r["step"] > skip)
base = med("single_t2", "tokens_per_s")
print("\n| run | ranks x threads | dp_bucket_mb | progress thread | tokens/s | step ms | "
      "exposed grad sync ms | exposed / step | vs single_t2 |")
print("|---|---|---|---|---|---|---|---|---|")
for name, rt, bucket, prog in [("single_t2", "1 x 2", "-", "-"), ("dp2_bucket4", "2 x 1", "4", "on"),
                               ("dp2_bucket25", "2 x 1", "25", "off"),
                               ("dp2_bucket25_progress", "2 x 1", "25", "on"), ("dp2_nobucket", "2 x 1", "0", "-"),
                               ("dp2_bucket4_noprogress", "2 x 1", "4", "off"),
                               ("zero1_bucket4", "2 x 1", "4 (ZeRO-1)", "off"),
                               ("zero1_nobucket", "2 x 1", "0 (ZeRO-1)", "-")]:
    tps, ms, sync = med(name, "tokens_per_s"), med(name, "step_ms"), med(name, "grad_sync_ms")
    print(f"| {name} | {rt} | {bucket} | {prog} | {tps:.0f} | {ms:.0f} | {sync:.1f} | {sync / ms:.1%} | "
          f"{tps / base:.2f}x |")
EOF2
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
