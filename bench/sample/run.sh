#!/usr/bin/env bash
# Wall time of `lattice sample` on one checkpoint: the binary under test and,
# when BASELINE names another, that one too, alternating run by run so load
# drifts hit both alike. Prints each run, then the median per binary and
# tokens/s (generated tokens x samples over the median; checkpoint loading
# included).
#
#   bench/sample/run.sh CHECKPOINT [lattice sample options...]
#   env: LATTICE (default build/bin/lattice), BASELINE (optional), RUNS (default 5)
#
# The options must include --tokens N (and --samples N when more than one).
set -euo pipefail
(($# >= 1)) || { echo "usage: bench/sample/run.sh CHECKPOINT [lattice sample options...]" >&2; exit 2; }
ckpt=$1
shift
lattice=${LATTICE:-build/bin/lattice}
runs=${RUNS:-5}
tokens=0 samples=1
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case ${args[i]} in
    --tokens) tokens=${args[i + 1]} ;;
    --samples) samples=${args[i + 1]} ;;
  esac
done
((tokens > 0)) || { echo "bench/sample/run.sh: pass --tokens N" >&2; exit 2; }
bins=("$lattice")
[[ -n ${BASELINE:-} ]] && bins+=("$BASELINE")
for b in "${bins[@]}"; do [[ -x $b ]] || { echo "bench/sample/run.sh: $b is not an executable" >&2; exit 2; }; done
declare -A times
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); lattice sample $ckpt ${args[*]}"
for ((r = 1; r <= runs; ++r)); do
  for b in "${bins[@]}"; do
    t0=$(date +%s.%N)
    "$b" sample "$ckpt" "${args[@]}" > /dev/null 2>&1
    t1=$(date +%s.%N)
    s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')
    times[$b]+="$s "
    printf 'run %d %s %.3f s\n' "$r" "$b" "$s"
  done
done
for b in "${bins[@]}"; do
  # shellcheck disable=SC2086
  med=$(printf '%s\n' ${times[$b]} | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
  printf 'RESULT binary=%s median_s=%.3f tokens_per_s=%.1f runs=%d\n' "$b" "$med" "$(awk -v t="$tokens" -v n="$samples" -v m="$med" 'BEGIN {print t * n / m}')" "$runs"
done
