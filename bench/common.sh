# bench/common.sh: what the bench scripts share. Source it (bash) after setting
# BENCH_NAME (the script's name in messages):
#   bench_parse_args SCRIPT HELP_LINES FLAG DEFAULT "$@"
#       the one option a bench script takes (--out DIR, --dir DIR) and -h/--help,
#       which prints lines HELP_LINES (sed range, e.g. 2,18) of SCRIPT, its header;
#       sets BENCH_ARG (DEFAULT when FLAG is not given)
#   bench_die MESSAGE...         one line on stderr, exit 2 (bad usage or setup)
#   bench_need_exe PATH HINT     bench_die unless PATH is an executable (HINT: how to get one)
#   bench_check_steps STEPS SKIP bench_die unless both are integers and SKIP < STEPS
#   bench_private_copy BIN DIR   copies BIN to DIR/bin/ and prints the copy's path: a rebuild
#                                of BIN while the bench runs cannot mix two binaries' results
#   bench_load1                  the 1-minute load average
#   bench_wait_for_quiet LOAD_MAX MAX_WAIT_S
#       waits (20 s at a time, saying so) until the 1-minute load is at most LOAD_MAX; the
#       MAX_WAIT_S budget is shared by every call of one script (BENCH_WAITED); once it is
#       spent it says so and returns, and the bench runs anyway (its log shows the load)
#   bench_allow_mpirun_as_root   exports Open MPI's two root variables
#   bench_lattice_run_setup REPO STEPS SKIP
#       for a script that runs `lattice train` under mpirun: sets `lattice` ($LATTICE, else
#       REPO/build/bin/lattice; must be executable), `steps` and `skip` ($STEPS and $SKIP,
#       else the defaults STEPS and SKIP; checked), and exports the root variables
#   bench_enter_work_dir DIR TEMPLATE
#       cd into DIR (made if missing), or, DIR empty, into a new /tmp/TEMPLATE.XXXXXX
#       that is removed when the script exits
# shellcheck shell=bash

bench_die() {
  echo "${BENCH_NAME:-bench}: $*" >&2
  exit 2
}

# shellcheck disable=SC2034  # BENCH_ARG is the sourcing script's
bench_parse_args() {
  local script="$1" help="$2" flag="$3"
  BENCH_ARG="$4"
  shift 4
  while [[ $# -gt 0 ]]; do
    case "$1" in
      "$flag")
        [[ $# -ge 2 ]] || bench_die "$flag needs a value (see --help)"
        BENCH_ARG="$2"
        shift 2
        ;;
      -h | --help)
        sed -n "${help}p" "$script"
        exit 0
        ;;
      *) bench_die "unknown argument '$1' (see --help)" ;;
    esac
  done
}

bench_need_exe() {
  [[ -x "$1" ]] || bench_die "no $(basename "$1") at $1 ($2)"
}

bench_check_steps() {
  if ! [[ "$1" =~ ^[0-9]+$ && "$2" =~ ^[0-9]+$ ]] || (($2 >= $1)); then
    bench_die "SKIP ($2) must be an integer below STEPS ($1)"
  fi
}

bench_private_copy() {
  mkdir -p "$2/bin"
  cp "$1" "$2/bin/$(basename "$1")"
  echo "$2/bin/$(basename "$1")"
}

bench_load1() { cut -d' ' -f1 /proc/loadavg; }

BENCH_WAITED=0
bench_wait_for_quiet() {
  local load_max="$1" max_wait="$2" start=$BENCH_WAITED
  while awk -v l="$(bench_load1)" -v m="$load_max" 'BEGIN { exit !(l > m) }'; do
    if ((BENCH_WAITED >= max_wait)); then
      echo "load $(bench_load1) still above $load_max after $((BENCH_WAITED - start))s (wait budget spent): running anyway"
      return
    fi
    echo "load $(bench_load1) > $load_max: waiting ($((BENCH_WAITED - start))s; budget ${max_wait}s," \
      "$((max_wait - BENCH_WAITED))s left)"
    sleep 20
    BENCH_WAITED=$((BENCH_WAITED + 20))
  done
  echo "load $(bench_load1) <= $load_max after waiting $((BENCH_WAITED - start))s"
}

bench_allow_mpirun_as_root() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

# shellcheck disable=SC2034  # lattice, steps and skip are the sourcing script's
bench_lattice_run_setup() {
  lattice="${LATTICE:-$1/build/bin/lattice}"
  steps="${STEPS:-$2}"
  skip="${SKIP:-$3}"
  bench_need_exe "$lattice" "build it: cmake --build build"
  bench_check_steps "$steps" "$skip"
  bench_allow_mpirun_as_root
}

bench_enter_work_dir() {
  local dir="$1"
  if [[ -z "$dir" ]]; then
    dir="$(mktemp -d "/tmp/$2.XXXXXX")"
    # shellcheck disable=SC2064  # the directory is expanded now, on purpose
    trap "rm -rf '$dir'" EXIT
  fi
  mkdir -p "$dir" || bench_die "cannot make the work directory $dir"
  cd "$dir" || bench_die "cannot enter the work directory $dir"
}
