#!/usr/bin/env bash
# Checks Lattice's TensorBoard output (log.tensorboard=true) with the real
# TensorBoard reader: makes (or reuses) a Python virtual environment holding
# the `tensorboard` pip package, trains two tiny GPT-2 runs with TensorBoard
# on -- one rank logging every step, and two data-parallel ranks under mpirun
# logging every 3rd step -- both with evaluations, and runs
# scripts/ci/tensorboard_read.py on each: every numeric metrics.jsonl value
# (per step, val_loss included) must be in the event files at the same step
# with the same value (float32), with no missing, extra or doubled steps, and
# every record must pass TensorBoard's CRC checks. Then it proves the checker
# can fail: a value changed by 1e-5 relative, a dropped metrics line and a
# truncated event file must each be reported. About 10 s with a cached venv
# (the first call also downloads tensorboard from the package index, ~30 s).
#
#   scripts/ci/tensorboard-check.sh [VENV_DIR]      VENV_DIR defaults to /tmp/lattice-tb-venv
#   LATTICE_BIN=/path/to/lattice     the binary (default build/bin/lattice)
#   TENSORBOARD_VERSION=2.20.0       the tensorboard release pinned in the venv
#   TB_ALLOW_MISSING=k1,k2           metrics keys the writer does not export yet
#                                    (default: none — every numeric key must have its tag)
#
# Needs a network path to the Python package index on the first call, and
# python3-venv (installed here with apt when missing; root or sudo).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
lattice=${LATTICE_BIN:-$repo/build/bin/lattice}
reader=$repo/scripts/ci/tensorboard_read.py
venv=${1:-/tmp/lattice-tb-venv}
tb_version=${TENSORBOARD_VERSION:-2.20.0}
# metrics.jsonl keys that src/booster/booster.cpp does not write to TensorBoard (yet).
allow_missing=${TB_ALLOW_MISSING-}
me="tensorboard-check"

die() { echo "$me: FAIL: $*" >&2; exit 1; }

