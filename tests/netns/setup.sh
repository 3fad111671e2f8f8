#!/usr/bin/env bash
# tests/netns/setup.sh: two "hosts" on one machine for multi-node MPI tests: two network
# namespaces (ctn-a, ctn-b) joined by a veth pair, 10.77.0.1/24 and 10.77.0.2/24 on an
# interface called ctn0 in each. lib.sh has the naming table; README.md says why and what
# it costs.
#
# Usage: tests/netns/setup.sh up        create them (a no-op when they are already up and
#                                       healthy; a half-made set is torn down and rebuilt)
#        tests/netns/setup.sh down      remove them: every process still inside is killed
#                                       (SIGTERM, then SIGKILL after 2 s), the namespaces and
#                                       their /etc/netns/<name>/ files are deleted. Safe to
#                                       run when nothing is up, or after a crash.
#        tests/netns/setup.sh status    print each host: namespace inode, address, link
#                                       state, bytes on ctn0; exit 1 if not up
#        tests/netns/setup.sh exec HOST [--] COMMAND [ARGS...]
#                                       run COMMAND on HOST (ctn-a, ctn-b or its address),
#                                       keeping the caller's environment
# Must run as root. up and down are serialized with flock on /run/ctn-netns.lock.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

die() { ctn_say "$*"; exit 2; }

ns_exists() { [[ -e /run/netns/$1 ]]; }

# True when both namespaces exist, ctn0 is up in each with its address, the loopback is up,
# and the stamp of a completed `up` is there.
is_healthy() {
  local i ns
  [[ -f $CTN_STAMP ]] || return 1
  for i in 0 1; do
    ns=${CTN_HOSTS[i]}
    ns_exists "$ns" || return 1
    ip -n "$ns" -br addr show dev "$CTN_IFACE" 2>/dev/null \
      | grep -q "^$CTN_IFACE@[^ ]* *UP .*$(ctn_ip "$i")/24" || return 1
    ip -n "$ns" link show lo 2>/dev/null | grep -q 'state UNKNOWN\|,UP' || return 1
    [[ -f /etc/netns/$ns/hosts ]] || return 1
  done
}

# Kills what still runs in namespace $1. `ip netns pids` lists exactly the processes whose
# network namespace is this one: the harness's mpirun, orted and ranks, nothing of the host's.
kill_inside() {
  local ns=$1 pids
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [[ -n $pids ]] || return 0
  ctn_say "$ns: stopping leftover processes $(echo "$pids" | paste -sd' ')"
  # shellcheck disable=SC2086  # one pid per word
  kill -TERM $pids 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] || return 0
    sleep 0.2
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
  sleep 0.2
}

do_down() {
  local ns
  rm -rf "$CTN_STATE"
  for ns in "${CTN_HOSTS[@]}"; do
    if ns_exists "$ns"; then
      kill_inside "$ns"
      # Deleting a namespace deletes its end of the veth, and with it the other end.
      ip netns del "$ns" || die "ip netns del $ns failed"
    fi
    rm -rf "/etc/netns/$ns"
  done
  rmdir /etc/netns 2>/dev/null || true   # only if nobody else keeps files there
}

do_up() {
  local i ns
  if is_healthy; then
    ctn_say "already up"
    return 0
  fi
  do_down   # whatever a crash or an interrupted `up` left behind
  for ns in "${CTN_HOSTS[@]}"; do ip netns add "$ns"; done
  # Created straight inside the namespaces: a crash here leaves nothing in the root namespace.
  ip link add "$CTN_IFACE" netns "${CTN_HOSTS[0]}" type veth \
    peer name "$CTN_IFACE" netns "${CTN_HOSTS[1]}"
  for i in 0 1; do
    ns=${CTN_HOSTS[i]}
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(ctn_ip "$i")/24" dev "$CTN_IFACE"
    ip -n "$ns" link set "$CTN_IFACE" up
    # IPv4 only: a link-local IPv6 address on ctn0 is one more address Open MPI could pick.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
    # `ip netns exec` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts for whatever runs
    # inside, so both host names resolve there, and the host's own /etc/hosts is untouched.
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      echo "$(ctn_ip 0) ${CTN_HOSTS[0]}"
      echo "$(ctn_ip 1) ${CTN_HOSTS[1]}"
    } > "/etc/netns/$ns/hosts"
  done
  mkdir -p "$CTN_STATE"
  date -u +%FT%TZ > "$CTN_STAMP"
  is_healthy || die "namespaces created but not healthy; \`$0 status\` shows what is missing"
  ctn_say "up: ${CTN_HOSTS[0]} $(ctn_ip 0), ${CTN_HOSTS[1]} $(ctn_ip 1) on $CTN_IFACE"
}

do_status() {
  local i ns rc=0 inode
  for i in 0 1; do
    ns=${CTN_HOSTS[i]}
    if ! ns_exists "$ns"; then
      echo "$ns: no namespace"
      rc=1
      continue
    fi
    inode=$(ip netns exec "$ns" readlink /proc/self/ns/net)
    echo "$ns: $inode $(ip -n "$ns" -br addr show dev "$CTN_IFACE" 2>/dev/null || echo "no $CTN_IFACE")"
    ip -n "$ns" -s link show dev "$CTN_IFACE" 2>/dev/null | sed 's/^/    /' || true
  done
  is_healthy || { echo "not healthy (or \`up\` did not finish)"; rc=1; }
  return "$rc"
}

do_exec() {
  (($# >= 1)) || die "exec needs a HOST"
  local i
  i=$(ctn_host_index "$1") || die "unknown host '$1' (${CTN_HOSTS[*]}, or $(ctn_ip 0), $(ctn_ip 1))"
  shift
  [[ ${1:-} != -- ]] || shift
  (($# >= 1)) || die "exec needs a COMMAND"
  ns_exists "${CTN_HOSTS[i]}" || die "${CTN_HOSTS[i]} is not up (run \`$0 up\`)"
  ctn_in_host "$i" "$@"
}

[[ $(id -u) == 0 ]] || die "must run as root (ip netns)"
command -v ip > /dev/null || die "ip not found: apt-get install iproute2 (scripts/install-deps.sh)"
case ${1:-} in
  up | down)
    exec 9> "$CTN_LOCK"
    flock -w 60 9 || die "another setup.sh holds $CTN_LOCK"
    "do_$1"
    ;;
  status) do_status ;;
  exec) shift; do_exec "$@" ;;
  *) sed -n '7,20p' "$0" >&2; exit 2 ;;
esac
