#!/usr/bin/env bash
# The GPU bundle (scripts/gpu-bundle.sh, scripts/gpu-bundle-run.sh) on this
# machine made to look like a GPU machine that cannot build Lattice. In a
# private mount namespace:
#   - every library the bundle carries is hidden where the system has it
#     (/dev/null bound over the file; not the base ones every distribution
#     has: zlib, PCRE2, udev, uuid, libatomic), as are Open MPI's, PMIx's and
#     hwloc's folders, so each must come from the bundle;
#   - the CUDA toolkit's library folder is hidden, and shown again as
#     nvidia/cuda/lib of a site-packages under /opt/*/.venv, where the GPU
#     machines' pip wheels keep cuBLAS, cuDNN and NCCL, so gpu-bundle-run.sh
#     must find them there.
# Then: --check resolves every library; the GPU tests run from the bundle
# (test_cuda_backend loads the backend through the found CUDA libraries; the
# device tests skip, saying why); the info part stops with "no CUDA device"
# (exit 77) as on any machine without a GPU; and `lattice train` from the
# bundle, one process in MPI's singleton mode with Open MPI's components from
# the bundle, trains a few CPU steps to the same losses as the build's
# lattice outside the namespace.
# Needs root (mount namespaces) and a build with the CUDA backend; skips,
# saying why, without them.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
if [[ ! -f build/lib/liblattice_cuda.so ]]; then
  echo "gpu-bundle-smoke: SKIP: build/lib/liblattice_cuda.so is not built (no CUDA toolkit found when configuring)"
  exit 0
fi
if ! unshare --mount true 2> /dev/null; then
  echo "gpu-bundle-smoke: SKIP: cannot make a mount namespace here (needs root)"
  exit 0
fi
tmp="$(mktemp -d /tmp/lattice-gpu-bundle.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
bundle="$tmp/lattice-gpu.tar.xz"
scripts/gpu-bundle.sh --no-build --out "$bundle" || { echo "gpu-bundle-smoke: FAIL: gpu-bundle.sh"; exit 1; }
mkdir -p "$tmp/list" && xz -dc "$bundle" | tar -xf - -C "$tmp/list" ./sys

# The reference: the build's lattice, outside the namespace, a few CPU steps on the repo's docs as bytes.
mapfile -t inputs < <(find docs -type f -name '*.md' | sort)
build/bin/lattice data prepare --input "${inputs[@]}" --tokenizer bytes --out "$tmp/data/text" --val-tokens 4096 \
  > "$tmp/prepare.log" 2>&1 || { echo "gpu-bundle-smoke: FAIL: data prepare"; cat "$tmp/prepare.log"; exit 1; }
train_args=(train configs/gpt2-tiny.yaml runtime.device=cpu runtime.threads=1 train.steps=3 train.eval_every=0
            optimizer.schedule.warmup_steps=1
            "data.train=$tmp/data/text_train_*.bin" data.val= data.tokenizer=bytes data.vocab_dir= log.every=1
            checkpoint.resume=never checkpoint.every=0)
OMP_NUM_THREADS=1 build/bin/lattice "${train_args[@]}" "log.dir=$tmp/runs/build" > "$tmp/train-build.log" 2>&1 ||
  { echo "gpu-bundle-smoke: FAIL: the build's lattice train"; tail -5 "$tmp/train-build.log"; exit 1; }

