#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a trained model: installs the
# dependencies, builds, tokenizes the license texts every Debian machine has
# (/usr/share/common-licenses, byte-level tokens) and trains the default
# tiny GPT-2 on them (configs/default.yaml) under mpirun: two data-parallel
# ranks (scripts/launch.sh picks the binding and threads per rank), then
# prints 256 bytes the trained model writes. Output lands in runs/default/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
mapfile -t texts < <(find /usr/share/common-licenses -maxdepth 1 -type f | sort)
build/bin/lattice data prepare --input "${texts[@]}" --tokenizer bytes \
  --out data/licenses/licenses --val-tokens 16384
run_dir=runs/default
if [[ -s "$run_dir/metrics.jsonl" ]]; then
  run_dir="runs/default-$(date +%Y%m%d-%H%M%S)"
fi
scripts/launch.sh -n 2 configs/default.yaml "log.dir=$run_dir" "$@"
# What the model writes after training: lattice sample, one process, the
# run's latest checkpoint (skipped when an override put the run elsewhere).
if [[ -d "$run_dir/checkpoints" ]]; then
  echo "--- lattice sample $run_dir --tokens 256 --temperature 0.8"
  build/bin/lattice sample "$run_dir" --tokens 256 --temperature 0.8
fi
