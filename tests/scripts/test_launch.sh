#!/usr/bin/env bash
# scripts/launch.sh --dry-run: the mpirun line it builds and its one-line
# refusals, without starting a job (the real launches are the Slurm and
# multinode smokes of .ci/run).
#
#   tests/scripts/test_launch.sh SOURCE_DIR LATTICE_BINARY
set -uo pipefail

src=$1 lattice=$2
launch=$src/scripts/launch.sh
config=$src/configs/gpt2-tiny.yaml
failures=0

fail() { echo "FAIL: $*"; failures=$(( failures + 1 )); }

# expect_line WANT ARGS...: exit 0 and the dry-run line holds WANT.
expect_line() {
  local want=$1 out rc=0
  shift
  out=$(LATTICE_BIN=$lattice "$launch" --dry-run "$@" 2>&1) || rc=$?
  (( rc == 0 )) || { fail "launch.sh --dry-run $* exited $rc: $out"; return; }
  [[ $out == *"$want"* ]] || fail "launch.sh --dry-run $*: no '$want' in: $out"
}

# expect_error WANT ARGS...: exit 2 with one line on stderr that holds WANT.
expect_error() {
  local want=$1 err rc=0
  shift
  err=$(LATTICE_BIN=$lattice "$launch" --dry-run "$@" 2>&1 >/dev/null) || rc=$?
  (( rc == 2 )) || fail "launch.sh --dry-run $*: exit $rc, expected 2 ($err)"
  [[ $(printf '%s\n' "$err" | wc -l) == 1 ]] || fail "launch.sh --dry-run $*: not one line: $err"
  [[ $err == *"$want"* ]] || fail "launch.sh --dry-run $*: no '$want' in: $err"
}

# Ranks from the config, from -n, from the host slots.
expect_line "-np 2 " "$config" parallel.tp=2 runtime.threads=1
expect_line "-np 4 " -n 4 "$config" parallel.dp=0 runtime.threads=1
expect_line "-np 4 --host a:2,b:2 --map-by ppr:2:node" --host a:2,b:2 "$config" parallel.dp=0 runtime.threads=1
# Hosts of different slot counts are filled by slot: ppr:2:node would put 2 ranks on a one-slot host.
expect_line "-np 3 --host a:1,b:2 --map-by slot" --host a:1,b:2 "$config" parallel.dp=0 runtime.threads=1
expect_line "--map-by ppr:1:node" --host a:1,b:1 "$config" parallel.dp=0 runtime.threads=1

# Refusals: one line, exit 2.
expect_error "-n 'configs/gpt2-tiny.yaml' is not a positive integer" -n configs/gpt2-tiny.yaml
expect_error "-n '0' is not a positive integer" -n 0 "$config"
expect_error "does not match the config" -n 3 "$config" parallel.tp=2 parallel.dp=1
expect_error "-n 3 is not a multiple of parallel.tp (2)" -n 3 "$config" parallel.tp=2 parallel.dp=0
expect_error "no CONFIG given"
expect_error "config file 'nope.yaml' not found" nope.yaml
expect_error "give --hostfile or --host, not both" --host a:1 --hostfile /dev/null "$config"
expect_error "need more than the 2 slots" --host a:1,b:1 "$config" parallel.dp=3

if (( failures )); then echo "$failures failure(s)"; exit 1; fi
echo PASS
