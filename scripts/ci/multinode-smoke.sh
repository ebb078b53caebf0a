#!/usr/bin/env bash
# Multi-node smoke test on one machine: two network namespaces joined by a veth
# pair act as two hosts, and a 4-rank tp=2 x pp=2 GPT-2 job runs across them
# over TCP (Open MPI btl tcp,self, no shared memory), started by
# scripts/launch.sh --hostfile. Checks:
#   - the rank map lattice prints puts ranks 0-1 on the first host and 2-3 on
#     the second, so pipeline stage 0 and stage 1 are on different hosts;
#   - the veth carried at least the forward activations between the stages;
#   - every step's loss equals a single-rank reference run of the same config
#     (dropout 0, fixed seed) within relative 1e-5 (TOLERANCE);
#   - hosts of unequal slots (slots=1, then slots=2): a 3-rank dp=3 job puts
#     rank 0 on the first host and ranks 1-2 on the second (launch.sh maps by
#     slot there), and its losses equal a single-rank run's.
# Needs root (ip netns, /etc/hosts), iproute2, util-linux (unshare), Open MPI,
# python3. Everything it makes (namespaces, /etc/hosts lines, temp files,
# processes in the namespaces) is removed on exit, also on failure.
#
#   scripts/ci/multinode-smoke.sh            (from anywhere; about 2-3 s on 2 cores)
#   LATTICE_BIN=path/to/lattice scripts/ci/multinode-smoke.sh
#   KEEP_TMP=1 scripts/ci/multinode-smoke.sh   keep the temp directory (logs, runs)
set -euo pipefail

prog=scripts/ci/multinode-smoke.sh
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "$prog: error: $*" >&2; exit 1; }
say() { echo "$prog: $*"; }
start=$SECONDS

lattice=${LATTICE_BIN:-$repo/build/bin/lattice}
tolerance=${TOLERANCE:-1e-5}
steps=6
job_timeout=90   # seconds for the 4-rank job (it takes about 1 s)
[[ -x $lattice ]] || die "lattice binary '$lattice' not found or not executable (build with scripts/build.sh or set LATTICE_BIN)"
(( EUID == 0 )) || die "must run as root (it creates network namespaces and edits /etc/hosts)"
for tool in ip unshare mpirun timeout; do
  command -v "$tool" >/dev/null || die "'$tool' not found (install iproute2, util-linux and openmpi-bin)"
done
python=/usr/bin/python3
[[ -x $python ]] || python=$(command -v python3) || die "python3 not found (apt-get install python3)"
[[ -f /usr/share/common-licenses/GPL-3 ]] || die "/usr/share/common-licenses is missing (it holds the training text; install base-files)"

# ---- names (the pid keeps concurrent runs apart) -------------------------------
tag="lattice-multinode-smoke $$"
host_a="ltmn$$a" host_b="ltmn$$b"        # namespace name = host name
veth_a="lmv$$a" veth_b="lmv$$b"         # <= 15 characters
subnet=169.254.213.0/24 addr_a=169.254.213.1 addr_b=169.254.213.2
tmp=$(mktemp -d /tmp/lattice-mn-smoke.XXXXXX)
made_ns=()

