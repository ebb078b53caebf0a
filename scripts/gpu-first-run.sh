#!/usr/bin/env bash
# scripts/gpu-first-run.sh: the first session on a machine with a GPU, in one
# command (docs/gpu.md has the background and what to look at first).
#
# Runs these parts in order, each under its own time limit, going on past a
# failure, each part's output in OUT/<part>.log:
#   build   scripts/build.sh (incremental; the CUDA backend builds where nvcc is;
#           skipped when BUILD_DIR is an unpacked bundle of scripts/gpu-bundle.sh,
#           which scripts/gpu-bundle-run.sh runs this script on)
#   info    bench_gpu_info: the devices, driver and runtime (exit 77: no GPU, stop)
#   tests   the GPU tests and the host-side plans they rest on, through ctest
#           (test_cuda_*, test_nccl_*, test_ops with its OpsCuda cases, the
#           cuBLASLt, SDPA and half-output plans); test_cuda_training's entries
#           skip, saying why, where there are fewer GPUs than their ranks.
#           Without CTest files (a bundle), scripts/gpu-tests.sh runs the same
#           binaries one by one
#   cudnn   only when test_cuda_sdpa failed: it again with cuDNN's debug log
#           (OUT/cudnn-debug.log says why a graph was refused)
#   sanitize  the attention tests (test_cuda_sdpa, test_cuda_attention16) under
#           compute-sanitizer's memcheck: a write past a buffer whose next bytes
#           the memory pool owns is no fault without it; skipped, saying so,
#           where the toolkit has no compute-sanitizer
#   train   lattice train on configs/gpt2-tiny.yaml with runtime.device=cuda
#           at fp32, bf16 and fp16 (the repo's sources as byte tokens)
#   bench   bench/gpu/run.sh --precision bf16, one rank per visible GPU
# and ends with a table: part, exit status, seconds, log.
#
# Usage: scripts/gpu-first-run.sh [--parts build,info,tests,cudnn,sanitize,train,bench] [--out DIR]
#   OUT defaults to $OUT (the folder the device tool brings back) or
#   gpu-first-run-<UTC time>. BUILD_DIR as scripts/build.sh (default build).
#   GPU_FIRST_RUN_DEADLINE (seconds since the epoch): every part ends by then (part() below).
# Exit status: 0 every part passed; 1 a part failed; 77 no CUDA device; 2 bad usage.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 2
build="${BUILD_DIR:-build}"
parts="build,info,tests,cudnn,sanitize,train,bench"
out="${OUT:-gpu-first-run-$(date -u +%Y%m%dT%H%M%SZ)}"
while (( $# > 0 )); do
  case "$1" in
    --parts) parts="${2:?--parts needs a list}"; shift 2 ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    *) echo "gpu-first-run.sh: unknown argument '$1' (usage: scripts/gpu-first-run.sh [--parts LIST] [--out DIR])" >&2
       exit 2 ;;
  esac
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

wanted() { [[ ",$parts," == *",$1,"* ]]; }
summary=()
failed=0
# part NAME LIMIT_S CMD...: runs CMD under `timeout`, its output to OUT/NAME.log and the
# last lines to the terminal; records the status. Returns CMD's status.
# With GPU_FIRST_RUN_DEADLINE (seconds since the epoch) a part's limit is cut to the time left, and a
# part with less than 30 s left is not started (exit 124, "out of time"): the caller's own limit (the
# device tool's 10 minutes per command) then never cuts off the end, the summary and the logs.
deadline="${GPU_FIRST_RUN_DEADLINE:-}"
part() {
  local name="$1" limit="$2"
  shift 2
  local log="$out/$name.log" start=$SECONDS rc=0
  if [[ -n "$deadline" ]]; then
    local left=$(( deadline - $(date +%s) ))
    if (( left < 30 )); then
      echo "== $name: not started: out of time (${left} s left before GPU_FIRST_RUN_DEADLINE)"
      summary+=("$(printf '%-7s %5s %7s  %s' "$name" 124 0 "not started: out of time")")
      failed=1
      return 124
    fi
    (( limit > left )) && limit=$left
  fi
  echo "== $name (limit ${limit} s): $*"
  timeout "$limit" "$@" > "$log" 2>&1 || rc=$?
  tail -n 15 "$log" | sed 's/^/   /'
  (( rc == 124 )) && echo "   $name: stopped at its limit of $limit s"
  summary+=("$(printf '%-7s %5s %7s  %s' "$name" "$rc" "$((SECONDS - start))" "$log")")
  (( rc == 0 )) || failed=1
  return "$rc"
}

