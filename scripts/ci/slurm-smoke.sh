#!/usr/bin/env bash
# Smoke test of scripts/slurm/train.sbatch under a real single-node Slurm on
# this machine (Debian 12, as root; a few minutes at most):
#   1. installs slurmctld slurmd slurm-client munge when missing (apt), starts
#      munged when it is not running, writes a private slurm.conf for this
#      machine under the work dir (SLURM_CONF points every Slurm command and
#      daemon at it; /etc/slurm is not touched) and starts slurmctld + slurmd
#      on loopback, waiting (bounded) for the node to be idle;
#   2. prepares tiny byte-level data from /usr/share/common-licenses;
#   3. submits train.sbatch with sbatch, 2 tasks, tp=2, and checks that
#      metrics.jsonl has every step with a finite loss, that the job completed
#      and that the Slurm log directory logs/slurm-<jobid>/ was written;
#   4. submits the same job again, sends its batch shell SIGUSR1 after the
#      first step (`scancel --batch --signal=USR1`, what `--signal=B:USR1@120`
#      does before the time limit) and checks that it stopped with a
#      checkpoint of the stop step and requeued itself (Restarts=1); the
#      requeued job's two-minute BeginTime is cut short with
#      `scontrol update StartTime=now`; then checks that it resumed from that
#      checkpoint and finished every step once, with the same losses as the
#      uninterrupted job;
#   5. submits a job with an unknown config key and checks that it FAILED
#      and that its .out file gives Lattice's one error line;
#   6. cancels what is left, stops the daemons it started and removes what it
#      created (a trap, also on failure or Ctrl-C).
#
# Usage: scripts/ci/slurm-smoke.sh [WORK_DIR]
#   WORK_DIR     where data, runs, logs and the Slurm state go (default: a new
#                mktemp dir, removed on success, kept on failure); it must be
#                empty or an earlier run's (whose contents are replaced)
#   LATTICE_BIN  the lattice binary (default: build/bin/lattice in the repo)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sbatch_script=$repo/scripts/slurm/train.sbatch
t_start=$SECONDS

say() { echo "[slurm-smoke $((SECONDS - t_start))s] $*"; }
die() {
  echo "slurm-smoke: error: $*" >&2
  exit 1
}
check() { say "ok: $*"; }

