#!/bin/sh
# Entry point of the cputrain-numa image (deploy/Dockerfile): runs its arguments.
#
# On the MPI Operator's launcher (it sets K_MPI_JOB_ROLE=launcher and mounts the hostfile,
# named by OMPI_MCA_orte_default_hostfile) it first waits until every worker's name resolves:
# the workers' DNS records appear only once their pods are up, and mpirun gives up on a name it
# cannot resolve. The operator's own images do the same (kubeflow/mpi-operator,
# build/base/entrypoint.sh; issue #386). CPUTRAIN_DNS_WAIT_SECONDS bounds the wait (300).
set -eu
hostfile=${OMPI_MCA_orte_default_hostfile:-/etc/mpi/hostfile}
if [ "${K_MPI_JOB_ROLE:-}" = launcher ] && [ -r "$hostfile" ]; then
  deadline=$(($(date +%s) + ${CPUTRAIN_DNS_WAIT_SECONDS:-300}))
  while read -r host _; do
    [ -n "$host" ] || continue
    until getent hosts "$host" > /dev/null; do
      if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "entrypoint: worker $host still does not resolve; giving up" >&2
        exit 1
      fi
      sleep 2
    done
  done < "$hostfile"
  echo "entrypoint: all $(wc -l < "$hostfile") worker(s) in $hostfile resolve" >&2
fi
exec "$@"
