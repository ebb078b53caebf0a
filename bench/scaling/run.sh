#!/usr/bin/env bash
# bench/scaling/run.sh: 2-rank scaling of `lattice train` on a CPU machine, in one invocation.
#
# On one config (a small GPT-2, written to a temp dir) and one global batch of 8 sequences:
#   tp/dp:  single_b8  1 rank x 2 threads, micro_batch 8
#           single_b8_t1  1 rank x 1 thread (a reference: the 2-rank runs' ideal is 2x it)
#           tp2        2 ranks x 1 thread, parallel.tp=2            (issue 3; CPU target 85%)
#           dp2        2 ranks x 1 thread, dp=2, micro_batch 4      (issue 5; CPU target 90%)
#   pp:     single_m8  1 rank x 2 threads, micro_batch 1 x 8 microbatches (gradient accumulation)
#           pp2_1f1b, pp2_interleaved (virtual_stages 2), pp2_1f1b_balanced (layers_per_stage
#           balanced): 2 ranks x 1 thread, micro_batch 1 x 8 microbatches    (issue 4)
#   pp-deep: single_m8_l16 and pp2_1f1b_balanced_l16: the same with model.n_layer=16. `balanced`
#           moves whole layers, so with 4 layers the stages cannot be evened out (the LM head
#           weighs about 2.5 layers); 16 layers split [9, 7 + head] (issue 10: bubble target).
# Each run trains STEPS steps; medians of tokens_per_s / step_ms (and bubble) are taken over the
# steps after the first SKIP. The whole suite runs RUNS times, interleaved (every case once, then
# again); the tables give the median over the runs, with their range, and each ratio is taken
# within one run before the median. peak_mem_bytes in metrics.jsonl is the allocator peak of the
# largest rank; the per-rank peak RSS comes from the wrapper (scaling.py wrap).
#
# Usage: bench/scaling/run.sh [--coretype default|SkylakeX|both] [--out DIR]
# Environment: LATTICE (binary, default build/bin/lattice), RUNS (5), STEPS (10), SKIP (2),
#   LOAD_MAX (1.5), MAX_WAIT_S (600: how long, in all, to wait for the 1-minute load to drop
#   below LOAD_MAX before a suite; after that it runs anyway and the tables say how busy it was).
# Runs as root need OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (set here).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BENCH_NAME=bench/scaling/run.sh
# shellcheck source=bench/common.sh
source "$here/../common.sh"
helper="$here/scaling.py"
lattice="${LATTICE:-$repo/build/bin/lattice}"
runs="${RUNS:-5}"
steps="${STEPS:-10}"
skip="${SKIP:-2}"
load_max="${LOAD_MAX:-1.5}"
max_wait="${MAX_WAIT_S:-600}"
coretype="default"
out=""

