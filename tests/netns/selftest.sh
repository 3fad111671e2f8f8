#!/usr/bin/env bash
# tests/netns/selftest.sh: proves the two-host harness, and measures what Open MPI does when
# a rank or a host fails (the facts the MPI bridge's watchdog is designed around).
# Exit code 0 iff every check passed. Must run as root; needs mpicc and mpirun
# (libopenmpi-dev, openmpi-bin) and iproute2: scripts/install-deps.sh installs them.
#
#   1. setup.sh: up twice (the second a no-op), a host deleted behind its back is rebuilt,
#      down twice, nothing left behind.
#   2. mpi_probe check under run_mpi.sh: the two ranks run in two namespaces that are not the
#      root's, on ctn-a and ctn-b with 10.77.0.1 and 10.77.0.2; MPI_Allreduce sums are exact
#      (closed form; sizes 0, 1, 7, 1000, 65537, 2^20+3; int and float; in place and not);
#      a 16 MiB allreduce moves >= 8 MiB each way through ctn0's byte counters.
#      Negative control: both ranks on ctn-a must fail the namespace and traffic checks.
#   3. run_mpi.sh's contract: -x forwards a variable to the remote host and an unforwarded one
#      does not arrive there; a rank's exit code comes back; --timeout gives 124; nothing is
#      left running in the namespaces.
#   4. MPI_Allreduce bandwidth over the veth pair at 1, 16 and 64 MiB (reported, not judged).
#   5. faults, each timed from the fault to run_mpi.sh's exit: SIGKILL of the remote rank, of
#      the local rank, of the remote daemon (orted); a rank's exit(1) and MPI_Abort; a stopped
#      rank (SIGSTOP) goes unnoticed for the hang window, and MPI_Abort from a second thread of
#      rank 0 (the bridge's watchdog in miniature) then ends the job; a partitioned host (ctn0
#      down on ctn-b) with default settings goes unnoticed, mpirun ignores SIGTERM, and the
#      watchdog's MPI_Abort does not end the job either; with OOB keepalives shorter than the
#      watchdog, mpirun ends the job by itself.
#
# Usage: tests/netns/selftest.sh [--no-bandwidth] [--hang-window S (10)] [--keep-build]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

bandwidth=1 hang_window=10 keep_build=0
while (($#)); do
  case $1 in
    --no-bandwidth) bandwidth=0; shift ;;
    --hang-window) hang_window=${2:?--hang-window needs seconds}; shift 2 ;;
    --keep-build) keep_build=1; shift ;;
    *) sed -n '21p' "$0" >&2; exit 2 ;;
  esac
done

failures=0
failed=()
results=()
check() {  # check NAME GOT WANT
  if [[ $2 == "$3" ]]; then
    echo "  PASS $1"
  else
    echo "  FAIL $1"
    failed+=("$1")
    echo "       got:  ${2//$'\n'/$'\n'             }"
    echo "       want: ${3//$'\n'/$'\n'             }"
    failures=$((failures + 1))
  fi
}
result() { results+=("$*"); echo "  RESULT $*"; }
now() { date +%s.%N; }
section() { printf '%s  [%d s]\n' "$1" "$SECONDS"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }   # le A B: A <= B

[[ $(id -u) == 0 ]] || { echo "selftest: must run as root" >&2; exit 2; }
for tool in mpicc mpirun ip; do
  command -v "$tool" > /dev/null || {
    echo "selftest: $tool not found; run scripts/install-deps.sh" >&2
    exit 2
  }
done

build=$(mktemp -d /tmp/ctn-selftest.XXXXXX)
bg_pid=''
# shellcheck disable=SC2317  # invoked by the EXIT trap
on_exit() {
  if [[ -n $bg_pid ]]; then kill -TERM "$bg_pid" 2>/dev/null || true; wait "$bg_pid" 2>/dev/null || true; fi
  ip -n "${CTN_HOSTS[1]}" link set "$CTN_IFACE" up 2>/dev/null || true
  "$here/setup.sh" down > /dev/null 2>&1 || true
  if ((keep_build)); then echo "selftest: build and logs kept in $build"; else rm -rf "$build"; fi
}
trap on_exit EXIT
trap 'echo "selftest: unexpected failure at line $LINENO: $BASH_COMMAND" >&2' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# One harness user at a time; run_mpi.sh below is told that this script holds the lock.
exec 8> "$CTN_RUN_LOCK"
flock -w "${CTN_LOCK_WAIT:-900}" 8 || { echo "selftest: $CTN_RUN_LOCK is busy" >&2; exit 2; }
export CTN_LOCK_HELD=1
run_mpi() { "$here/run_mpi.sh" --quiet "$@"; }