cleanup() {
  local rc=$? ns pids
  trap - EXIT INT TERM
  for ns in "${made_ns[@]}"; do
    # Processes left in our namespaces (an orted or rank after a timeout) are ours.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for _ in 1 2 3 4 5 6 7 8 9 10; do   # at most 2 s, then KILL
        [[ -n $(ip netns pids "$ns" 2>/dev/null || true) ]] || break
        sleep 0.2
      done
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      # shellcheck disable=SC2086
      if [[ -n $pids ]]; then kill -KILL $pids 2>/dev/null || true; sleep 0.2; fi
    fi
    ip netns del "$ns" 2>/dev/null || echo "$prog: warning: could not delete namespace $ns" >&2
  done
  if grep -q " # $tag\$" /etc/hosts 2>/dev/null; then
    # rewrite in place (/etc/hosts may be a bind mount that cannot be renamed over)
    grep -v " # $tag\$" /etc/hosts >"$tmp/hosts.clean" || true
    cat "$tmp/hosts.clean" >/etc/hosts
  fi
  if [[ ${KEEP_TMP:-0} == 1 ]]; then
    echo "$prog: kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  if (( rc != 0 )); then echo "$prog: FAILED (exit $rc) after $(( SECONDS - start )) s" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- two hosts -----------------------------------------------------------------
for ns in "$host_a" "$host_b"; do
  ! ip netns list | grep -qw "$ns" || die "network namespace $ns already exists (left by another run with pid $$?); delete it with 'ip netns del $ns'"
  ip netns add "$ns"
  made_ns+=("$ns")
  ip -n "$ns" link set lo up
done
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$host_a"
ip link set "$veth_b" netns "$host_b"
ip -n "$host_a" addr add "$addr_a/24" dev "$veth_a"
ip -n "$host_b" addr add "$addr_b/24" dev "$veth_b"
ip -n "$host_a" link set "$veth_a" up
ip -n "$host_b" link set "$veth_b" up
if [[ -s /etc/hosts && -n $(tail -c 1 /etc/hosts) ]]; then echo >>/etc/hosts; fi   # no final newline
printf '%s %s # %s\n' "$addr_a" "$host_a" "$tag" "$addr_b" "$host_b" "$tag" >>/etc/hosts
for pair in "$host_a:$veth_a:$addr_a" "$host_b:$veth_b:$addr_b"; do
  IFS=: read -r ns dev addr <<<"$pair"
  [[ $(getent hosts "$ns") == "$addr "* ]] || die "host name $ns does not resolve to $addr (check /etc/hosts)"
  for _ in 1 2 3 4 5 6 7 8 9 10; do   # the link comes up within a few ms; wait at most 1 s
    [[ $(ip netns exec "$ns" cat "/sys/class/net/$dev/operstate") == up ]] && break
    sleep 0.1
  done
  [[ $(ip netns exec "$ns" cat "/sys/class/net/$dev/operstate") == up ]] || die "veth $dev in $ns is not up"
done
say "hosts $host_a ($addr_a) and $host_b ($addr_b) up"

# Open MPI's rsh agent: AGENT [options] HOST COMMAND... runs COMMAND (one shell
# string, as ssh would) inside namespace HOST with HOST as its host name.
cat >"$tmp/rsh-agent" <<EOF
#!/usr/bin/env bash
set -euo pipefail
while [[ \${1:-} == -* ]]; do shift; done
host=\${1:?rsh-agent: no host given}; shift
case \$host in
  $host_a|$host_b) ;;
  *) echo "rsh-agent: unknown host '\$host' (only $host_a and $host_b exist)" >&2; exit 1 ;;
esac
exec ip netns exec "\$host" unshare --uts bash -c 'hostname "\$1" && eval "\$2"' rsh-agent "\$host" "\$*"
EOF
chmod +x "$tmp/rsh-agent"
printf '%s slots=2\n%s slots=2\n' "$host_a" "$host_b" >"$tmp/hostfile"

# ---- data and config -------------------------------------------------------------
mapfile -t texts < <(find /usr/share/common-licenses -maxdepth 1 -type f | sort)
timeout 60 "$lattice" data prepare --input "${texts[@]}" --tokenizer bytes \
  --out "$tmp/data/licenses" --val-tokens 16384 >"$tmp/prepare.log" 2>&1 \
  || die "data prepare failed: $(tail -n 1 "$tmp/prepare.log")"
compgen -G "$tmp/data/licenses_train_*.bin" >/dev/null \
  || die "data prepare wrote no $tmp/data/licenses_train_*.bin (is '$lattice' a current lattice build?)"
cat >"$tmp/tiny.yaml" <<EOF
model: { arch: gpt2, n_layer: 2, n_head: 4, d_model: 64, vocab_size: 257, max_seq_len: 32, dropout: 0.0 }
train: { steps: $steps, global_batch: 4, micro_batch: 2, seq_len: 32 }
optimizer: { lr: 3.0e-3, schedule: { warmup_steps: 2 } }
data: { train: "$tmp/data/licenses_train_*.bin", tokenizer: bytes }
log: { every: 1 }
checkpoint: { resume: never }
runtime: { seed: 4242, threads: 1, peak_flops: 1.0e+9, comm_timeout_s: 30 }
EOF

