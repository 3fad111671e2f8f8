#!/usr/bin/env bash
# tests/netns/rsh-agent.sh: Open MPI's remote shell for the two-namespace harness, in place
# of ssh. mpirun starts the daemon of every non-local host with
#
#   <plm_rsh_agent> HOST orted -mca ess "env" -mca orte_hnp_uri "1230700544.0;tcp://..." ...
#
# (one argv word per token, quotes included, as written for the remote shell of ssh). So, like
# sshd, this agent joins COMMAND's words with spaces and hands the line to `/bin/sh -c`, in
# HOST's network namespace, with HOST as the hostname (lib.sh: ctn_in_host).
#
# Usage: rsh-agent.sh HOST COMMAND [WORDS...]      HOST: ctn-a, ctn-b or its address
#
# Like ssh into a fresh session, COMMAND starts from a clean environment (PATH, HOME, USER,
# LOGNAME, SHELL) in $HOME: a variable reaches the remote ranks only if mpirun forwards it
# (`-x NAME`; OMPI_* and PMIX_* are forwarded without asking), as on real machines. Set
# CTN_AGENT_KEEP_ENV=1 to pass the caller's whole environment instead.
# Exit code: COMMAND's, or 255 (ssh's "could not connect") for an unknown or absent host.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

if (($# < 2)); then
  ctn_say "rsh-agent: usage: rsh-agent.sh HOST COMMAND [WORDS...]"
  exit 255
fi
host=$1
shift
if ! i=$(ctn_host_index "$host"); then
  ctn_say "rsh-agent: unknown host '$host' (${CTN_HOSTS[*]}, $(ctn_ip 0) or $(ctn_ip 1))"
  exit 255
fi
if [[ ! -e /run/netns/${CTN_HOSTS[i]} ]]; then
  ctn_say "rsh-agent: host '$host' is down (tests/netns/setup.sh up)"
  exit 255
fi

ctn_host_exec "$i"
line="$*"
if [[ ${CTN_AGENT_KEEP_ENV:-0} != 1 ]]; then
  # What sshd gives a root login on Debian, and nothing more.
  cd /root 2>/dev/null || cd /
  exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root USER=root LOGNAME=root SHELL=/bin/sh "${CTN_EXEC[@]}" /bin/sh -c "$line"
fi
exec "${CTN_EXEC[@]}" /bin/sh -c "$line"