mpicc -O2 -Wall -Wextra -Werror -o "$build/mpi_probe" "$here/mpi_probe.c"
probe=$build/mpi_probe

ns_inode() { ip netns exec "$1" readlink /proc/self/ns/net 2> /dev/null || echo none; }
leftovers() {  # processes still in either namespace, as "ctn-a:N ctn-b:M"
  local ns counts=()
  for ns in "${CTN_HOSTS[@]}"; do counts+=("$ns:$(ip netns pids "$ns" 2> /dev/null | wc -l)"); done
  echo "${counts[*]}"
}
no_leftovers="${CTN_HOSTS[0]}:0 ${CTN_HOSTS[1]}:0"

section "1. setup.sh up/down"
"$here/setup.sh" down 2> /dev/null
"$here/setup.sh" up 2> /dev/null
inode_a=$(ns_inode "${CTN_HOSTS[0]}")
msg=$("$here/setup.sh" up 2>&1)
check "a second up is a no-op" "$msg|$(ns_inode "${CTN_HOSTS[0]}")" "netns: already up|$inode_a"
ip netns del "${CTN_HOSTS[1]}"   # a crash that took one host with it
rc=0; "$here/setup.sh" status > /dev/null 2>&1 || rc=$?
check "status sees the missing host" "$rc" "1"
"$here/setup.sh" up 2> /dev/null
rc=0; "$here/setup.sh" status > /dev/null 2>&1 || rc=$?
check "up rebuilds a half-broken set" "$rc" "0"
"$here/setup.sh" down 2> /dev/null
rc=0; "$here/setup.sh" down 2> /dev/null || rc=$?
left=$(ip netns list | grep -c "^$CTN_PREFIX-[ab]\b" || true)
check "down twice: rc 0, no namespace, no /etc/netns entry" \
  "$rc $left $(find /etc/netns -maxdepth 1 -name "$CTN_PREFIX-*" 2> /dev/null | wc -l)" "0 0 0"
"$here/setup.sh" up 2> /dev/null

section "2. where the ranks run, and what crosses the veth"
out=$(run_mpi --timeout 120 -- "$probe" check 2>&1) && rc=0 || rc=$?
echo "$out" | grep -E 'host=|ctn0:|FAIL|FAILED|OK:' | sed 's/^/     /'
check "mpi_probe check: every check passed on every rank" "$rc $(echo "$out" | grep -c 'OK: 0 failed')" "0 1"
root_inode=$(readlink /proc/self/ns/net)
placement=$(echo "$out" | sed -n 's/^probe: rank \([0-9]\) host=\([^ ]*\) netns=\([^ ]*\) ctn0=\([^ ]*\).*/\1 \2 \3 \4/p' | sort)
check "rank 0 on ctn-a in ctn-a's namespace, rank 1 on ctn-b in ctn-b's" \
  "$placement" \
  "0 ${CTN_HOSTS[0]} $(ns_inode "${CTN_HOSTS[0]}") $(ctn_ip 0)
1 ${CTN_HOSTS[1]} $(ns_inode "${CTN_HOSTS[1]}") $(ctn_ip 1)"
check "neither rank in the root namespace ($root_inode)" \
  "$(echo "$placement" | grep -c "$root_inode" || true)" "0"
# Negative control: two ranks on one host share a namespace and talk over the loopback.
ctn_host_exec 0
out=$(timeout -k 5 120 "${CTN_EXEC[@]}" mpirun --allow-run-as-root --host "${CTN_HOSTS[0]}:2" -n 2 \
  --bind-to none --mca btl self,tcp --mca btl_tcp_if_include "$CTN_IFACE" \
  --mca oob_tcp_if_include "$CTN_IFACE" "$probe" check 2>&1) && rc=0 || rc=$?