# --coretype is this script's own; the rest is bench_parse_args'.
args=()
while [[ $# -gt 0 ]]; do
  if [[ "$1" == --coretype ]]; then
    [[ $# -ge 2 ]] || bench_die "--coretype needs a value (see --help)"
    coretype="$2"
    shift 2
  else
    args+=("$1")
    shift
  fi
done
bench_parse_args "${BASH_SOURCE[0]}" 2,25 --out "" ${args[@]+"${args[@]}"}
out="$BENCH_ARG"
case "$coretype" in default|SkylakeX|both) ;; *) bench_die "--coretype default|SkylakeX|both" ;; esac
bench_need_exe "$lattice" "set LATTICE=..."
bench_check_steps "$steps" "$skip"
(( runs >= 1 )) || bench_die "RUNS ($runs) must be at least 1"

bench_allow_mpirun_as_root
work="${out:-$(mktemp -d /tmp/lattice-scaling.XXXXXX)}"
lattice_src="$lattice"
lattice="$(bench_private_copy "$lattice" "$work")"

# --- data and config ------------------------------------------------------------------------
prepare() {
  local inputs
  mapfile -t inputs < <(find /usr/share/common-licenses -maxdepth 1 -type f | sort)
  "$lattice" data prepare --input "${inputs[@]}" --tokenizer bytes --out "$work/data/lic" \
      --val-tokens 16384 > "$work/data_prepare.log"
  # The "tiny" shape of bench/train_step (5.3M parameters); byte tokens, so ids >= 257 of the
  # 8192-row vocabulary never occur (they still cost LM-head compute, as a real vocabulary would).
  cat > "$work/scaling.yaml" <<EOF
model: { arch: gpt2, n_layer: 4, n_head: 4, d_model: 256, vocab_size: 8192, max_seq_len: 128, dropout: 0.0 }
train: { steps: $steps, global_batch: 8, micro_batch: 8, seq_len: 128 }
optimizer: { name: adamw, lr: 1.0e-3, schedule: { warmup_steps: 2, decay: cosine } }
data: { train: "$work/data/lic_train_*.bin", tokenizer: bytes }
log: { every: 1 }
runtime: { seed: 1337 }
EOF
}

# run_case SUITE NAME GROUP BASELINE TARGET RANKS THREADS LAYOUT BATCH -- OVERRIDES...
# (the repetition is $rep, set by run_suite)
run_case() {
  local suite="$1" name="$2" group="$3" baseline="$4" target="$5" ranks="$6" threads="$7" layout="$8" batch="$9"
  shift 10
  local dir="$work/$suite/runs/$name.r$rep" prefix="$work/$suite/proc/$name.r$rep" log="$work/$suite/logs/$name.r$rep.log"
  mkdir -p "$work/$suite/runs" "$work/$suite/proc" "$work/$suite/logs"
  local -a env_x=(-x OMP_NUM_THREADS=1)
  [[ -n "${OPENBLAS_CORETYPE:-}" ]] && env_x+=(-x OPENBLAS_CORETYPE)
  local l0 s0 t0 t1 l1 s1 rc=0
  l0="$(bench_load1)"; s0="$(python3 "$helper" cpu-snap)"; t0="$(date +%s.%N)"
  if (( ranks == 1 )); then
    OMP_NUM_THREADS="$threads" python3 "$helper" wrap "$prefix" -- \
        "$lattice" train "$work/scaling.yaml" runtime.threads="$threads" log.dir="$dir" "$@" > "$log" 2>&1 || rc=$?
  else
    mpirun -q -np "$ranks" --oversubscribe --bind-to none "${env_x[@]}" python3 "$helper" wrap "$prefix" -- \
        "$lattice" train "$work/scaling.yaml" runtime.threads="$threads" log.dir="$dir" "$@" > "$log" 2>&1 || rc=$?
  fi
  t1="$(date +%s.%N)"; l1="$(bench_load1)"; s1="$(python3 "$helper" cpu-snap)"
  local wall stages sgemm
  wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')"
  # The layer-to-stage map and the start-up sgemm rate, as rank 0 printed them.
  stages="$(sed -n 's/^  \(stage [0-9]*: .*\)$/\1/p' "$log" | paste -sd';' - | sed 's/;/; /g')"
  sgemm="$(sed -n 's/^peak: \([0-9.]*\) GFLOP\/s.*/\1/p' "$log" | head -1)"
  [[ -n "$stages" ]] && layout="$layout ($stages)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$group" "$baseline" \
      "$target" "$ranks" "$threads" "$layout" "$batch" "$dir" "$prefix" "$wall" "$l0" "$l1" "$s0" "$s1" "${sgemm:-?}" \
      "$rep" >> "$work/$suite/manifest.tsv"
  echo "  $name (run $rep): ${wall}s, rc $rc, load $l0 -> $l1"
  (( rc == 0 )) || { echo "  $name failed; last lines of $log:"; tail -5 "$log" | sed 's/^/    /'; }
}

run_suite() {
  local suite="$1"
  echo
  echo "## suite '$suite': OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>} ($runs runs of $steps steps, medians over steps > $skip)"
  echo "load at start: $(cat /proc/loadavg)"
  local mb1=(train.micro_batch=1 parallel.microbatches=8)
  local rep
  for ((rep = 1; rep <= runs; ++rep)); do
    run_case "$suite" single_b8 tp-dp - - 1 2 "tp1 pp1 dp1" "8 × 1 × 1" --
    run_case "$suite" single_b8_t1 tp-dp - - 1 1 "tp1 pp1 dp1" "8 × 1 × 1" --
    run_case "$suite" tp2 tp-dp single_b8 "85% (tp)" 2 1 "tp2" "8 × 1 × 1" -- parallel.tp=2
    run_case "$suite" dp2 tp-dp single_b8 "90% (dp)" 2 1 "dp2" "4 × 1 × 2" -- parallel.dp=2 train.micro_batch=4
    run_case "$suite" single_m8 pp - - 1 2 "tp1 pp1 dp1" "1 × 8 × 1" -- "${mb1[@]}"
    run_case "$suite" pp2_1f1b pp single_m8 "—" 2 1 "pp2 1f1b uniform" "1 × 8 × 1" -- \
        parallel.pp=2 parallel.schedule=1f1b "${mb1[@]}"
    run_case "$suite" pp2_interleaved pp single_m8 "—" 2 1 "pp2 interleaved v2 uniform" "1 × 8 × 1" -- \
        parallel.pp=2 parallel.schedule=interleaved parallel.virtual_stages=2 "${mb1[@]}"
    run_case "$suite" pp2_1f1b_balanced pp single_m8 "—" 2 1 "pp2 1f1b, balanced" "1 × 8 × 1" -- \
        parallel.pp=2 parallel.schedule=1f1b parallel.layers_per_stage=balanced "${mb1[@]}"
    run_case "$suite" single_m8_l16 pp-deep - - 1 2 "tp1 pp1 dp1, 16 layers" "1 × 8 × 1" -- model.n_layer=16 "${mb1[@]}"
    run_case "$suite" pp2_1f1b_balanced_l16 pp-deep single_m8_l16 "85% (pp), bubble ≤ theory + 0.05" 2 1 \
        "pp2 1f1b, balanced, 16 layers" "1 × 8 × 1" -- model.n_layer=16 \
        parallel.pp=2 parallel.schedule=1f1b parallel.layers_per_stage=balanced "${mb1[@]}"
  done
  echo "load at end: $(cat /proc/loadavg)"
  local core
  core="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("blas_core","?"))' \
      "$work/$suite/runs/single_b8.r1/run_info.json" 2>/dev/null || echo '?')"
  echo "OpenBLAS core chosen (run_info.json of single_b8): $core"
  echo "batch = micro_batch × microbatches × dp; ratio = tokens/s ÷ the 1-rank run named; other CPU use ="
  echo "busy CPU time of the whole machine minus this run's own, over the run's wall time (2 = both cores)."
  python3 "$helper" table "$work/$suite/manifest.tsv" --skip "$skip"
}

echo "# Lattice 2-rank scaling bench ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc) cores; $(uname -r)"
echo "lattice: $lattice_src, copied to $lattice ($("$lattice" --version 2>/dev/null | head -1)); repo HEAD $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "work dir: $work"
echo "uptime: $(uptime)"
prepare
echo "config ($work/scaling.yaml):"
sed 's/^/    /' "$work/scaling.yaml"

suite_failed=0
if [[ "$coretype" == default || "$coretype" == both ]]; then
  bench_wait_for_quiet "$load_max" "$max_wait"  # MAX_WAIT_S: the budget of both suites together
  (unset OPENBLAS_CORETYPE; run_suite default) || suite_failed=1
fi
if [[ "$coretype" == SkylakeX || "$coretype" == both ]]; then
  bench_wait_for_quiet "$load_max" "$max_wait"
  (export OPENBLAS_CORETYPE=SkylakeX; run_suite skylakex) || suite_failed=1
fi
echo
echo "uptime at end: $(uptime)"
exit "$suite_failed"
