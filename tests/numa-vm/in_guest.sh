#!/usr/bin/env bash
# Runs inside a multi-node guest (tests/numa-vm/vm_tests.sh boots it): the NUMA tests that need
# real nodes, then a short training run whose placement and losses are checked.
# Usage: in_guest.sh BUILD_DIR GROUP_BY EXPECTED_GROUPS
set -euo pipefail
build=$1 group_by=$2 groups=$3
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
echo "== guest: $(nproc) CPUs, $(ls -d /sys/devices/system/node/node* | wc -l) NUMA nodes"
"$build/tests/alloc_test" --gtest_brief=1
"$build/tests/worker_pool_test" --gtest_brief=1 --gtest_filter='WorkerPool.*Pinned*:WorkerPool.Binding*'
"$build/tests/topology_test" --gtest_brief=1 --gtest_filter='Topology.ThisMachine'
out=$(mktemp -d)
fixture=$src/tests/reference/fixtures/odd
"$build/src/cli/cputrain-numa" train --config "$fixture/config.yaml" --progress lines \
  --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin" \
  --set "data.val=$fixture/val.bin" --set "train.out_dir=$out" \
  --set "placement.group_by=$group_by"
/usr/bin/python3 "$src/tests/numa-vm/check_placement.py" "$out" "$groups"
/usr/bin/python3 "$src/tests/numa-vm/check_parity.py" "$out/metrics.jsonl" "$fixture/losses.json"
rm -rf "$out"
