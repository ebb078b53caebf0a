#!/usr/bin/env bash
# Starts `lattice train CONFIG [key=value ...]` under Open MPI's mpirun with the
# number of ranks and the binding flags the config asks for.
#
#   scripts/launch.sh [options] CONFIG [key=value ...]
#
#   -n RANKS            number of ranks (needed when parallel.dp is 0 = auto and
#                       no hostfile/host list gives the slot count)
#   --hostfile FILE     Open MPI hostfile ("host slots=N" lines), multi-node
#   --host LIST         Open MPI host list ("h1:2,h2:2"), multi-node
#   --mpirun-arg ARG    extra mpirun argument, repeatable (--mpirun-arg=ARG too)
#   --dry-run           print the mpirun command line and exit
#   -h, --help          this text
#
# Ranks: tp * pp * dp from the effective config (`lattice train CONFIG
# overrides --print-config`). With parallel.dp = 0 (auto) the ranks come from
# -n, else from the hostfile/host slot count, else dp = 1 (ranks = tp * pp).
# Threads: T = runtime.threads; when it is 0 (the OpenMP default) the launcher
# picks cores-per-node / ranks-per-node (at least 1) and passes
# runtime.threads=T. Each node gets K = ceil(ranks / nodes) ranks, mapped with
# `--map-by ppr:K:node:pe=T --bind-to core`; when the hosts' slot counts differ
# (`--host a:2,b:1`), ranks fill the slots in host order instead
# (`--map-by slot:pe=T`, K = the largest slot count), as ppr:K would place K
# ranks on a host with fewer slots. When K * T exceeds this machine's
# cores (nodes are assumed to be alike) binding is off (`--bind-to none`), and
# on a single node `--oversubscribe` is added as well. OMP_NUM_THREADS=T and
# every NCCL_*, OMP_* and LATTICE_* variable set here is exported to the ranks
# (-x). As root, OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1 is set for mpirun.
#
# Environment: LATTICE_BIN (default: build/bin/lattice in this repository),
# MPIRUN (default: mpirun).
#
# Examples:
#   scripts/launch.sh --dry-run configs/gpt2-tiny.yaml parallel.tp=2
#   scripts/launch.sh -n 4 configs/gpt2-tiny.yaml parallel.tp=2 runtime.threads=1
#   scripts/launch.sh --hostfile hosts.txt configs/gpt2-tiny.yaml parallel.pp=2
set -euo pipefail