# ---- single-rank reference -------------------------------------------------------
OMP_NUM_THREADS=1 timeout 60 "$lattice" train "$tmp/tiny.yaml" "log.dir=$tmp/ref" >"$tmp/ref.log" 2>&1 \
  || die "single-rank reference run failed: $(tail -n 1 "$tmp/ref.log") (log: $tmp/ref.log, KEEP_TMP=1 keeps it)"
[[ $(grep -c '"loss"' "$tmp/ref/metrics.jsonl" 2>/dev/null) == "$steps" ]] \
  || die "the single-rank reference run did not log $steps steps to $tmp/ref/metrics.jsonl (log: $tmp/ref.log)"
say "single-rank reference: $steps steps done"

# ---- jobs over the two hosts ------------------------------------------------------
# launch_job WHAT HOSTFILE LOG OVERRIDE...: launch.sh on host a; dies naming WHAT when the job fails.
launch_job() {
  local what=$1 hostfile=$2 log=$3 rc=0
  shift 3
  # shellcheck disable=SC2016  # $1 and $@ belong to the inner bash
  timeout -k 5 "$job_timeout" ip netns exec "$host_a" unshare --uts bash -c 'hostname "$1" && shift && exec "$@"' smoke "$host_a" \
    env LATTICE_BIN="$lattice" "$repo/scripts/launch.sh" --hostfile "$hostfile" \
    --mpirun-arg=--mca --mpirun-arg=plm_rsh_agent --mpirun-arg="$tmp/rsh-agent" \
    --mpirun-arg=--mca --mpirun-arg=pml --mpirun-arg=ob1 \
    --mpirun-arg=--mca --mpirun-arg=btl --mpirun-arg=tcp,self \
    --mpirun-arg=--mca --mpirun-arg=btl_tcp_if_include --mpirun-arg="$subnet" \
    --mpirun-arg=--mca --mpirun-arg=oob_tcp_if_include --mpirun-arg="$subnet" \
    "$tmp/tiny.yaml" "$@" >"$log" 2>&1 || rc=$?
  (( rc == 0 )) && return 0
  sed 's/^/  | /' "$log" | tail -n 30 >&2
  (( rc == 124 || rc == 137 )) && die "the $what did not finish within $job_timeout s"
  die "the $what failed (exit $rc; output above)"
}

# 4 ranks, tp=2 x pp=2, on 2 + 2 slots.
rx_before=$(ip netns exec "$host_a" cat "/sys/class/net/$veth_a/statistics/rx_bytes")
tx_before=$(ip netns exec "$host_a" cat "/sys/class/net/$veth_a/statistics/tx_bytes")
launch_job "4-rank job" "$tmp/hostfile" "$tmp/mn.log" parallel.tp=2 parallel.pp=2 "log.dir=$tmp/mn"
rx_after=$(ip netns exec "$host_a" cat "/sys/class/net/$veth_a/statistics/rx_bytes")
tx_after=$(ip netns exec "$host_a" cat "/sys/class/net/$veth_a/statistics/tx_bytes")
say "4-rank tp=2 x pp=2 job done; veth of $host_a: $(( tx_after - tx_before )) bytes out, $(( rx_after - rx_before )) in"

# 3 ranks, dp=3, on hosts of unequal slots (1, then 2), against its own 1-rank run (global batch 6).
printf '%s slots=1\n%s slots=2\n' "$host_a" "$host_b" >"$tmp/hostfile-uneven"
OMP_NUM_THREADS=1 timeout 60 "$lattice" train "$tmp/tiny.yaml" train.global_batch=6 "log.dir=$tmp/ref3" \
  >"$tmp/ref3.log" 2>&1 || die "single-rank reference run (global batch 6) failed: $(tail -n 1 "$tmp/ref3.log")"
launch_job "3-rank job on hosts of 1 and 2 slots" "$tmp/hostfile-uneven" "$tmp/mn3.log" \
  parallel.dp=0 train.global_batch=6 "log.dir=$tmp/mn3"
say "3-rank dp=3 job on hosts of 1 and 2 slots done"

