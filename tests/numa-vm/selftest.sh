#!/usr/bin/env bash
# shellcheck disable=SC2016  # awk programs and guest-side scripts are single-quoted on purpose
# tests/numa-vm/selftest.sh: proves that run.sh gives the guest the topology it was asked for
# and that NUMA placement inside the guest is real. Exit code 0 iff every check passed.
#
# On the host it boots, through run.sh:
#   1. 2 sockets x 2 cores, 2 nodes (one node per socket)
#   2. 2 sockets x 2 cores, 4 nodes (two nodes per socket, like AMD NPS2 or Intel SNC)
#   3. 1 CPU, 1 node: run.sh's own contract (exit code and --env pass through, --dir is
#      writable, the guest's root is the host's)
#   4. a guest that outlives --timeout: exit code 124
# In guests 1 and 2 it runs itself with --in-guest, which checks with standard tools only
# (numactl, lscpu, hwloc's lstopo-no-graphics, /proc) that:
#   * numactl -H, lscpu and lstopo see the expected sockets and nodes;
#   * CPUs are numbered socket-major and node i holds CPUs [i*k, (i+1)*k);
#   * SLIT distances are 10 local, 12 between nodes of one socket, 20 across sockets;
#   * automatic NUMA balancing is off;
#   * numactl --membind=n puts a process's anonymous pages on node n, for every n (each
#     node is the others' negative control), read back from /proc/self/numa_maps;
#   * numactl --cpunodebind=n confines a process to node n's CPUs, and its first-touched
#     pages land on node n.
#
# Usage: tests/numa-vm/selftest.sh            (as root; numactl and hwloc installed, see
#                                              scripts/install-deps.sh)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
failures=0

check() {  # check NAME GOT WANT
  if [[ $2 == "$3" ]]; then
    echo "  PASS $1"
  else
    echo "  FAIL $1"
    echo "       got:  ${2//$'\n'/$'\n'             }"
    echo "       want: ${3//$'\n'/$'\n'             }"
    failures=$((failures + 1))
  fi
}

# Node of every anonymous page (heap, stack, anonymous mmap) of a process started by
# `numactl OPTIONS`, as "N<node>" words, one per node that holds any, e.g. "N1". File-backed
# mappings are left out: their page-cache pages were placed by whoever read the file first.
anon_page_nodes() {
  numactl "$@" cat /proc/self/numa_maps 2> /dev/null |
    awk '/ anon=/ && !/ file=/ {
           for (i = 1; i <= NF; i++) if ($i ~ /^N[0-9]+=/) { split($i, kv, "="); n[kv[1]] += kv[2] }
         }
         END { for (k in n) if (n[k] > 0) print k }' | sort | paste -sd' '
}

# Runs inside the guest: checks the topology against nodes, sockets, cores per socket.
in_guest() {
  local nodes=$1 sockets=$2 cores=$3
  local cpus=$((sockets * cores)) per_node=$((sockets * cores / nodes)) n m cpu d want got
  echo "checks in a guest with $sockets sockets x $cores cores, $nodes nodes:"

  got=$(numactl -H | head -n1)
  check "numactl -H shows $nodes nodes" "$got" "available: $nodes nodes (0-$((nodes - 1)))"

  got=$(numactl -H | sed -n 's/^\(node [0-9]* cpus:.*\)/\1/p')
  want=$(for ((n = 0; n < nodes; n++)); do
           printf 'node %d cpus:' "$n"
           for ((cpu = n * per_node; cpu < (n + 1) * per_node; cpu++)); do printf ' %d' "$cpu"; done
           echo
         done)
  check "numactl -H: node i holds CPUs [i*$per_node, (i+1)*$per_node)" "$got" "$want"

  got=$(numactl -H | awk '/^node distances:/ { on = 1; getline; next } on { $1 = $1; print }')
  want=$(for ((n = 0; n < nodes; n++)); do
           printf '%d:' "$n"
           for ((m = 0; m < nodes; m++)); do
             if ((n == m)); then d=10
             elif ((n * per_node / cores == m * per_node / cores)); then d=12
             else d=20; fi
             printf ' %d' "$d"
           done
           echo
         done)
  check "numactl -H: distances 10 local, 12 same socket, 20 across sockets" "$got" "$want"

  got=$(lscpu | awk -F: '/^Socket\(s\)|^NUMA node\(s\)/ { gsub(/ /, "", $2); print $1 "=" $2 }')
  check "lscpu shows $sockets sockets and $nodes nodes" "$got" \
    "$(printf 'Socket(s)=%d\nNUMA node(s)=%d' "$sockets" "$nodes")"

  got=$(lscpu -p=CPU,SOCKET,NODE | grep -v '^#')
  want=$(for ((cpu = 0; cpu < cpus; cpu++)); do
           echo "$cpu,$((cpu / cores)),$((cpu / per_node))"
         done)
  check "lscpu -p: CPUs numbered socket-major (cpu,socket,node)" "$got" "$want"

  got=$(lstopo-no-graphics --of console --no-io |
          awk '{ p += gsub(/Package L#/, ""); n += gsub(/NUMANode L#/, "") } END { print p, n }')
  check "lstopo shows $sockets packages and $nodes NUMA nodes" "$got" "$sockets $nodes"

  check "automatic NUMA balancing is off" "$(cat /proc/sys/kernel/numa_balancing)" 0

  for ((n = 0; n < nodes; n++)); do
    check "numactl --membind=$n: anonymous pages on node $n only" \
      "$(anon_page_nodes --membind="$n")" "N$n"
  done

  for ((n = 0; n < nodes; n++)); do
    want="$((n * per_node))"
    ((per_node == 1)) || want+="-$(((n + 1) * per_node - 1))"
    got=$(numactl --cpunodebind="$n" awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status \
            2> /dev/null || true)
    check "numactl --cpunodebind=$n: runs on CPUs $want only" "$got" "$want"
    check "numactl --cpunodebind=$n: first touch puts pages on node $n" \
      "$(anon_page_nodes --cpunodebind="$n")" "N$n"
  done

  # Written into --dir: the host sees it only if the checks ran in the guest to the end.
  echo "nodes=$nodes sockets=$sockets failures=$failures" > guest-checks.done
  echo "$failures check(s) failed in the guest"
  ((failures == 0))
}