(($# <= 1)) || die "too many arguments; usage: scripts/ci/slurm-smoke.sh [WORK_DIR]"
((EUID == 0)) || die "must run as root (installs packages, starts munged/slurmctld/slurmd); rerun with sudo"
bin=${LATTICE_BIN:-$repo/build/bin/lattice}
[[ $bin == /* ]] || bin=$PWD/$bin
[[ -x $bin ]] || die "lattice binary '$bin' is not executable; build it (scripts/build.sh) or set LATTICE_BIN"
[[ -f $sbatch_script ]] || die "$sbatch_script is missing"

made_work=0
if (($# == 1)); then
  mkdir -p "$1"
  work=$(cd "$1" && pwd)
else
  work=$(mktemp -d /tmp/lattice-slurm-smoke.XXXXXX)
  made_work=1
fi
if [[ -f $work/.slurm-smoke ]]; then # an earlier run's work dir: start afresh
  rm -rf "${work:?}"/{slurm,data,logs,runs}
elif [[ -n $(ls -A "$work") ]]; then
  die "work dir $work is not empty and not an earlier slurm-smoke dir; give an empty or new WORK_DIR"
fi
touch "$work/.slurm-smoke"

# ---------------------------------------------------------------- cleanup ---
sdir=$work/slurm
started_munged=0
made_key=0
jobs_submitted=()
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [[ -f $sdir/slurm.conf ]]; then
    export SLURM_CONF=$sdir/slurm.conf
    for j in "${jobs_submitted[@]}"; do timeout 10 scancel "$j" 2>/dev/null; done
    # Let slurmd end the job steps it runs before it goes away (bounded).
    for _ in $(seq 50); do
      [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  for d in slurmd slurmctld; do
    local pidf=$sdir/run/$d.pid pid
    [[ -f $pidf ]] || continue
    pid=$(cat "$pidf")
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"
        say "$d (pid $pid) ignored SIGTERM for 5 s: killed"
      fi
    fi
    rm -f "$pidf"
    say "stopped $d"
  done
  # slurmstepd of a job that was still running when slurmd stopped.
  for pid in $(pgrep -x slurmstepd 2>/dev/null); do
    grep -qa -- "$sdir" "/proc/$pid/environ" 2>/dev/null && kill -9 "$pid"
  done
  if ((started_munged)); then
    local mpid
    mpid=$(cat /run/munge/munged.pid 2>/dev/null)
    [[ -n $mpid ]] && kill "$mpid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
  fi
  ((made_key)) && rm -f /etc/munge/munge.key
  say "cleaned up: jobs cancelled, daemons stopped"
  if ((rc == 0 && made_work)); then
    rm -rf "$work"
  elif ((rc != 0)); then
    echo "slurm-smoke: FAILED (exit $rc) after $((SECONDS - t_start)) s; logs kept in $work" \
      "(slurm/log/, logs/, runs/)" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --------------------------------------------------------------- packages ---
need=()
for c in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge; do
  command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
done
if ((${#need[@]})); then
  say "installing ${need[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -qq || die "apt-get update failed (no network or a broken sources list?)"
  timeout 300 apt-get install -y -qq "${need[@]}" >/dev/null ||
    die "apt-get install ${need[*]} failed; install them by hand and rerun"
fi

# ------------------------------------------------------------------ munge ---
if [[ ! -s /etc/munge/munge.key ]]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  made_key=1
fi
if ! timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; then
  mkdir -p /run/munge
  chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged --force
  started_munged=1
fi
munge_ok=0
for _ in $(seq 50); do
  if timeout 5 munge -n 2>/dev/null | timeout 5 unmunge 2>/dev/null | grep -q 'STATUS: *Success'; then
    munge_ok=1
    break
  fi
  sleep 0.1
done
((munge_ok)) || die "munge does not work (munge -n | unmunge); see /var/log/munge/munged.log"
check "munge credentials (munge -n | unmunge: Success)"

# ------------------------------------------------------------------ slurm ---
node=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
ctl_port=16817
d_port=16818
for p in $ctl_port $d_port; do
  ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null ||
    die "port $p on 127.0.0.1 is in use (another slurmctld/slurmd?); stop it first"
done
mkdir -p "$sdir"/{state,spool,log,run}
rm -rf "${sdir:?}"/state/* "${sdir:?}"/spool/*
cat >"$sdir/slurm.conf" <<EOF
# Written by scripts/ci/slurm-smoke.sh: a one-node sandbox on loopback
# (no systemd, no cgroups, no accounting).
ClusterName=lattice-smoke
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
MpiDefault=none
ReturnToService=2
StateSaveLocation=$sdir/state
SlurmdSpoolDir=$sdir/spool
SlurmctldPidFile=$sdir/run/slurmctld.pid
SlurmdPidFile=$sdir/run/slurmd.pid
SlurmctldLogFile=$sdir/log/slurmctld.log
SlurmdLogFile=$sdir/log/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=10
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=smoke Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$sdir/slurm.conf
srun --mpi=list 2>&1 | grep -qw pmix ||
  die "srun has no pmix plugin (srun --mpi=list); install slurm-wlm-basic-plugins / libpmix2"
check "Slurm $(sinfo -V | awk '{print $2}') with the pmix MPI plugin"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
state=""
for _ in $(seq 150); do
  state=$(timeout 5 sinfo -h -n "$node" -o %t 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.2
done
[[ $state == idle ]] || die "node $node not idle after 30 s (state '${state}'); see $sdir/log/slurmctld.log and slurmd.log"
check "slurmctld + slurmd up, node $node idle ($cpus CPUs) [$SLURM_CONF]"

# ------------------------------------------------------------------- data ---
mkdir -p "$work/data" "$work/logs" "$work/runs"
mapfile -t texts < <(find /usr/share/common-licenses -maxdepth 1 -type f | sort)
"$bin" data prepare --input "${texts[@]}" --tokenizer bytes --out "$work/data/licenses" \
  --val-tokens 16384 >/dev/null
check "data prepared in $work/data"

steps=40
train_args=(
  "$repo/configs/default.yaml"
  "data.train=$work/data/licenses_train_*.bin" "data.val=$work/data/licenses_val_*.bin"
  model.n_layer=2 model.d_model=64 model.max_seq_len=64 train.seq_len=64
  "train.steps=$steps" train.global_batch=8 train.micro_batch=4 train.eval_every=0
  optimizer.schedule.warmup_steps=2 log.every=1 parallel.tp=2
)

job_field() { # job_field JOBID FIELD: one field of `scontrol show job`
  timeout 10 scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
overcommit=()
((cpus >= 2)) || overcommit=(--overcommit) # 2 tasks on 1 CPU
submit() { # submit NAME [OVERRIDE...]: prints the job id
  local name=$1
  shift
  (cd "$work" && LATTICE_BIN=$bin sbatch --parsable --job-name="smoke-$name" --ntasks=2 --ntasks-per-node=2 \
    --cpus-per-task=1 "${overcommit[@]}" "$sbatch_script" "${train_args[@]}" "log.dir=$work/runs/$name" "$@")
}
wait_done() { # wait_done JOBID SECONDS: until the job is COMPLETED (fails on any other end state)
  local j=$1 limit=$2 st=""
  for _ in $(seq $((limit * 5))); do
    st=$(job_field "$j" JobState)
    case $st in
      COMPLETED) return 0 ;;
      FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        die "job $j ended $st; see $work/logs/slurm-$j.out and $work/logs/slurm-$j/" ;;
    esac
    sleep 0.2
  done
  die "job $j not finished after $limit s (state '$st'); see $work/logs/slurm-$j.out"
}
check_metrics() { # check_metrics RUN_DIR: every step 1..steps exactly once, finite losses
  local m=$1/metrics.jsonl
  [[ -s $m ]] || die "$m is missing or empty"
  local got want
  got=$(sed -n 's/.*"step": *\([0-9]*\),.*/\1/p' "$m" | tr '\n' ' ')
  want=$(seq -s ' ' 1 "$steps")' '
  [[ $got == "$want" ]] || die "$m: steps '$got', expected each of 1..$steps once"
  local bad
  bad=$(sed -n 's/.*"loss": *\([^,}]*\).*/\1/p' "$m" |
    grep -Evc '^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$' || true)
  ((bad == 0)) || die "$m: $bad loss value(s) not finite"
  (($(grep -c '"loss"' "$m") == steps)) || die "$m: expected $steps lines with a loss"
}

# ------------------------------------------------------ 1: a plain run ---
job1=$(submit plain)
jobs_submitted+=("$job1")
say "submitted job $job1 (2 tasks, tp=2, $steps steps)"
wait_done "$job1" 120
check "job $job1 COMPLETED"
check_metrics "$work/runs/plain"
check "runs/plain/metrics.jsonl: steps 1..$steps once each, finite losses"
[[ -d $work/logs/slurm-$job1 ]] || die "Slurm log directory $work/logs/slurm-$job1 was not created"
[[ -s $work/logs/slurm-$job1.out ]] || die "$work/logs/slurm-$job1.out is missing"
grep -q "^done: step $steps," "$work/logs/slurm-$job1/rank-0.log" ||
  die "$work/logs/slurm-$job1/rank-0.log has no 'done: step $steps' line"
grep -q 'lattice train .* 2 rank(s) x 1 thread(s)' "$work/logs/slurm-$job1/rank-0.log" ||
  die "$work/logs/slurm-$job1/rank-0.log: the job did not run 2 ranks x 1 thread"
check "logs/slurm-$job1.out and logs/slurm-$job1/rank-{0,1}.log written; 2 ranks x 1 thread, done: step $steps"

# -------------------------------------- 2: SIGUSR1, checkpoint, requeue ---
job2=$(submit requeue)
jobs_submitted+=("$job2")
say "submitted job $job2; waiting for its first step to send SIGUSR1 to its batch shell"
m2=$work/runs/requeue/metrics.jsonl
for _ in $(seq 600); do
  grep -q '"step": 1,' "$m2" 2>/dev/null && break
  st=$(job_field "$job2" JobState)
  [[ $st == PENDING || $st == CONFIGURING || $st == RUNNING ]] ||
    die "job $job2 is $st before its first step; see $work/logs/slurm-$job2.out"
  sleep 0.1
done
grep -q '"step": 1,' "$m2" 2>/dev/null || die "job $job2 did not finish step 1 in 60 s"
timeout 10 scancel --batch --signal=USR1 "$job2"
say "sent SIGUSR1 to the batch shell of job $job2"
# slurmctld gives a requeued job a BeginTime about two minutes ahead (the
# first start's job credential is revoked on the node, and a launch whose
# credential is from the same second is refused as revoked). This sandbox
# runs nothing else: once the node has ended the first start (idle again) and
# a new second has begun, let the job start now instead of in two minutes.
restarts=0
for _ in $(seq 600); do
  restarts=$(job_field "$job2" Restarts)
  [[ ${restarts:-0} -ge 1 && $(job_field "$job2" JobState) == PENDING ]] && break
  [[ $(job_field "$job2" JobState) == COMPLETED ]] && break
  sleep 0.1
done
((${restarts:-0} >= 1)) || die "job $job2 was not requeued within 60 s of SIGUSR1; see $work/logs/slurm-$job2.out"
if [[ $(job_field "$job2" JobState) == PENDING ]]; then
  for _ in $(seq 150); do
    [[ $(timeout 5 sinfo -h -n "$node" -o %t 2>/dev/null) == idle ]] && break
    sleep 0.2
  done
  sleep 2
  say "job $job2 requeued (Reason=$(job_field "$job2" Reason)); letting it start now"
  timeout 10 scontrol update JobId="$job2" StartTime=now ||
    die "scontrol update JobId=$job2 StartTime=now failed"
fi
wait_done "$job2" 120
check "job $job2 requeued (Restarts=$(job_field "$job2" Restarts)) and COMPLETED"
rank0=$work/logs/slurm-$job2/rank-0.log
stop_step=$(sed -n 's/^stopped: step \([0-9]*\),.*/\1/p' "$rank0" | head -n 1)
[[ -n $stop_step ]] || die "$rank0 has no 'stopped: step N' line: SIGUSR1 did not reach the ranks"
((stop_step < steps)) || die "job $job2 stopped at step $stop_step, not before the last step $steps"
[[ -d $work/runs/requeue/checkpoints/step_$(printf %07d "$stop_step") ]] ||
  die "no checkpoint of the stop step: $work/runs/requeue/checkpoints/step_$(printf %07d "$stop_step")"
grep -q "^resuming from .*step_$(printf %07d "$stop_step") (step $stop_step" "$rank0" ||
  die "$rank0: the requeued job did not resume from the step $stop_step checkpoint"
grep -q "^done: step $steps," "$rank0" || die "$rank0 has no 'done: step $steps' line after the resume"
grep -q 'requeueing job' "$work/logs/slurm-$job2.out" || die "$work/logs/slurm-$job2.out has no requeue line"
check "SIGUSR1 -> ranks stopped after step $stop_step with checkpoint step_$(printf %07d "$stop_step"), batch shell requeued"
check "restart resumed from step $stop_step and finished step $steps"
check_metrics "$work/runs/requeue"
check "runs/requeue/metrics.jsonl: steps 1..$steps once each across both starts, finite losses"
loss_of() { sed -n 's/.*"step": *\([0-9]*\),.*"loss": *\([^,}]*\).*/\1 \2/p' "$1/metrics.jsonl"; }
diff <(loss_of "$work/runs/plain") <(loss_of "$work/runs/requeue") >/dev/null ||
  die "losses of the interrupted job differ from the uninterrupted one: diff $work/runs/{plain,requeue}/metrics.jsonl"
check "losses of the stopped + requeued job equal the uninterrupted job's at every step"

# ------------------------------------------- 3: a failing job says why ---
job3=$(submit bad train.stepz=4)
jobs_submitted+=("$job3")
st=""
for _ in $(seq 600); do
  st=$(job_field "$job3" JobState)
  [[ $st == FAILED || $st == COMPLETED || $st == CANCELLED ]] && break
  sleep 0.2
done
[[ $st == FAILED ]] || die "job $job3 (an unknown key) ended '$st', expected FAILED"
grep -q 'job step failed (exit [0-9]*): lattice: error: .*train.stepz' "$work/logs/slurm-$job3.out" ||
  die "$work/logs/slurm-$job3.out does not give lattice's error line: $(cat "$work/logs/slurm-$job3.out")"
check "job $job3 FAILED and its .out gives lattice's error line (train.stepz), not only an MPI abort banner"

say "PASS in $((SECONDS - t_start)) s"