prog=scripts/launch.sh
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "$prog: error: $*" >&2; exit 2; }
note() { echo "$prog: $*" >&2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
is_uint() { [[ $1 =~ ^(0|[1-9][0-9]*)$ ]]; }
is_pos() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

# ---- arguments ---------------------------------------------------------------
ranks="" hostfile="" hostlist="" dry_run=0 config=""
extra=() overrides=()
while (( $# > 0 )); do
  case $1 in
    -h|--help) usage; exit 0 ;;
    -n|-np|--np)
      (( $# >= 2 )) || die "$1 needs a value (the number of ranks, e.g. -n 4)"
      is_pos "$2" || die "$1 '$2' is not a positive integer (the number of ranks, e.g. -n 4)"
      ranks=$2; shift 2 ;;
    -n=*|--np=*) ranks=${1#*=}; shift ;;
    --hostfile)
      (( $# >= 2 )) || die "--hostfile needs a file (lines 'host slots=N')"
      hostfile=$2; shift 2 ;;
    --hostfile=*) hostfile=${1#*=}; shift ;;
    --host|-H)
      (( $# >= 2 )) || die "$1 needs a host list (e.g. --host h1:2,h2:2)"
      hostlist=$2; shift 2 ;;
    --host=*) hostlist=${1#*=}; shift ;;
    --mpirun-arg)
      (( $# >= 2 )) || die "--mpirun-arg needs a value (e.g. --mpirun-arg --report-bindings)"
      extra+=("$2"); shift 2 ;;
    --mpirun-arg=*) extra+=("${1#*=}"); shift ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -*) die "unknown option '$1' (see $prog --help)" ;;
    *)
      if [[ -z $config ]]; then config=$1
      elif [[ $1 == *=* ]]; then overrides+=("$1")
      else die "unexpected argument '$1': overrides are key=value after CONFIG (see $prog --help)"
      fi
      shift ;;
  esac
done
for a in "$@"; do   # everything after --
  if [[ -z $config ]]; then config=$a
  elif [[ $a == *=* ]]; then overrides+=("$a")
  else die "unexpected argument '$a': overrides are key=value after CONFIG"
  fi
done

[[ -n $config ]] || die "no CONFIG given (usage: $prog [options] CONFIG [key=value ...])"
[[ -f $config ]] || die "config file '$config' not found (give a YAML file such as configs/gpt2-tiny.yaml)"
if [[ -n $ranks ]]; then
  is_pos "$ranks" || die "-n '$ranks' is not a positive integer"
fi
[[ -z $hostfile || -z $hostlist ]] || die "give --hostfile or --host, not both"
if [[ -n $hostfile ]]; then
  [[ -f $hostfile && -r $hostfile ]] || die "hostfile '$hostfile' not found or not readable"
fi

lattice=${LATTICE_BIN:-$repo/build/bin/lattice}
[[ -x $lattice ]] || die "lattice binary '$lattice' not found or not executable (build with scripts/build.sh or set LATTICE_BIN)"
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || die "'$mpirun' not found (install openmpi-bin: scripts/install-deps.sh, or set MPIRUN)"

# ---- effective config ----------------------------------------------------------
if ! effective=$("$lattice" train "$config" "${overrides[@]}" --print-config 2>&1); then
  die "$(grep -m1 . <<<"$effective" || echo "lattice --print-config failed for '$config'")"
fi
# cfg SECTION KEY: the value of a top-level section's key in the effective YAML.
cfg() {
  awk -v sec="$1" -v key="$2" '
    /^[^ #]/ { insec = ($0 == sec ":") ; next }
    insec && $1 == key ":" { sub(/^[^:]*:[ ]*/, ""); print; exit }' <<<"$effective"
}
grep -q '^parallel:' <<<"$effective" \
  || die "'$lattice train $config --print-config' printed no effective config (it said: '$(grep -m1 . <<<"$effective")'); is it a current lattice build? (set LATTICE_BIN)"
tp=$(cfg parallel tp) pp=$(cfg parallel pp) dp=$(cfg parallel dp) threads=$(cfg runtime threads)
for kv in "parallel.tp=$tp" "parallel.pp=$pp" "parallel.dp=$dp" "runtime.threads=$threads"; do
  is_uint "${kv#*=}" || die "could not read ${kv%%=*} from '$lattice train $config --print-config' (got '${kv#*=}')"
done
(( tp >= 1 && pp >= 1 )) || die "parallel.tp ($tp) and parallel.pp ($pp) must be at least 1"
tpp=$(( tp * pp ))

# ---- hosts and slots -------------------------------------------------------------
hosts=() slots=()   # one entry per distinct host, in order; slot -1 = not given
add_host() {  # NAME SLOTS
  local i
  for i in "${!hosts[@]}"; do
    if [[ ${hosts[$i]} == "$1" ]]; then
      if (( slots[i] < 0 || $2 < 0 )); then slots[i]=-1; else slots[i]=$(( slots[i] + $2 )); fi
      return
    fi
  done
  hosts+=("$1"); slots+=("$2")
}
if [[ -n $hostfile ]]; then
  lineno=0
  while IFS= read -r line || [[ -n $line ]]; do
    lineno=$(( lineno + 1 ))
    line=${line%%#*}
    read -r -a words <<<"$line" || true
    (( ${#words[@]} > 0 )) || continue
    s=-1
    for w in "${words[@]:1}"; do
      case $w in
        slots=*) s=${w#slots=}
          is_pos "$s" || die "hostfile '$hostfile' line $lineno: '$w' is not a positive slot count" ;;
        max_slots=*|max-slots=*) ;;
        *) die "hostfile '$hostfile' line $lineno: unknown field '$w' (expected 'host slots=N')" ;;
      esac
    done
    add_host "${words[0]}" "$s"
  done <"$hostfile"
  (( ${#hosts[@]} > 0 )) || die "hostfile '$hostfile' names no host"
elif [[ -n $hostlist ]]; then
  IFS=, read -r -a entries <<<"$hostlist"
  for e in "${entries[@]}"; do
    [[ -n $e ]] || die "--host '$hostlist' has an empty entry"
    if [[ $e == *:* ]]; then
      s=${e##*:}
      is_pos "$s" || die "--host entry '$e': the slot count after ':' must be a positive integer"
      add_host "${e%:*}" "$s"
    else
      add_host "$e" 1   # Open MPI: a host without :N has one slot
    fi
  done
fi
nodes=${#hosts[@]}
total_slots=-1
if (( nodes > 0 )); then
  total_slots=0
  for s in "${slots[@]}"; do
    if (( s < 0 )); then total_slots=-1; break; fi
    total_slots=$(( total_slots + s ))
  done
fi
(( nodes > 0 )) || nodes=1

# ---- number of ranks -----------------------------------------------------------
if (( dp > 0 )); then
  want=$(( tpp * dp ))
  if [[ -n $ranks ]] && (( ranks != want )); then
    die "-n $ranks does not match the config: parallel.tp ($tp) * pp ($pp) * dp ($dp) = $want (drop -n or set parallel.dp=0)"
  fi
  ranks=$want
elif [[ -n $ranks ]]; then
  (( ranks % tpp == 0 )) || die "-n $ranks is not a multiple of parallel.tp ($tp) * pp ($pp) = $tpp"
elif (( total_slots > 0 )); then
  (( total_slots % tpp == 0 )) || die "the $total_slots slots of ${hostfile:-"--host $hostlist"} are not a multiple of parallel.tp ($tp) * pp ($pp) = $tpp (give -n RANKS)"
  ranks=$total_slots
elif [[ -n $hostfile ]]; then
  die "hostfile '$hostfile' has a host without slots=N, so the rank count is unknown (add slots=N or give -n RANKS)"
else
  ranks=$tpp
  note "parallel.dp is auto and neither -n nor a host list is given: dp = 1, $ranks rank(s)"
fi
oversub_asked=0
for a in "${extra[@]}"; do [[ ${a,,} != *oversubscribe* ]] || oversub_asked=1; done
if (( total_slots > 0 && ranks > total_slots && ! oversub_asked )); then
  die "$ranks ranks need more than the $total_slots slots of ${hostfile:-"--host $hostlist"} (raise slots, use fewer ranks or add --mpirun-arg --oversubscribe)"
fi

# ---- threads and binding -------------------------------------------------------
cores=$(nproc)
per_node=$(( (ranks + nodes - 1) / nodes ))
policy="ppr:$per_node:node"   # K ranks on each node
if (( total_slots > 0 )); then
  largest=0 uneven=0
  for s in "${slots[@]}"; do
    (( s == slots[0] )) || uneven=1
    (( s <= largest )) || largest=$s
  done
  if (( uneven )); then   # fill each host's slots in order: ppr:K would put K ranks on a smaller host
    per_node=$(( ranks < largest ? ranks : largest ))
    policy="slot"
  fi
fi
if (( threads == 0 )); then
  threads=$(( cores / per_node ))
  (( threads >= 1 )) || threads=1
  overrides+=("runtime.threads=$threads")
fi
map=()
if (( per_node * threads <= cores )); then
  map=(--map-by "$policy:pe=$threads" --bind-to core)
elif (( nodes == 1 && ${#hosts[@]} == 0 )); then
  map=(--oversubscribe --bind-to none)
  note "$ranks rank(s) x $threads thread(s) exceed the $cores cores: oversubscribed, binding off"
else
  map=(--map-by "$policy" --bind-to none)
  note "$per_node rank(s) per node x $threads thread(s) exceed the $cores cores of this machine: binding off"
fi

# ---- command -----------------------------------------------------------------
envs=()
if (( EUID == 0 )); then envs=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1); fi
envs+=("OMP_NUM_THREADS=$threads")
xs=(-x OMP_NUM_THREADS)
while IFS= read -r name; do
  [[ $name == OMP_NUM_THREADS ]] || xs+=(-x "$name")
done < <(compgen -e | grep -E '^(NCCL|OMP|LATTICE)_' | sort)

cmd=("$mpirun" -np "$ranks")
if [[ -n $hostfile ]]; then cmd+=(--hostfile "$hostfile"); fi
if [[ -n $hostlist ]]; then cmd+=(--host "$hostlist"); fi
cmd+=("${map[@]}" "${xs[@]}" "${extra[@]}" "$lattice" train "$config" "${overrides[@]}")

if (( dry_run )); then
  line=""
  for w in "${envs[@]}" "${cmd[@]}"; do
    if [[ ! $w =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then w=$(printf '%q' "$w"); fi
    line+="${line:+ }$w"
  done
  echo "$line"
  exit 0
fi
note "$ranks rank(s) on $nodes node(s): tp=$tp pp=$pp dp=$(( ranks / tpp )), $threads thread(s) per rank"
exec env "${envs[@]}" "${cmd[@]}"