cat > "$tmp/inside.sh" << 'EOF'
set -uo pipefail
tmp="$1" bundle="$2"
hide_file() { [[ -e "$1" ]] && mount --bind /dev/null "$(readlink -f "$1")"; }
hide_dir() { [[ -d "$1" ]] && mount -t tmpfs none "$1"; }
for lib in "$tmp"/list/sys/*; do
  name="$(basename "$lib")"
  # Left visible: base libraries every distribution has, which mount, grep and python3 need here too.
  [[ "$name" =~ ^lib(z|pcre2-8|udev|uuid|atomic)\.so ]] && continue
  for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp \
           /usr/lib/x86_64-linux-gnu/blas /usr/lib/x86_64-linux-gnu/openblas-pthread; do
    hide_file "$d/$name"
  done
done
# The CUDA libraries where the GPU machines' pip wheels keep them, then the toolkit's folder hidden.
mount -t tmpfs none /opt
site=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
mkdir -p "$site/cuda/lib"
mount --bind /usr/local/cuda/lib "$site/cuda/lib"
hide_dir /usr/local/cuda/lib
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/lib/x86_64-linux-gnu/hwloc \
         /usr/share/openmpi /etc/openmpi; do
  hide_dir "$d"
done
fail=0
say() { echo "gpu-bundle-smoke: $*"; }
if ldd /usr/lib/x86_64-linux-gnu/libmpi.so.40 > /dev/null 2>&1 && [[ -s /usr/lib/x86_64-linux-gnu/libmpi.so.40 ]]; then
  say "FAIL: the system's libmpi is still visible inside the namespace"; exit 1
fi
run=(scripts/gpu-bundle-run.sh --bundle "$bundle" --dest "$tmp/unpacked")
if "${run[@]}" --check > "$tmp/check.log" 2>&1; then
  say "$(tail -1 "$tmp/check.log")"
  grep -E '^  lib(cublas|cudnn|nccl)' "$tmp/check.log" | sed 's/^  /gpu-bundle-smoke:   /'
else
  say "FAIL: --check"; sed 's/^/    /' "$tmp/check.log"; fail=1
fi
rc=0
"${run[@]}" --exec scripts/gpu-tests.sh "$tmp/unpacked" > "$tmp/tests.log" 2>&1 || rc=$?
if (( rc == 0 )) && grep -qE '^test_cuda_backend +Passed' "$tmp/tests.log"; then
  say "tests from the bundle: $(grep -cE ' (Passed|Skipped) ' "$tmp/tests.log") passed or skipped, test_cuda_backend passed (the backend loaded)"
else
  say "FAIL: the GPU tests from the bundle (exit $rc):"; tail -30 "$tmp/tests.log" | sed 's/^/    /'; fail=1
fi
rc=0
OUT="$tmp/out" "${run[@]}" --parts info > "$tmp/info.log" 2>&1 || rc=$?
if (( rc == 77 )) && grep -q '^no CUDA device: ' "$tmp/info.log"; then
  say "info part: no GPU, stopped cleanly: $(grep -m1 '^no CUDA device: ' "$tmp/info.log")"
elif (( rc == 0 )); then
  say "info part: a GPU is visible, ran"
else
  say "FAIL: the info part (exit $rc):"; sed 's/^/    /' "$tmp/info.log"; fail=1
fi
rc=0
OMP_NUM_THREADS=1 "${run[@]}" --exec "$tmp/unpacked/bin/lattice" "${@:3}" > "$tmp/train-bundle.log" 2>&1 || rc=$?
if (( rc != 0 )); then
  say "FAIL: lattice train from the bundle (exit $rc):"; tail -20 "$tmp/train-bundle.log" | sed 's/^/    /'; fail=1
fi
exit "$fail"
EOF
rc=0
unshare --mount --propagation private bash "$tmp/inside.sh" "$tmp" "$bundle" "${train_args[@]}" \
  "log.dir=$tmp/runs/bundle" || rc=$?
if (( rc == 0 )); then
  losses() { python3 -c 'import json, sys
print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "loss" in json.loads(l)))' "$1/metrics.jsonl"; }
  a="$(losses "$tmp/runs/build")" b="$(losses "$tmp/runs/bundle")"
  if [[ -n "$a" && "$a" == "$b" ]]; then
    echo "gpu-bundle-smoke: lattice train from the bundle (MPI singleton, Open MPI from the bundle): losses $b, the build's exactly"
  else
    echo "gpu-bundle-smoke: FAIL: losses from the bundle '$b', from the build '$a'"
    rc=1
  fi
fi
(( rc == 0 )) && echo "gpu-bundle-smoke: PASS"
exit "$rc"
