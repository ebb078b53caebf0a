#!/usr/bin/env bash
# Smoke test of scripts/plot_metrics.py on real training output: trains two
# tiny GPT-2 runs that differ only in the learning rate (on the license texts
# of /usr/share/common-licenses, bytes tokenizer), plots both into one PNG and
# checks the PNG: PNG signature, at least 20 KB, at least 800x600 pixels, and
# both runs' line colours present in the pixels; the point counts printed by
# the plotter must match the metrics.jsonl lines. Then checks that bad calls
# (a missing run directory, a directory without metrics.jsonl, no -o) fail
# with exactly one line on stderr. Everything lives in a temporary directory
# that is removed on exit. About 5 s on 2 cores.
#
#   scripts/ci/plot-smoke.sh                 uses build/bin/lattice
#   LATTICE_BIN=/path/to/lattice scripts/ci/plot-smoke.sh
#   KEEP_PNG=/tmp/plot.png scripts/ci/plot-smoke.sh   also copies the PNG there
#
# Needs python3-matplotlib for /usr/bin/python3 (scripts/install-deps.sh).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
lattice=${LATTICE_BIN:-$repo/build/bin/lattice}
plot=$repo/scripts/plot_metrics.py
me="plot-smoke"

die() { echo "$me: FAIL: $*" >&2; exit 1; }

[[ -x "$lattice" ]] || die "lattice binary '$lattice' not found or not executable (build with scripts/build.sh or set LATTICE_BIN)"
[[ -x "$plot" ]] || die "'$plot' is missing or not executable"
py=$(head -n 1 "$plot" | sed -e 's/^#!//' -e 's/ .*//')
"$py" -c 'import matplotlib' 2>/dev/null \
  || die "matplotlib is not importable by $py (the interpreter of $plot); run scripts/install-deps.sh"

