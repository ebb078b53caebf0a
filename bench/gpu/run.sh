#!/usr/bin/env bash
# bench/gpu/run.sh: Lattice on a GPU machine, in one invocation (issue 9, item 7).
#
# Prints, in order:
#   1. the machine: date, host, repo HEAD, `lattice --version`, the CUDA runtime and driver
#      versions and every visible device with its dense bf16 peak (bench_gpu_info), and
#      nvidia-smi's view when it is installed;
#   2. for each model shape, `lattice train` with runtime.device=cuda at the given precision for
#      STEPS steps, then a table of medians over the steps after the first SKIP: step ms,
#      tokens/s, achieved TFLOP/s per GPU and MFU against the GPU's dense bf16 peak (the table
#      in src/booster/peak_flops.cpp, whatever the precision, or PEAK_TFLOPS), and the peak memory
#      measured against the one `lattice plan` predicts for the same job;
#        gpt2-124m  configs/gpt2-small.yaml, T 1024, micro_batch 16, 2 microbatches per rank
#        llama-1b   configs/llama-1b.yaml,   T 2048, micro_batch 4,  2 microbatches per rank
#                   (bf16/fp16: 31 GiB by `lattice plan`; fp32: micro_batch 1, 8 microbatches,
#                   34 GiB; the same 16384 tokens per step)
#      The data is the repo's own sources as byte tokens (`lattice data prepare --tokenizer
#      bytes`): throughput does not depend on the text, and no tokenizer files are needed.
#   3. NCCL busbw rows (bench_nccl_busbw under mpirun, one rank per visible GPU, f32 all_reduce,
#      all_gather and reduce_scatter at 1 MiB..1 GiB) when 2 or more GPUs are visible.
#
# Usage: bench/gpu/run.sh [--precision fp32|bf16|fp16] [--models gpt2-124m,llama-1b] [--np N]
#                         [--no-nccl] [--out DIR] [-- key=value ...]
#   --np N      ranks (one GPU each) for the training runs, default 1; the global batch grows with
#               N (dp = N unless the overrides set parallel.tp / parallel.pp).
#   key=value   overrides passed to every `lattice train` after the bench's own, e.g.
#               train.micro_batch=8 or parallel.tp=2.
# Environment: BUILD_DIR (build), LATTICE (default $BUILD_DIR/bin/lattice), STEPS (20), SKIP (5),
#   PEAK_TFLOPS (the per-GPU dense bf16 peak, when the table does not know the GPU).
# Exit status: 0 done; 77 no CUDA device (the one line "no CUDA device: <reason>", nothing run);
#   1 a run failed; 2 bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-build}"
[[ "$build" = /* ]] || build="$repo/$build"
lattice="${LATTICE:-$build/bin/lattice}"
steps="${STEPS:-20}"
skip="${SKIP:-5}"
precision=fp32
models=gpt2-124m,llama-1b
np=1
nccl=1
out=""
overrides=()
usage() { echo "run.sh: $1 (see bench/gpu/run.sh --help)" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --precision) precision="${2:-}"; shift 2 || usage "--precision needs a value" ;;
    --models) models="${2:-}"; shift 2 || usage "--models needs a value" ;;
    --np) np="${2:-}"; shift 2 || usage "--np needs a value" ;;
    --no-nccl) nccl=0; shift ;;
    --out) out="${2:-}"; shift 2 || usage "--out needs a value" ;;
    --) shift; overrides=("$@"); break ;;
    -h|--help) sed -n '2,31p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
case "$precision" in fp32|bf16|fp16) ;; *) usage "--precision expects fp32, bf16 or fp16, got '$precision'" ;; esac
[[ "$np" =~ ^[1-9][0-9]*$ ]] || usage "--np expects a positive integer, got '$np'"
if ! [[ "$steps" =~ ^[0-9]+$ && "$skip" =~ ^[0-9]+$ ]] || (( skip >= steps )); then
  usage "STEPS ($steps) and SKIP ($skip) must be integers with SKIP < STEPS"
fi
IFS=, read -r -a model_list <<< "$models"
for m in "${model_list[@]}"; do
  case "$m" in gpt2-124m|llama-1b) ;; *) usage "--models: unknown model '$m' (gpt2-124m, llama-1b)" ;; esac
done

# --- 1. the machine ------------------------------------------------------------------------
echo "# Lattice GPU bench ($(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "host: $(hostname); cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc) cores"
echo "repo: HEAD $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')"
[[ -x "$lattice" ]] || { echo "run.sh: no lattice binary at $lattice (build it: scripts/build.sh; or set LATTICE=...)" >&2; exit 2; }
echo "lattice: $("$lattice" --version 2>&1 | head -1)"
info="$build/bin/bench_gpu_info"
if [[ ! -x "$info" ]]; then
  echo "no CUDA device: cannot look for one: $info is not built (this build found no CUDA toolkit; docs/gpu.md)" >&2
  exit 77
fi
rc=0
"$info" || rc=$?
(( rc == 0 )) || exit "$rc"  # 77: it printed "no CUDA device: <reason>"
if command -v nvidia-smi > /dev/null; then
  # A failing nvidia-smi (driver/library mismatch) is reported, not fatal: the device report above stands.
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader |
    sed 's/^/nvidia-smi: /' || echo "nvidia-smi: failed (exit ${PIPESTATUS[0]})"
else
  echo "nvidia-smi: not installed"
fi
gpus="$("$info" --count)"
(( np <= gpus )) || { echo "run.sh: --np $np but only $gpus GPU(s) are visible" >&2; exit 2; }
peak="$("$info" --peak)"
peak_source="table"
if [[ -n "${PEAK_TFLOPS:-}" ]]; then
  [[ "$PEAK_TFLOPS" =~ ^[0-9]+([.][0-9]+)?$ ]] || usage "PEAK_TFLOPS expects TFLOP/s such as 989, got '$PEAK_TFLOPS'"
  peak="${PEAK_TFLOPS}e12"
  peak_source="PEAK_TFLOPS"
elif [[ "$peak" == 0 ]]; then
  peak_source="unknown"
  peak=1e12  # mfu in metrics.jsonl is then achieved TFLOP/s; the table prints MFU as n/a
  echo "peak: device 0 is not in the bf16 peak table (src/booster/peak_flops.cpp): MFU is left out; set PEAK_TFLOPS"
fi

# --- 2. training runs ----------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="${out:-$(mktemp -d /tmp/lattice-gpu.XXXXXX)}"
mkdir -p "$work/runs" "$work/logs"
mapfile -t inputs < <(find "$repo/src" "$repo/docs" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.md' \) | sort)
"$lattice" data prepare --input "${inputs[@]}" --tokenizer bytes --out "$work/data/text" > "$work/logs/prepare.log"
echo "data: $(cat "$work/logs/prepare.log")"
echo "runs: $work/runs; $steps steps, medians over steps > $skip; runtime.precision=$precision; $np rank(s)"

shape_of() {  # the config and batch shape of a model, one line: CONFIG SEQ_LEN MICRO_BATCH MICROBATCHES
  case "$1" in
    gpt2-124m) echo "configs/gpt2-small.yaml 1024 16 2" ;;
    llama-1b) if [[ $precision == fp32 ]]; then echo "configs/llama-1b.yaml 2048 1 8"; else echo "configs/llama-1b.yaml 2048 4 2"; fi ;;
  esac
}
failed=0
ran=()
for m in "${model_list[@]}"; do
  read -r config seq micro accum <<< "$(shape_of "$m")"
  dir="$work/runs/$m"
  rm -rf "$dir"
  args=(train "$repo/$config" runtime.device=cuda "runtime.precision=$precision" "runtime.peak_flops=$peak"
        "train.steps=$steps" "optimizer.schedule.warmup_steps=$steps" train.eval_every=0 "train.seq_len=$seq" "train.micro_batch=$micro"
        "train.global_batch=$((micro * accum * np))" "data.train=$work/data/text_train_*.bin" data.val=
        data.tokenizer=bytes data.vocab_dir= "log.dir=$dir" log.every=1 checkpoint.resume=never checkpoint.at_end=false
        "${overrides[@]}")
  echo "$m: lattice ${args[*]}"
  # What lattice plan predicts for the same job, beside the measured peak in the table.
  "$lattice" plan "$repo/$config" --world "$np" "${args[@]:2}" > "$work/logs/$m.plan.txt" 2>&1 ||
    echo "$m: lattice plan failed; see $work/logs/$m.plan.txt"
  rc=0
  if (( np == 1 )); then
    "$lattice" "${args[@]}" > "$work/logs/$m.log" 2>&1 || rc=$?
  else
    mpirun -q -np "$np" --bind-to none "$lattice" "${args[@]}" > "$work/logs/$m.log" 2>&1 || rc=$?
  fi
  rm -rf "$dir/checkpoints"  # none is written (checkpoint.at_end=false: 13 GB for llama-1b); the empty directory
  if (( rc != 0 )); then
    echo "$m: lattice train failed (rc $rc); the end of $work/logs/$m.log:"
    tail -5 "$work/logs/$m.log" | sed 's/^/    /'
    failed=1
    continue
  fi
  echo "$m: $(grep -E '^(done|stopped):' "$work/logs/$m.log" | tail -1)"
  ran+=("$m")
done
if (( ${#ran[@]} > 0 )); then
  python3 "$here/summarize.py" --runs "$work/runs" --skip "$skip" --peak "$peak" --peak-source "$peak_source" \
    --precision "$precision" --ranks "$np" --plans "$work/logs" "${ran[@]}" || failed=1
fi

# --- 3. NCCL busbw -------------------------------------------------------------------------
busbw="$build/bin/bench_nccl_busbw"
if (( nccl == 0 )); then
  echo "nccl busbw: SKIP (--no-nccl)"
elif [[ ! -x "$busbw" ]]; then
  echo "nccl busbw: SKIP: $busbw is not built (CMake found no NCCL)"
elif (( gpus < 2 )); then
  echo "nccl busbw: SKIP: $gpus GPU visible; busbw needs 2 or more (one rank per GPU)"
else
  echo
  mpirun -q -np "$gpus" --bind-to none "$busbw" --min-bytes 1M --max-bytes 1G --step 2 || failed=1
fi
exit "$failed"
