#!/usr/bin/env bash
# bench/head_chunk/run.sh: what `parallel.head_chunk_tokens` saves and costs.
#
# configs/gpt2-tiny.yaml (4 layers, d_model 128, the GPT-2 vocabulary of
# 50257 padded to 50304, micro_batch 8 x seq_len 128 = 1024 tokens per
# microbatch, one microbatch per step): its LM head is most of the step, so
# the extra head matmul that backward runs per chunk shows in full. One rank
# with runtime.threads 2, then two ranks at tp = 2 (one thread each), each
# with the head whole (0) and in chunks of 1024 (one chunk: the recompute's
# cost alone), 256 and 64 tokens. Prints the medians of step_ms and the
# largest peak_mem_bytes (the allocator's peak, metrics.jsonl) over steps
# SKIP+1..STEPS, and the loss of the last step (equal across chunk sizes up
# to rounding). Tokens: tinyshakespeare in the GPT-2 BPE from ../shared/data
# when it is there, else the byte-tokenized licence texts (ids below 257; the
# head's cost depends on the vocabulary size only).
#
# Usage: bench/head_chunk/run.sh [--dir DIR]  (DIR: where the runs go; default a temp dir, removed after)
# Environment: LATTICE (build/bin/lattice), STEPS (12), SKIP (2)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BENCH_NAME=bench/head_chunk/run.sh
# shellcheck source=bench/common.sh
source "$here/../common.sh"
bench_parse_args "${BASH_SOURCE[0]}" 2,19 --dir "" "$@"
bench_lattice_run_setup "$repo" 12 2
bench_enter_work_dir "$BENCH_ARG" lattice-bench-head-chunk
shared="$repo/../shared/data"
if [[ -f "$shared/tinyshakespeare/input.txt" && -f "$shared/gpt2-bpe/encoder.json" ]]; then
  tokens="tinyshakespeare, GPT-2 BPE"
  "$lattice" data prepare --input "$shared/tinyshakespeare/input.txt" --tokenizer gpt2 --vocab-dir "$shared/gpt2-bpe" \
    --out data/t --val-tokens 32768 >/dev/null
  data=(data.tokenizer=gpt2 "data.vocab_dir=$shared/gpt2-bpe")
else
  tokens="licence texts, bytes"
  "$lattice" data prepare --input /usr/share/common-licenses/* --tokenizer bytes --out data/t --val-tokens 4096 >/dev/null
  data=(data.tokenizer=bytes)
fi
echo "# bench/head_chunk/run.sh $(date -u '+%Y-%m-%d %H:%M UTC') | $(nproc) cores | $("$lattice" --version | head -1)"
echo "# tokens: $tokens | 1-minute load before: $(bench_load1)"
printf '%-6s %-11s %10s %14s %12s\n' ranks head_chunk step_ms peak_mem_MiB last_loss
run() {  # RANKS THREADS CHUNK [override...]
  local ranks="$1" threads="$2" chunk="$3" dir="runs/$1_$3"
  shift 3
  mpirun -np "$ranks" --oversubscribe --bind-to none -x OMP_NUM_THREADS="$threads" "$lattice" train \
    "$repo/configs/gpt2-tiny.yaml" 'data.train=data/t_train_*.bin' 'data.val=data/t_val_*.bin' "${data[@]}" \
    train.steps="$steps" train.eval_every=0 optimizer.schedule.warmup_steps=0 log.dir="$dir" checkpoint.resume=never \
    log.every=1 runtime.threads="$threads" parallel.head_chunk_tokens="$chunk" "$@" >/dev/null
  python3 - "$dir/metrics.jsonl" "$skip" <<'PY' | xargs printf '%-6s %-11s %10s %14s %12s\n' "$ranks" "$chunk"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
kept = rows[int(sys.argv[2]):]
print(f"{statistics.median(r['step_ms'] for r in kept):.1f} {max(r['peak_mem_bytes'] for r in kept) / 2**20:.1f} "
      f"{rows[-1]['loss']:.6f}")
PY
}
for chunk in 0 1024 256 64; do run 1 2 "$chunk"; done
for chunk in 0 1024 256 64; do run 2 1 "$chunk" parallel.tp=2; done