if wanted build; then
  if [[ -f "$build/MANIFEST" ]]; then
    echo "== build: skipped: $build is a bundle of scripts/gpu-bundle.sh, already built"
  else
    part build 3600 scripts/build.sh
  fi
fi
info="$build/bin/bench_gpu_info"
gpus=1
if wanted info; then
  if [[ ! -x "$info" ]]; then
    echo "no CUDA device: cannot look: $info is not built (no CUDA toolkit found when configuring)"
    exit 77
  fi
  rc=0
  part info 120 "$info" || rc=$?
  if (( rc == 77 )); then
    grep -m1 'no CUDA device' "$out/info.log"
    exit 77
  fi
  gpus="$("$info" --count 2> /dev/null || echo 1)"
  command -v nvidia-smi > /dev/null && nvidia-smi > "$out/nvidia-smi.log" 2>&1
fi

sdpa_failed=0
if wanted tests; then
  if [[ -f "$build/CTestTestfile.cmake" ]] && command -v ctest > /dev/null; then
    part tests 1800 ctest --test-dir "$build" --output-on-failure -j 4 \
      -R "test_cuda|test_nccl|^test_ops$|test_lt_plan|test_sdpa_plan|test_half_out_probe"
  else  # a bundle, or no CMake: the same tests one by one (MPI ones as single processes)
    part tests 1800 scripts/gpu-tests.sh "$build"
  fi
  grep -qE "test_cuda_sdpa .*(Failed|Exception|Timeout)" "$out/tests.log" && sdpa_failed=1
fi
if wanted cudnn && (( sdpa_failed )); then
  part cudnn 600 env CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$out/cudnn-debug.log" "$build/tests/test_cuda_sdpa"
  # The debug log records every cuDNN call: a log past the device tool's
  # limit on a returned file would lose every log packed with it. Keep its
  # first MiB (the first graphs) and last 6 MiB (the refusal).
  if [[ -f "$out/cudnn-debug.log" ]] && (( $(stat -c %s "$out/cudnn-debug.log") > 8 * 1048576 )); then
    { head -c 1048576 "$out/cudnn-debug.log"
      printf '\n... [gpu-first-run.sh: cut to its first 1 MiB and last 6 MiB] ...\n'
      tail -c 6291456 "$out/cudnn-debug.log"; } > "$out/cudnn-debug.log.cut"
    mv "$out/cudnn-debug.log.cut" "$out/cudnn-debug.log"
  fi
fi

if wanted sanitize; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if [[ -x "$sanitizer" ]]; then
    for t in test_cuda_sdpa test_cuda_attention16; do
      part "sanitize-${t#test_cuda_}" 1800 "$sanitizer" --tool memcheck --error-exitcode 1 "$build/tests/$t"
    done
  else
    echo "== sanitize: skipped: no compute-sanitizer on PATH or in /usr/local/cuda/bin"
    summary+=("$(printf '%-7s %5s %7s  %s' sanitize skipped 0 'no compute-sanitizer')")
  fi
fi

if wanted train; then
  mapfile -t inputs < <(find src docs -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.md' \) | sort)
  part data 300 "$build/bin/lattice" data prepare --input "${inputs[@]}" --tokenizer bytes --out "$out/data/text" \
    --val-tokens 65536
  for precision in fp32 bf16 fp16; do
    rm -rf "$out/runs/tiny-$precision"
    part "train-$precision" 900 "$build/bin/lattice" train configs/gpt2-tiny.yaml runtime.device=cuda \
      "runtime.precision=$precision" train.steps=40 train.eval_every=20 train.eval_steps=2 \
      "data.train=$out/data/text_train_*.bin" "data.val=$out/data/text_val_*.bin" data.tokenizer=bytes \
      data.vocab_dir= "log.dir=$out/runs/tiny-$precision" log.every=5 checkpoint.resume=never
  done
fi

if wanted bench; then
  bench_args=(--np "$gpus")
  # Several ranks, and the NCCL rows, go through mpirun, which a bundle (scripts/gpu-bundle.sh) does not carry:
  # without it, one rank and no NCCL rows rather than every run failing with "mpirun: command not found".
  if (( gpus > 1 )) && ! command -v mpirun > /dev/null; then
    echo "== bench: one rank and no NCCL rows: $gpus GPUs are visible but there is no mpirun here"
    bench_args=(--np 1 --no-nccl)
  fi
  part bench 2400 env STEPS=10 SKIP=3 bench/gpu/run.sh --precision bf16 "${bench_args[@]}" --out "$out/bench"
fi

echo
echo "part     exit seconds  log"
printf '%s\n' "${summary[@]}"
echo "logs and runs: $out"
exit "$failed"
