#!/usr/bin/env bash
# scripts/gpu-tests.sh: the GPU tests of a build or of an unpacked GPU bundle
# (scripts/gpu-bundle.sh), run directly, one process each, without CTest: for
# a tree that has no CTest files (a bundle) or a machine without CMake.
# gpu-first-run.sh's `tests` part uses it where BUILD_DIR has no
# CTestTestfile.cmake; with one it runs the same selection through ctest.
#
# Runs every tests/test_cuda_*, test_nccl_communicator, test_ops, test_lt_plan,
# test_sdpa_plan and test_half_out_probe there, and test_self_communicator's
# CUDA cases, each under its own time limit, as one process (the MPI tests in
# MPI's singleton mode: test_cuda_training's one-rank layouts; the NCCL test
# on a one-rank communicator, its two stalled-wait cases skipping as they need
# two ranks). Prints each test's output, then a table:
# test, status (Passed, Failed, Skipped: every case skipped, Timeout, NotRun:
# out of time before GPU_FIRST_RUN_DEADLINE, seconds since the epoch, which
# gpu-first-run.sh passes on), seconds.
#
# Usage: scripts/gpu-tests.sh [BUILD_DIR] [--limit SECONDS] [--filter REGEX] [--list]
#   BUILD_DIR  default $BUILD_DIR or build
#   --limit    per test, default 900
#   --filter   only the tests whose name matches (an extended regex)
#   --list     print the selected test names and stop (scripts/gpu-bundle.sh packs these)
# Exit status: 0 none failed; 1 a test failed or timed out; 2 bad usage or no tests.
set -uo pipefail

build="${BUILD_DIR:-build}"
limit=900
filter=""
list=0
while (( $# > 0 )); do
  case "$1" in
    --limit) limit="${2:?--limit needs seconds}"; shift 2 ;;
    --filter) filter="${2:?--filter needs a regex}"; shift 2 ;;
    --list) list=1; shift ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "gpu-tests.sh: unknown argument '$1' (usage: scripts/gpu-tests.sh [BUILD_DIR] [--limit S] [--filter RE] [--list])" >&2
        exit 2 ;;
    *) build="$1"; shift ;;
  esac
done
[[ "$limit" =~ ^[0-9]+$ && "$limit" -gt 0 ]] ||
  { echo "gpu-tests.sh: --limit expects a positive number of seconds, got '$limit'" >&2; exit 2; }

tests=()
for f in "$build"/tests/test_*; do
  t="${f##*/}"
  [[ -x "$f" && "$t" =~ ^(test_cuda_[a-z0-9_]+|test_nccl_communicator|test_ops|test_lt_plan|test_sdpa_plan|test_half_out_probe|test_self_communicator)$ ]] || continue
  [[ -z "$filter" || "$t" =~ $filter ]] && tests+=("$t")
done
# test_cuda_sdpa first: cuDNN's fused attention is what docs/gpu.md says to
# look at first, and a slow test before it must not leave it NotRun.
for i in "${!tests[@]}"; do
  if [[ "${tests[$i]}" == test_cuda_sdpa ]]; then
    tests=(test_cuda_sdpa "${tests[@]:0:$i}" "${tests[@]:$((i + 1))}")
    break
  fi
done
if (( ${#tests[@]} == 0 )); then
  echo "gpu-tests.sh: no GPU tests under $build/tests${filter:+ matching '$filter'}" >&2
  exit 2
fi
if (( list )); then printf '%s\n' "${tests[@]}"; exit 0; fi

rows=()
failed=0
for t in "${tests[@]}"; do
  args=()
  [[ "$t" == test_self_communicator ]] && args=(--gtest_filter='SelfCommunicatorCuda.*')
  this_limit=$limit
  if [[ -n "${GPU_FIRST_RUN_DEADLINE:-}" ]]; then  # gpu-first-run.sh's: end 10 s before it, table printed
    left=$(( GPU_FIRST_RUN_DEADLINE - 10 - $(date +%s) ))
    if (( left < 5 )); then
      rows+=("$(printf '%-30s %-8s %6s' "$t" "NotRun" 0)")
      failed=1
      continue
    fi
    (( this_limit > left )) && this_limit=$left
  fi
  echo "== $t ${args[*]}"
  log="$(mktemp)"
  start=$SECONDS
  rc=0
  timeout "$this_limit" "$build/tests/$t" "${args[@]}" > "$log" 2>&1 || rc=$?
  cat "$log"
  if (( rc == 124 )); then
    status=Timeout
  elif (( rc != 0 )); then
    status=Failed
  elif grep -qE '^\[  PASSED  \] 0 tests' "$log" && grep -qE '^\[  SKIPPED \]' "$log"; then
    status=Skipped  # as CTest's SKIP_REGULAR_EXPRESSION: nothing ran, every case said why
  else
    status=Passed
  fi
  rm -f "$log"
  if [[ "$status" == Failed || "$status" == Timeout ]]; then failed=1; fi
  rows+=("$(printf '%-30s %-8s %6s' "$t" "$status" "$((SECONDS - start))")")
done
echo
echo "test                           status   seconds"
printf '%s\n' "${rows[@]}"
exit "$failed"