if [[ ${1:-} == --in-guest ]]; then
  shift
  in_guest "$@"
  exit
fi

# ---------------------------------------------------------------------------- on the host
for tool in numactl lscpu lstopo-no-graphics; do
  command -v "$tool" > /dev/null \
    || { echo "selftest: $tool missing (run scripts/install-deps.sh)"; exit 2; }
done
work=$(mktemp -d /tmp/cputrain-numa-vm-selftest.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$here/run.sh" --setup-only

seconds() { echo $(($(date +%s%N) / 1000000)); }
timings=()

topology_case() {  # NODES: boots 2 sockets x 2 cores with NODES nodes, runs the checks
  local nodes=$1 rc=0 started
  echo "== guest: 2 sockets x 2 cores, $nodes nodes"
  rm -f "$work/guest-checks.done"
  started=$(seconds)
  "$here/run.sh" --nodes "$nodes" --sockets 2 --cores-per-socket 2 --dir "$work" -- \
    "$here/selftest.sh" --in-guest "$nodes" 2 2 || rc=$?
  timings+=("$nodes nodes: $(($(seconds) - started)) ms")
  check "run.sh exit code (0 = every check in the guest passed)" "$rc" 0
  check "the guest wrote its verdict into --dir" "$(cat "$work/guest-checks.done" 2>/dev/null)" \
    "nodes=$nodes sockets=2 failures=0"
}
topology_case 2
topology_case 4

echo "== guest: 1 CPU, 1 node: run.sh's contract"
rc=0 started=$(seconds)
out=$("$here/run.sh" --nodes 1 --sockets 1 --cores-per-socket 1 --mem-per-node 256M \
        --dir "$work" --env SELFTEST_VALUE='a b $c' --env SELFTEST_HOST_FILE="$here/run.sh" -- \
        bash -c 'echo "value=$SELFTEST_VALUE pwd=$PWD user=$(id -u)"; echo written > in-guest.txt
                 test -x "$SELFTEST_HOST_FILE" && echo host-root-visible; exit 7') || rc=$?
timings+=("1 node, contract: $(($(seconds) - started)) ms")
check "COMMAND's exit code passes through" "$rc" 7
check "--env, --dir and root inside the guest" "$out" \
  "$(printf 'value=a b $c pwd=%s user=0\nhost-root-visible' "$work")"
check "--dir is shared read-write" "$(cat "$work/in-guest.txt" 2>/dev/null)" written

echo "== guest that outlives --timeout 3"
rc=0 started=$(seconds)
"$here/run.sh" --nodes 1 --sockets 1 --cores-per-socket 1 --mem-per-node 256M --timeout 3 \
  --dir "$work" -- sleep 60 2> /dev/null || rc=$?
timings+=("timeout case: $(($(seconds) - started)) ms")
check "exit code 124 on timeout" "$rc" 124

echo "== a boot that never reaches COMMAND (a deadline of 0 s) is tried twice, then exit 124"
rc=0
err=$(CPUTRAIN_NUMA_VM_BOOT_DEADLINE=0 "$here/run.sh" --nodes 1 --sockets 1 --cores-per-socket 1 \
  --mem-per-node 256M --timeout 60 --dir "$work" -- true 2>&1 > /dev/null) || rc=$?
check "exit code 124 after two stuck boots" "$rc" 124
check "both boots reported" "$(grep -c 'had not started COMMAND' <<<"$err")" 2

echo "== timings: ${timings[*]/%/;}"
if ((failures)); then
  echo "selftest: FAILED ($failures check(s) on the host)"
  exit 1
fi
echo "selftest: OK"
