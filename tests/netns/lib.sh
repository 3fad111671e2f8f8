# shellcheck shell=bash
# tests/netns/lib.sh: names and helpers shared by setup.sh, rsh-agent.sh, run_mpi.sh and
# selftest.sh. Sourced, never run.
#
# The two "hosts" of the harness, one network namespace each, joined by a veth pair:
#
#   host   namespace   UTS hostname   interface   address        /etc/hosts seen inside
#   ctn-a  ctn-a       ctn-a          ctn0        10.77.0.1/24   /etc/netns/ctn-a/hosts
#   ctn-b  ctn-b       ctn-b          ctn0        10.77.0.2/24   /etc/netns/ctn-b/hosts
#
# Both ends of the veth are called ctn0 (legal: they live in different namespaces), so one
# `btl_tcp_if_include ctn0` selects the right interface on both hosts, as `eth0` would on a
# cluster. CTN_PREFIX and CTN_SUBNET move the whole set, for a second harness beside this one.

# shellcheck disable=SC2034  # the constants are used by the scripts that source this file
readonly CTN_PREFIX=${CTN_PREFIX:-ctn}
readonly CTN_SUBNET=${CTN_SUBNET:-10.77.0}          # first three octets of a /24
readonly CTN_HOSTS=("$CTN_PREFIX-a" "$CTN_PREFIX-b")
readonly CTN_IFACE=${CTN_PREFIX}0
readonly CTN_LOCK=/run/$CTN_PREFIX-netns.lock        # setup.sh up/down
readonly CTN_RUN_LOCK=/run/$CTN_PREFIX-netns.run.lock  # one run_mpi.sh at a time
readonly CTN_STATE=/run/$CTN_PREFIX-netns             # removed by `setup.sh down`
readonly CTN_STAMP=$CTN_STATE/up                      # written last by `setup.sh up`

ctn_say() { echo "netns: $*" >&2; }

# ctn_host_index NAME: 0 or 1 for a host name, its IP address or its namespace; fails otherwise.
# The hostfile may name a host either way and mpirun passes that spelling to the rsh agent.
ctn_host_index() {
  local i
  for i in 0 1; do
    if [[ $1 == "${CTN_HOSTS[i]}" || $1 == "$CTN_SUBNET.$((i + 1))" ]]; then
      echo "$i"
      return 0
    fi
  done
  return 1
}
ctn_ip() { echo "$CTN_SUBNET.$(($1 + 1))"; }

# ctn_quote WORDS...: the words as one shell command line, quoted only where needed.
ctn_quote() {
  local w quoted=()
  for w in "$@"; do
    if [[ $w =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then quoted+=("$w"); else quoted+=("'${w//\'/\'\\\'\'}'"); fi
  done
  echo "${quoted[*]}"
}

# ctn_host_exec INDEX: sets CTN_EXEC to the command prefix that runs a command on host INDEX:
# in its network namespace (where /etc/hosts is the namespace's own, bind-mounted by
# `ip netns exec`) and in a fresh UTS namespace whose hostname is the host's name, so that
# gethostname(), Open MPI's node names and MPI_Get_processor_name tell the two hosts apart as
# on two machines. Absolute paths: the rsh agent runs it from an empty environment.
ctn_host_exec() {
  local name=${CTN_HOSTS[$1]}
  # shellcheck disable=SC2016  # $0 and $@ belong to the inner shell
  CTN_EXEC=("$(command -v ip)" netns exec "$name" "$(command -v unshare)" --uts --
            /bin/sh -c 'hostname "$0" && exec "$@"' "$name")
}

# ctn_in_host INDEX COMMAND...: execs COMMAND on host INDEX, keeping the environment.
ctn_in_host() {
  ctn_host_exec "$1"
  shift
  exec "${CTN_EXEC[@]}" "$@"
}