check "negative control (both ranks on ctn-a) fails the namespace and traffic checks" \
  "$((rc != 0)) $(echo "$out" | grep -c 'FAIL every rank runs in its own network namespace') $(echo "$out" | grep -c 'FAIL the 16 MiB allreduce crossed')" \
  "1 2 2"

section "3. run_mpi.sh: environment, exit code, timeout"
# shellcheck disable=SC2016  # expanded by the ranks' shell
out=$(CTN_T_FWD=yes CTN_T_LOCAL=yes run_mpi -x CTN_T_FWD -x CTN_T_SET=v1 -- \
  sh -c 'echo "rank=$OMPI_COMM_WORLD_RANK fwd=${CTN_T_FWD:-} set=${CTN_T_SET:-} local=${CTN_T_LOCAL:-}"' 2>&1 | sort)
check "-x reaches both hosts; an unforwarded variable only mpirun's own host" "$out" \
  "rank=0 fwd=yes set=v1 local=yes
rank=1 fwd=yes set=v1 local="
rc=0
# shellcheck disable=SC2016
run_mpi -- sh -c 'exit $((OMPI_COMM_WORLD_RANK * 7))' > /dev/null 2>&1 || rc=$?
check "a rank's exit code comes back (rank 1 exits 7)" "$rc" "7"
t0=$(now); rc=0; run_mpi --timeout 2 -- sleep 60 > /dev/null 2>&1 || rc=$?; t1=$(now)
check "--timeout 2: exit code 124 within 15 s" "$rc $(le "$(elapsed "$t0" "$t1")" 15 && echo in-time)" "124 in-time"
check "nothing left running in the namespaces" "$(leftovers)" "$no_leftovers"

if ((bandwidth)); then
  section "4. MPI_Allreduce over the veth pair (2 ranks, one per host, float sum)"
  out=$(run_mpi --timeout 300 -- "$probe" bandwidth 1 16 64 2>&1) && rc=0 || rc=$?
  echo "$out" | grep 'allreduce' | sed 's/^probe: rank 0 /     /'
  check "bandwidth run: sums right, exit 0" "$rc" "0"
  while read -r line; do result "bandwidth ${line#probe: rank 0 allreduce }"; done \
    < <(echo "$out" | grep 'allreduce .* MiB')
  result "load average during the bandwidth run: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

section "5. faults: what mpirun does, and how fast"
jobs_started=0
# start_job [run_mpi.sh options] -- [mpi_probe loop arguments]: the loop job in the background;
# returns when both ranks are in their allreduce loop and sets pid0, pid1.
start_job() {
  local opts=() i
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  # A new file per job, created before the job starts: the background job's own redirection
  # happens after the fork, and the poll below must not read the previous job's lines.
  jobs_started=$((jobs_started + 1))
  log=$build/fault-$jobs_started.log
  : > "$log"
  run_mpi --timeout 120 "${opts[@]}" -- "$probe" loop "$@" >> "$log" 2>&1 &
  bg_pid=$!
  for ((i = 0; i < 300; i++)); do
    [[ $(grep -c 'ready rank=' "$log") == 2 ]] && break
    sleep 0.1
  done
  pid0=$(sed -n 's/.*ready rank=0 pid=\([0-9]*\).*/\1/p' "$log")
  pid1=$(sed -n 's/.*ready rank=1 pid=\([0-9]*\).*/\1/p' "$log")
  [[ -n $pid0 && -n $pid1 ]] || { echo "  FAIL the loop job did not start:"; sed 's/^/       /' "$log"; exit 1; }
}
# finish_job LIMIT_S: waits up to LIMIT_S for the job; sets job_rc (or "running") and t_end.
finish_job() {
  local deadline
  deadline=$(awk -v n="$(now)" -v l="$1" 'BEGIN { printf "%.3f", n + l }')
  job_rc=running
  while le "$(now)" "$deadline"; do
    if ! kill -0 "$bg_pid" 2> /dev/null; then
      t_end=$(now)
      job_rc=0
      wait "$bg_pid" || job_rc=$?
      bg_pid=''
      return 0
    fi
    sleep 0.02
  done
}
pid_of() {  # pid_of NAMESPACE COMM: the first process called COMM in NAMESPACE
  local p
  for p in $(ip netns pids "$1"); do
    if [[ $(ps -o comm= -p "$p" || true) == "$2" ]]; then echo "$p"; return 0; fi
  done
  echo "selftest: no $2 in $1" >&2
  return 1
}

