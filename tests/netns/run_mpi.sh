#!/usr/bin/env bash
# tests/netns/run_mpi.sh: runs COMMAND under mpirun across the two hosts of the harness
# (setup.sh), N ranks per host, over TCP on the veth pair, and exits with its exit code.
# `run_mpi.sh --help` for usage; README.md for how it works and what was measured.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"
readonly EXIT_TIMEOUT=124 EXIT_HARNESS=125 KILL_AFTER_S=10

usage() {
  cat <<'EOF'
Usage: tests/netns/run_mpi.sh [OPTIONS] -- COMMAND [ARGS...]
Runs COMMAND under mpirun on two "hosts" (network namespaces ctn-a and ctn-b joined by a
veth pair, see setup.sh), N ranks per host, rank r on host r / N. mpirun itself runs on
ctn-a; ctn-b's daemon is started through rsh-agent.sh, like ssh on a cluster. Must run as
root. The working directory is the same on both hosts (one file system).

  --ranks-per-host N   ranks on each host (--map-by ppr:N:node)                     [1]
  --timeout S          SIGTERM to mpirun after S seconds, SIGKILL 10 s later       [300]
  --keep               leave the namespaces up afterwards (default: tear down what
                       this run set up; namespaces that were up before stay up)
  -x NAME[=VALUE]      forward an environment variable to every rank (mpirun -x);
                       on ctn-b ranks see only these, OMPI_*, PMIX_* and a login
                       shell's PATH, HOME, USER, LOGNAME, SHELL (repeatable)
  --mca KEY VALUE      one more MCA parameter; a later one overrides (repeatable)
  --mpirun-arg ARG     one more mpirun argument, e.g. --tag-output (repeatable)
  --print              print the mpirun command line (shell-quoted) and exit
  --quiet              do not echo the mpirun command line on stderr
  --help               this text

Exit code: COMMAND's (mpirun returns the first non-zero exit code of a rank, or 128+N
for a rank killed by signal N); 124 on timeout; 125 if the harness failed.

Environment:
  CTN_LOCK_WAIT   seconds to wait for another run_mpi.sh to finish           [900]
  CTN_LOCK_HELD   1 if the caller already holds /run/ctn-netns.run.lock (selftest.sh)
EOF
}

die() { ctn_say "$*"; exit "$EXIT_HARNESS"; }

ranks_per_host=1 timeout_s=300 keep=0 print_only=0 quiet=0
forward=() mca=() extra=() cmd=()
while (($#)); do
  case $1 in
    --ranks-per-host | --timeout | -x | --mpirun-arg)
      (($# >= 2)) || die "$1 needs a value"
      case $1 in
        --ranks-per-host) ranks_per_host=$2 ;;
        --timeout) timeout_s=$2 ;;
        -x) forward+=(-x "$2") ;;
        --mpirun-arg) extra+=("$2") ;;
      esac
      shift 2 ;;
    --mca)
      (($# >= 3)) || die "--mca needs KEY and VALUE"
      mca+=(--mca "$2" "$3")
      shift 3 ;;
    --keep) keep=1; shift ;;
    --print) print_only=1; shift ;;
    --quiet) quiet=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; cmd=("$@"); break ;;
    *) die "unknown option '$1' (COMMAND goes after --; see --help)" ;;
  esac
done
[[ $ranks_per_host =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-host must be a positive integer"
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number of seconds"
((${#cmd[@]})) || die "no COMMAND (run_mpi.sh [OPTIONS] -- COMMAND [ARGS...])"

# The command line this harness stands for (docs/multi-node.md explains each flag):
#   * the rsh agent replaces ssh; --host names ctn-a (mpirun's own hostname there, so that
#     host is local) and ctn-b, N slots each, as a hostfile with `ctn-a slots=N` would;
#   * one interface for both the MPI traffic (btl) and mpirun's control channel (oob): ctn0
#     on both hosts. vader (shared memory) carries traffic between ranks of one host only;
#   * --bind-to none: the engine pins its own threads per socket (placement planner).
# shellcheck disable=SC2054  # the commas are inside MCA values
mpirun_argv=(
  "$(command -v mpirun || echo mpirun)" --allow-run-as-root
  --host "${CTN_HOSTS[0]}:$ranks_per_host,${CTN_HOSTS[1]}:$ranks_per_host" -n $((2 * ranks_per_host)) --map-by "ppr:$ranks_per_host:node"
  --bind-to none
  --mca plm_rsh_agent "$here/rsh-agent.sh"
  --mca btl self,vader,tcp
  --mca btl_tcp_if_include "$CTN_IFACE"
  --mca oob_tcp_if_include "$CTN_IFACE"
  "${mca[@]}" "${forward[@]}" "${extra[@]}" "${cmd[@]}"
)
if ((print_only)); then
  ctn_host_exec 0
  ctn_quote "${CTN_EXEC[@]}" "${mpirun_argv[@]}"
  exit 0
fi

[[ $(id -u) == 0 ]] || die "must run as root (ip netns)"
command -v mpirun > /dev/null || die "mpirun not found: apt-get install openmpi-bin libopenmpi-dev (scripts/install-deps.sh)"

created=0
# Everything in the namespaces after mpirun returns is this run's: stray daemons or ranks of
# a job mpirun could not tear down (see README: a partitioned host) are killed here.
timeout_pid=''
# shellcheck disable=SC2317  # invoked by the EXIT trap
on_exit() {
  local ns pids
  if [[ -n $timeout_pid ]]; then
    kill -KILL "$timeout_pid" 2>/dev/null || true
    wait "$timeout_pid" 2>/dev/null || true
  fi
  for ns in "${CTN_HOSTS[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086  # one pid per word
    if [[ -n $pids ]]; then kill -KILL $pids 2>/dev/null || true; fi
  done
  # SIGKILL is asynchronous: wait (up to 5 s) until they are gone, so that a caller finds the
  # namespaces empty when this script returns.
  for _ in {1..50}; do
    pids=$(for ns in "${CTN_HOSTS[@]}"; do ip netns pids "$ns" 2>/dev/null; done)
    [[ -n $pids ]] || break
    sleep 0.1
  done
  if ((created && !keep)); then "$here/setup.sh" down || true; fi
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ ${CTN_LOCK_HELD:-0} != 1 ]]; then
  exec 8> "$CTN_RUN_LOCK"
  flock -w "${CTN_LOCK_WAIT:-900}" 8 || die "another run_mpi.sh still holds $CTN_RUN_LOCK"
fi
if ! "$here/setup.sh" status > /dev/null 2>&1; then
  "$here/setup.sh" up || die "setup.sh up failed"
  created=1
fi

ctn_host_exec 0
((quiet)) || ctn_say "on ${CTN_HOSTS[0]}: $(ctn_quote "${mpirun_argv[@]}")"
start=$SECONDS
# In the background and waited for, so that a SIGTERM or SIGINT to this script runs its trap
# at once (bash defers traps while a foreground child runs).
timeout -k "$KILL_AFTER_S" "$timeout_s" "${CTN_EXEC[@]}" "${mpirun_argv[@]}" < /dev/null &
timeout_pid=$!
rc=0
wait "$timeout_pid" || rc=$?
timeout_pid=''
if ((rc == 124 || rc == 137)) && ((SECONDS - start >= timeout_s)); then
  ctn_say "timed out after $timeout_s s"
  rc=$EXIT_TIMEOUT
fi
exit "$rc"