(( $# <= 1 )) || die "too many arguments; usage: $0 [VENV_DIR]"
[[ -x "$lattice" ]] || die "lattice binary '$lattice' not found or not executable (build with scripts/build.sh or set LATTICE_BIN)"
[[ -f "$reader" ]] || die "'$reader' is missing"
command -v mpirun >/dev/null || die "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
[[ "$venv" == /* ]] || venv=$PWD/$venv
case "$venv" in /|/tmp|/root|/home|/usr|/usr/*|/etc|/etc/*) die "refusing VENV_DIR '$venv'; give a directory of its own such as /tmp/lattice-tb-venv" ;; esac

work=$(mktemp -d /tmp/lattice-tb-check.XXXXXX)
cleanup() { rm -rf -- "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
t0=$SECONDS

# --- the virtual environment -------------------------------------------------
base_py=/usr/bin/python3
[[ -x "$base_py" ]] || base_py=$(command -v python3 || true)
[[ -n "$base_py" ]] || die "no python3 found (apt-get install python3)"
as_root=()
[[ $(id -u) -eq 0 ]] || as_root=(sudo -n)
if ! "$base_py" -c 'import venv, ensurepip' 2>/dev/null; then
  [[ "$base_py" == /usr/bin/python3 ]] || die "$base_py cannot make virtual environments (no venv/ensurepip module)"
  echo "$me: installing python3-venv with apt"
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 "${as_root[@]}" apt-get update -qq >"$work/apt.log" 2>&1 || die "apt-get update failed: $(tail -n 1 "$work/apt.log")"
  timeout 300 "${as_root[@]}" apt-get install -y -qq --no-install-recommends python3-venv >>"$work/apt.log" 2>&1 \
    || die "apt-get install python3-venv failed: $(tail -n 1 "$work/apt.log")"
  "$base_py" -c 'import venv, ensurepip' 2>/dev/null || die "python3-venv installed but $base_py still cannot make a venv"
fi

mkdir -p -- "$(dirname "$venv")"
exec 9>"$venv.lock"                    # one builder at a time for a shared cache
flock -w 600 9 || die "waited 600 s for the lock $venv.lock (another tensorboard-check still building the venv?)"
marker=$venv/.lattice-tensorboard-$tb_version
venv_ok() {
  [[ -f "$marker" ]] && [[ "$("$venv/bin/python" -c 'import tensorboard; print(tensorboard.__version__)' 2>/dev/null)" == "$tb_version" ]]
}
if venv_ok; then
  echo "$me: reusing $venv (tensorboard $tb_version)"
else
  if [[ -e "$venv" ]]; then
    [[ -f "$venv/pyvenv.cfg" || -z "$(ls -A "$venv")" ]] \
      || die "'$venv' exists and is not a Python virtual environment; remove it or pass another VENV_DIR"
    rm -rf -- "$venv"
  fi
  echo "$me: creating $venv with tensorboard==$tb_version from the package index"
  timeout 120 "$base_py" -m venv "$venv" >"$work/venv.log" 2>&1 || die "python3 -m venv $venv failed: $(tail -n 1 "$work/venv.log")"
  timeout 600 "$venv/bin/python" -m pip install --no-input --disable-pip-version-check -q "tensorboard==$tb_version" \
    >"$work/pip.log" 2>&1 || die "pip install tensorboard==$tb_version failed (network? pin?): $(tail -n 1 "$work/pip.log")"
  touch "$marker"
  venv_ok || die "tensorboard $tb_version does not import from $venv/bin/python after installing it"
fi
flock -u 9
exec 9>&-
py=$venv/bin/python
t_venv=$((SECONDS - t0))

# --- two runs with TensorBoard on --------------------------------------------
mapfile -t texts < <(find /usr/share/common-licenses -maxdepth 1 -type f | sort)
(( ${#texts[@]} > 0 )) || die "no texts under /usr/share/common-licenses to train on"
timeout 120 "$lattice" data prepare --input "${texts[@]}" --tokenizer bytes \
  --out "$work/data/licenses" --val-tokens 16384 >"$work/prepare.log" 2>&1 \
  || die "lattice data prepare failed: $(tail -n 1 "$work/prepare.log")"
tiny=(
  "data.train=$work/data/licenses_train_*.bin" "data.val=$work/data/licenses_val_*.bin"
  model.n_layer=2 model.d_model=64 model.max_seq_len=32
  train.global_batch=4 train.micro_batch=2 train.seq_len=32 train.eval_steps=2
  optimizer.schedule.warmup_steps=2 log.tensorboard=true
)
run_a=$work/runs/one-rank
timeout --kill-after=10 300 "$lattice" train "$repo/configs/default.yaml" "${tiny[@]}" \
  train.steps=12 train.eval_every=4 log.every=1 "log.dir=$run_a" >"$work/train-a.log" 2>&1 \
  || die "one-rank training failed (exit $?): $(tail -n 1 "$work/train-a.log")"
# Two data-parallel ranks: only rank 0 may write; sparse logging (steps 1,3,6,9,11; evals 5,10,11).
run_b=$work/runs/two-ranks
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout --kill-after=10 300 \
  mpirun -q -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
  "$lattice" train "$repo/configs/default.yaml" "${tiny[@]}" runtime.threads=1 \
  train.steps=11 train.eval_every=5 log.every=3 "log.dir=$run_b" >"$work/train-b.log" 2>&1 \
  || die "two-rank training under mpirun failed (exit $?): $(tail -n 2 "$work/train-b.log" | tr '\n' ' ')"
for r in "$run_a:train-a" "$run_b:train-b"; do
  [[ -s "${r%%:*}/metrics.jsonl" && -d "${r%%:*}/tb" ]] || die "training exited 0 but wrote no ${r%%:*}/metrics.jsonl or tb/ (its last output: '$(tail -n 1 "$work/${r##*:}.log")'; is $lattice a real build?)"
done
n_files=$(find "$run_b/tb" -name '*tfevents*' | wc -l)
[[ "$n_files" == 1 ]] || die "two-rank run wrote $n_files event files in $run_b/tb (expected 1, from rank 0)"
grep -q '"val_loss"' "$run_a/metrics.jsonl" || die "the one-rank run logged no val_loss line (train.eval_every ignored?)"
t_train=$((SECONDS - t0 - t_venv))

check() {  # RUN_DIR: the real comparison, must pass
  timeout 120 "$py" "$reader" "$1" --allow-missing "$allow_missing" --require-tag train/loss --require-tag val/loss \
    >"$work/read.out" 2>"$work/read.err" || die "$(cat "$work/read.err" "$work/read.out")"
  echo "$me: $(cat "$work/read.out")"
}
check "$run_a"
check "$run_b"

# --- the checker must catch broken output ------------------------------------
expect_mismatch() {  # NAME RUN_DIR NEEDLE
  local rc=0
  timeout 120 "$py" "$reader" "$2" --allow-missing "$allow_missing" >"$work/neg.out" 2>"$work/neg.err" || rc=$?
  (( rc == 1 )) || die "self-test '$1': tensorboard_read.py exited $rc (expected 1): $(cat "$work/neg.err" "$work/neg.out")"
  grep -qF -- "$3" "$work/neg.err" || die "self-test '$1': no '$3' in the report: $(cat "$work/neg.err")"
  echo "$me: self-test '$1' caught: $(grep -F -- "$3" "$work/neg.err" | head -n 1)"
}
cp -r "$run_a" "$work/perturbed"
"$py" - "$work/perturbed/metrics.jsonl" <<'EOF'
import json, sys
path = sys.argv[1]
lines = open(path).read().splitlines()
train = [i for i, l in enumerate(lines) if '"loss"' in l]
i = train[len(train) // 2]
rec = json.loads(lines[i])
old = rec["loss"]
rec["loss"] = float(format(old * (1 + 1e-5), ".9g"))
lines[i] = json.dumps(rec)
open(path, "w").write("\n".join(lines) + "\n")
EOF
expect_mismatch "loss changed by 1e-5 relative" "$work/perturbed" "tag 'train/loss' step"
cp -r "$run_a" "$work/dropped"
last_eval=$(grep -n '"val_loss"' "$work/dropped/metrics.jsonl" | tail -n 1 | cut -d: -f1)
sed -i "${last_eval}d" "$work/dropped/metrics.jsonl"
expect_mismatch "eval line dropped from metrics.jsonl" "$work/dropped" "in TensorBoard but no 'val_loss'"
cp -r "$run_a" "$work/truncated"
ev=$(find "$work/truncated/tb" -name '*tfevents*' | head -n 1)
truncate -s $(( $(stat -c %s "$ev") - 10 )) "$ev"
expect_mismatch "event file truncated by 10 bytes" "$work/truncated" "truncated record"

echo "$me: PASS (venv ${t_venv} s, training ${t_train} s, total $((SECONDS - t0)) s)"