# fault NAME ACTION: kill-type faults timed from the signal to the job's end.
for fault in remote-rank local-rank remote-orted; do
  start_job --
  case $fault in
    remote-rank) victim=$pid1 ;;
    local-rank) victim=$pid0 ;;
    remote-orted) victim=$(pid_of "${CTN_HOSTS[1]}" orted) ;;
  esac
  t0=$(now); kill -KILL "$victim"; finish_job 30
  check "SIGKILL $fault: the job ends by itself within 30 s, non-zero" \
    "$([[ $job_rc != running && $job_rc != 0 ]] && echo ended)" "ended"
  [[ $job_rc == running ]] || result "SIGKILL $fault: job ended $(elapsed "$t0" "$t_end") s later, exit code $job_rc; $(grep -m1 -oE 'mpirun noticed[^.]*|ORTE has lost communication with a remote daemon' "$log" || true)"
  check "SIGKILL $fault: nothing left running" "$(leftovers)" "$no_leftovers"
done
# With the daemons' kill grace (odls_base_sigkill_timeout, 1 s by default) set to 0.
start_job --mca odls_base_sigkill_timeout 0 --
t0=$(now); kill -KILL "$pid1"; finish_job 30
check "SIGKILL remote-rank, odls_base_sigkill_timeout=0: job ends, non-zero" \
  "$([[ $job_rc != running && $job_rc != 0 ]] && echo ended)" "ended"
[[ $job_rc == running ]] || result "SIGKILL remote-rank with odls_base_sigkill_timeout=0: job ended $(elapsed "$t0" "$t_end") s later, exit code $job_rc"

for how in exit abort; do
  start_job -- 1 "$how" 1
  finish_job 30
  t0=$(sed -n 's/.*leaving by .* at \([0-9.]*\)$/\1/p' "$log")
  check "rank 1 leaves by $how: the job ends within 30 s with exit code 1" \
    "$job_rc $([[ -n $t0 ]] && echo stamped)" "1 stamped"
  [[ $job_rc == running || -z $t0 ]] || result "rank 1 $how: job ended $(elapsed "$t0" "$t_end") s after the rank left, exit code $job_rc"
  check "rank 1 leaves by $how: nothing left running" "$(leftovers)" "$no_leftovers"
done

# A rank that stops (a deadlock, a stuck page fault, SIGSTOP) leaves every TCP connection open:
# nothing in Open MPI notices. Then: how fast mpirun obeys SIGTERM.
start_job --
kill -STOP "$pid1"; finish_job "$hang_window"
check "SIGSTOP remote rank: job still running after ${hang_window} s" "$job_rc" "running"
mpirun_pid=$(pid_of "${CTN_HOSTS[0]}" mpirun)
t0=$(now); kill -TERM "$mpirun_pid"; finish_job 30
check "SIGSTOP remote rank, then SIGTERM to mpirun: job ends within 30 s" \
  "$([[ $job_rc != running ]] && echo ended)" "ended"
[[ $job_rc == running ]] || result "SIGSTOP remote rank: unnoticed for ${hang_window} s; SIGTERM to mpirun ended the job $(elapsed "$t0" "$t_end") s later, exit code $job_rc"
check "SIGSTOP remote rank: nothing left running" "$(leftovers)" "$no_leftovers"

# A watchdog in miniature: rank 0's second thread calls MPI_Abort 3 s after start while its main
# thread is stuck in an allreduce with a stopped peer. That is what the bridge does.
start_job -- 0 abort-thread 3
kill -STOP "$pid1"; finish_job 30
t0=$(sed -n 's/.*leaving by .* at \([0-9.]*\)$/\1/p' "$log")
check "stopped remote rank, MPI_Abort from rank 0's watchdog thread: the job ends, exit code 1" \
  "$job_rc $([[ -n $t0 ]] && echo stamped)" "1 stamped"