work=$(mktemp -d /tmp/lattice-plot-smoke.XXXXXX)
cleanup() { rm -rf -- "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
mapfile -t texts < <(find /usr/share/common-licenses -maxdepth 1 -type f | sort)
(( ${#texts[@]} > 0 )) || die "no texts under /usr/share/common-licenses to train on"
timeout 120 "$lattice" data prepare --input "${texts[@]}" --tokenizer bytes \
  --out "$work/data/licenses" --val-tokens 16384 >"$work/prepare.log" 2>&1 \
  || die "lattice data prepare failed: $(tail -n 1 "$work/prepare.log")"

steps=20
eval_every=5
tiny=(
  "data.train=$work/data/licenses_train_*.bin" "data.val=$work/data/licenses_val_*.bin"
  model.n_layer=2 model.d_model=64 model.max_seq_len=32
  "train.steps=$steps" train.global_batch=4 train.micro_batch=2 train.seq_len=32
  "train.eval_every=$eval_every" train.eval_steps=2
  optimizer.schedule.warmup_steps=4 log.every=1 runtime.peak_flops=1e10 checkpoint.every=0
)
for lr in 3e-3 5e-4; do
  run=$work/runs/lr-$lr
  timeout --kill-after=10 300 "$lattice" train "$repo/configs/default.yaml" "${tiny[@]}" \
    "optimizer.lr=$lr" "log.dir=$run" >"$work/train-$lr.log" 2>&1 \
    || die "training with optimizer.lr=$lr failed (exit $?): $(tail -n 1 "$work/train-$lr.log")"
  [[ -s "$run/metrics.jsonl" ]] \
    || die "training exited 0 but wrote no $run/metrics.jsonl (its last output: '$(tail -n 1 "$work/train-$lr.log")'; is $lattice a real build?)"
done
t_train=$((SECONDS - t0))

# The plot itself.
png=$work/compare.png
out=$(timeout 120 "$plot" "$work/runs/lr-3e-3" "$work/runs/lr-5e-4" -o "$png" --title "plot-smoke: lr 3e-3 vs 5e-4" 2>"$work/plot.err") \
  || die "plot_metrics.py failed: $(cat "$work/plot.err")"
[[ ! -s "$work/plot.err" ]] || die "plot_metrics.py printed on stderr for good input: $(head -n 3 "$work/plot.err")"
echo "$me: $out"
[[ -f "$png" ]] || die "plot_metrics.py exited 0 but wrote no $png"
size=$(stat -c %s "$png")
(( size > 20000 )) || die "$png is only $size bytes (expected > 20000 for four panels of two runs)"
magic=$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')
[[ "$magic" == 89504e470d0a1a0a ]] || die "$png does not start with the PNG signature (got $magic)"
# IHDR is the first chunk: width and height are big-endian 32-bit at offsets 16 and 20.
dims=$(od -An -j16 -N8 -tu1 "$png" | awk '{print $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}')
read -r width height <<<"$dims"
(( width >= 800 && height >= 600 )) || die "$png is ${width}x${height} pixels (expected at least 800x600)"
# Both runs must be drawn: count pixels of matplotlib's first two cycle colours
# (C0 #1f77b4 for the first run, C1 #ff7f0e for the second).
counts=$("$py" - "$png" <<'EOF'
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.image as mpimg
import numpy as np
img = mpimg.imread(sys.argv[1])[..., :3]
rgb = np.rint(img * 255).astype(int)
def count(hex_):
    c = np.array([int(hex_[i:i + 2], 16) for i in (0, 2, 4)])
    return int((np.abs(rgb - c).max(axis=-1) <= 8).sum())
print(count("1f77b4"), count("ff7f0e"))
EOF
) || die "could not read back $png with matplotlib"
read -r c0 c1 <<<"$counts"
(( c0 > 500 && c1 > 500 )) || die "$png: too few pixels of the run colours (first run $c0, second $c1; expected > 500 each)"
# The plotter's own count must match what the runs logged.
want_train=$((2 * steps))
want_eval=$((2 * (steps / eval_every)))
[[ "$out" == *"(2 run(s), $want_train train and $want_eval eval points)"* ]] \
  || die "plot_metrics.py reported '$out'; expected 2 runs, $want_train train and $want_eval eval points"
if [[ -n "${KEEP_PNG:-}" ]]; then cp -- "$png" "$KEEP_PNG"; echo "$me: PNG copied to $KEEP_PNG"; fi

# Bad calls: non-zero exit and exactly one line on stderr that names the problem.
expect_one_line_error() {  # NAME NEEDLE ARGS...
  local name=$1 needle=$2 rc=0
  shift 2
  timeout 60 "$plot" "$@" >"$work/bad.out" 2>"$work/bad.err" || rc=$?
  (( rc != 0 )) || die "$name: plot_metrics.py exited 0"
  (( rc != 124 )) || die "$name: plot_metrics.py timed out"
  local lines
  lines=$(wc -l <"$work/bad.err")
  [[ "$lines" == 1 ]] || die "$name: expected one line on stderr, got $lines: $(cat "$work/bad.err")"
  grep -qF -- "$needle" "$work/bad.err" || die "$name: the error does not mention '$needle': $(cat "$work/bad.err")"
  [[ ! -s "$work/bad.out" ]] || die "$name: printed on stdout: $(cat "$work/bad.out")"
  echo "$me: $name -> exit $rc: $(cat "$work/bad.err")"
}
mkdir -p "$work/not-a-run"
expect_one_line_error "missing run dir" "$work/no-such-run" "$work/runs/lr-3e-3" "$work/no-such-run" -o "$work/bad.png"
expect_one_line_error "dir without metrics.jsonl" "$work/not-a-run/metrics.jsonl" "$work/not-a-run" -o "$work/bad.png"
expect_one_line_error "metrics.jsonl for its run dir" "is a file: pass the run directory" \
  "$work/runs/lr-3e-3/metrics.jsonl" -o "$work/bad.png"
expect_one_line_error "no -o" "-o" "$work/runs/lr-3e-3"
expect_one_line_error "empty -o" "-o is empty" "$work/runs/lr-3e-3" -o ""
mkdir -p "$work/all-null"   # a run whose every loss is null (diverged) and no eval: nothing to plot
printf '{"step": 1, "loss": null, "lr": 0.001}\n{"step": 2, "loss": null, "lr": 0.001}\n' >"$work/all-null/metrics.jsonl"
expect_one_line_error "every loss null" "every training line's loss is null" "$work/all-null" -o "$work/bad.png"
[[ ! -e "$work/bad.png" ]] || die "a failed call left $work/bad.png behind"

echo "$me: PASS (${size} byte ${width}x${height} PNG, run colours ${c0}/${c1} px; training ${t_train} s, total $((SECONDS - t0)) s)"