# ---- checks --------------------------------------------------------------------
"$python" - "$tmp" "$host_a" "$host_b" "$tolerance" "$steps" "$(( tx_after - tx_before ))" <<'EOF'
import json, sys

tmp, host_a, host_b, tol, steps, tx = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
errors = []


def rank_map(log):
    """The rows of lattice's rank map: "rank  host  tp dp pp  device" header, one row per rank."""
    rows, lines = [], open(log).read().splitlines()
    for i, line in enumerate(lines):
        if line.split()[:6] == ["rank", "host", "tp", "dp", "pp", "device"]:
            for row in lines[i + 1:]:
                f = row.split()
                if len(f) != 6 or not f[0].isdigit():
                    break
                rows.append({"rank": int(f[0]), "host": f[1], "tp": int(f[2]), "dp": int(f[3]), "pp": int(f[4])})
            break
    return rows


def losses(path):
    out = {}
    for line in open(path):
        rec = json.loads(line)
        if "loss" in rec:
            out[rec["step"]] = rec["loss"]
    return out


def compare(what, ref_dir, run_dir):
    """Each step's loss of run_dir against the 1-rank ref_dir; returns the worst relative difference."""
    ref, mn = losses(f"{tmp}/{ref_dir}/metrics.jsonl"), losses(f"{tmp}/{run_dir}/metrics.jsonl")
    want = list(range(1, steps + 1))
    if sorted(ref) != want or sorted(mn) != want:
        errors.append(f"{what}: steps logged: reference {sorted(ref)}, {what} {sorted(mn)}, expected {want}")
    worst = 0.0
    print(f" step  loss (1 rank)   loss ({what})  rel diff")
    for s in sorted(set(ref) & set(mn)):
        rel = abs(mn[s] - ref[s]) / max(abs(ref[s]), 1e-30)
        worst = max(worst, rel)
        print(f" {s:4d}  {ref[s]:.8f}      {mn[s]:.8f}      {rel:.2e}")
        if not rel <= tol:
            errors.append(f"step {s}: loss {mn[s]} on {what} vs {ref[s]} on 1 rank, relative difference {rel:.3e} > {tol:g}")
    return worst


# The 4-rank job: stage 0 on host a, stage 1 on host b, two ranks each.
rows = rank_map(f"{tmp}/mn.log")
if len(rows) != 4:
    sys.exit(f"multinode-smoke: error: expected a 4-row rank map in {tmp}/mn.log, found {len(rows)} rows")
print("rank map:", ", ".join(f"rank {r['rank']} pp{r['pp']} tp{r['tp']} on {r['host']}" for r in rows))
stage_hosts = {s: {r["host"] for r in rows if r["pp"] == s} for s in (0, 1)}
if stage_hosts[0] != {host_a} or stage_hosts[1] != {host_b}:
    errors.append(f"stage 0 should run on {host_a} and stage 1 on {host_b}, got {stage_hosts}")
for h in (host_a, host_b):
    n = sum(r["host"] == h for r in rows)
    if n != 2:
        errors.append(f"{h} runs {n} ranks, expected 2")

# The veth carried at least one copy of every forward activation from stage 0.
act_bytes = steps * 4 * 32 * 64 * 4  # steps * global_batch * seq_len * d_model * sizeof(float)
if tx < act_bytes:
    errors.append(f"only {tx} bytes left {host_a} over the veth; the stage-0 activations alone are {act_bytes}")
worst = compare("4 ranks", "ref", "mn")

# The 3-rank job: slots=1 on host a, slots=2 on host b.
hosts = {r["rank"]: r["host"] for r in rank_map(f"{tmp}/mn3.log")}
want = {0: host_a, 1: host_b, 2: host_b}
if hosts != want:
    errors.append(f"3-rank job: rank map {hosts}, expected {want} (hosts of slots=1 then slots=2)")
worst = max(worst, compare("3 ranks", "ref3", "mn3"))

for e in errors:
    print(f"multinode-smoke: error: {e}", file=sys.stderr)
if errors:
    sys.exit(1)
print(f"losses match within {tol:g} (worst {worst:.2e}); 3 ranks: rank 0 on {host_a}, ranks 1-2 on {host_b}")
EOF
say "PASS in $(( SECONDS - start )) s"