[[ $job_rc == running || -z $t0 ]] || result "stopped remote rank, MPI_Abort from a watchdog thread: job ended $(elapsed "$t0" "$t_end") s after the abort, exit code $job_rc"
check "stopped remote rank, watchdog abort: nothing left running" "$(leftovers)" "$no_leftovers"

# A partitioned host: ctn0 down on ctn-b. Its own processes see their sends fail and die;
# ctn-a sees silence. mpirun notices only through its OOB keepalives (default: 300 s idle,
# then 9 probes 20 s apart, ~480 s). Until then the job hangs, and once a rank has left (the
# watchdog's MPI_Abort) or mpirun got SIGTERM, mpirun waits for the lost daemon for good.
start_job --
ip -n "${CTN_HOSTS[1]}" link set "$CTN_IFACE" down; finish_job "$hang_window"
check "partition, default keepalive: job still running after ${hang_window} s" "$job_rc" "running"
mpirun_pid=$(pid_of "${CTN_HOSTS[0]}" mpirun)
t0=$(now); kill -TERM "$mpirun_pid"; finish_job 10
if [[ $job_rc == running ]]; then
  result "partition, default keepalive: unnoticed for ${hang_window} s; mpirun still running 10 s after SIGTERM (it waits for the lost daemon): SIGKILL needed"
  kill -KILL "$mpirun_pid"; finish_job 30
else
  result "partition, default keepalive: unnoticed for ${hang_window} s; SIGTERM to mpirun ended the job $(elapsed "$t0" "$t_end") s later"
fi
ip -n "${CTN_HOSTS[1]}" link set "$CTN_IFACE" up
sleep 0.5
check "partition, SIGTERM: nothing left running after the harness's cleanup" "$(leftovers)" "$no_leftovers"

start_job -- 0 abort-thread 3
ip -n "${CTN_HOSTS[1]}" link set "$CTN_IFACE" down; finish_job "$((hang_window + 3))"
check "partition, default keepalive, watchdog MPI_Abort at 3 s: mpirun still running ${hang_window} s later (documented hazard)" \
  "$job_rc $(grep -c 'MPI_ABORT was invoked' "$log")" "running 1"
[[ $job_rc != running ]] || result "partition, default keepalive: the watchdog's MPI_Abort does not end the job (mpirun still running ${hang_window} s after it)"
if [[ $job_rc == running ]]; then kill -KILL "$(pid_of "${CTN_HOSTS[0]}" mpirun)"; finish_job 30; fi
ip -n "${CTN_HOSTS[1]}" link set "$CTN_IFACE" up
sleep 0.5
check "partition, watchdog abort: nothing left running after the harness's cleanup" "$(leftovers)" "$no_leftovers"

# Keepalive that detects a lost host (5 s + 3 x 2 s) sooner than the watchdog fires (30 s):
# mpirun ends the job by itself.
start_job --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 \
  --mca oob_tcp_keepalive_probes 3 -- 0 abort-thread 30
t0=$(now); ip -n "${CTN_HOSTS[1]}" link set "$CTN_IFACE" down; finish_job 60
check "partition, keepalive 5 s + 3 x 2 s, watchdog at 30 s: mpirun ends the job first, non-zero" \
  "$([[ $job_rc != running && $job_rc != 0 ]] && echo ended) $(grep -c 'ORTE has lost communication' "$log") $(grep -c 'MPI_ABORT was invoked' "$log")" "ended 1 0"
[[ $job_rc == running ]] || result "partition, keepalive 5 s + 3 x 2 s: job ended $(elapsed "$t0" "$t_end") s after ctn0 went down, exit code $job_rc"
ip -n "${CTN_HOSTS[1]}" link set "$CTN_IFACE" up
sleep 0.5
check "partition with keepalive: nothing left running" "$(leftovers)" "$no_leftovers"

echo
echo "results:"
printf '  %s\n' "${results[@]}"
if ((failures)); then
  printf '  FAILED: %s\n' "${failed[@]}"
  echo "selftest: $failures check(s) FAILED"
  exit 1
fi
echo "selftest: all checks passed"
