#!/usr/bin/env bash
# The multi-socket proofs CI runs: boots a 2-socket / 2-node guest and a 2-socket / 4-node guest
# (tests/numa-vm/run.sh) and runs in_guest.sh in each: the placement and memory tests that need
# real NUMA nodes, and a short training run (one replica group per socket, resp. per NUMA node)
# whose placement.json must show every worker on its node's CPUs and every buffer of group g on
# node g, and whose losses must match the PyTorch reference; in the 2-socket guest also one
# process per socket under mpirun (--map-by socket --bind-to socket), each planning its socket.
# Usage: tests/numa-vm/vm_tests.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: vm_tests.sh BUILD_DIR}" && pwd)
src=$(cd "$here/../.." && pwd)
run() { "$here/run.sh" --dir "$src" --mem-per-node 768M --timeout 600 "$@"; }
echo "==== 2 sockets, 2 NUMA nodes: one group per socket"
run --sockets 2 --nodes 2 --cores-per-socket 2 -- bash "$here/in_guest.sh" "$build" socket 2
echo "==== 2 sockets, 4 NUMA nodes (SNC/NPS2): one group per NUMA node"
run --sockets 2 --nodes 4 --cores-per-socket 2 -- bash "$here/in_guest.sh" "$build" numa 4
echo "==== multi-socket VM tests passed"
