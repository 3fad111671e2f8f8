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
# The products on OpenBLAS, not measured: these runs check placement and memory, and under QEMU's
# emulation (no KVM) auto's calibration took 4-8 s per run (the foreign-CPU test checks auto).
kernel=(--set train.fp32_kernel=openblas)
"$build/src/cli/cputrain-numa" train --config "$fixture/config.yaml" "${kernel[@]}" --progress lines \
  --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin" \
  --set "data.val=$fixture/val.bin" --set "train.out_dir=$out" \
  --set "placement.group_by=$group_by"
/usr/bin/python3 "$src/tests/numa-vm/check_placement.py" "$out" "$groups"
/usr/bin/python3 "$src/tests/numa-vm/check_parity.py" "$out/metrics.jsonl" "$fixture/losses.json"
rm -rf "$out"

# LoRA: the frozen base is stored once per NUMA node (not per group), on that node, and every
# group reads its own node's copy; the adapters train (the loss falls) and save as a PEFT adapter.
out=$(mktemp -d)
"$build/src/cli/cputrain-numa" train --config "$fixture/config.yaml" "${kernel[@]}" --progress quiet \
  --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin" \
  --set "data.val=$fixture/val.bin" --set "train.out_dir=$out" \
  --set "placement.group_by=$group_by" --set train.lora.r=4 --set train.lora.alpha=8 \
  --set train.lora.target_modules=c_attn,c_proj,c_fc --set optim.weight_decay=0
/usr/bin/python3 "$src/tests/numa-vm/check_placement.py" "$out" "$groups"
/usr/bin/python3 "$src/tests/numa-vm/check_lora.py" "$out"
test -f "$out/latest" && test -f "$out/$(cat "$out/latest")/adapter_model.safetensors"
rm -rf "$out"
# Two groups on each of two nodes (one CPU each): still one base per node, shared by its groups.
cpus=$(/usr/bin/python3 -c '
import glob
lists = []
for d in sorted(glob.glob("/sys/devices/system/node/node[0-9]*"), key=lambda p: int(p.rsplit("node", 1)[1]))[:2]:
    cpus = []
    for part in open(d + "/cpulist").read().strip().split(","):
        a, _, b = part.partition("-")
        cpus += range(int(a), int(b or a) + 1)
    lists += [[c] for c in cpus[:2]]
print(lists)')
out=$(mktemp -d)
"$build/src/cli/cputrain-numa" train --config "$fixture/config.yaml" "${kernel[@]}" --progress quiet \
  --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin" \
  --set "data.val=$fixture/val.bin" --set "train.out_dir=$out" --set "placement.cpus=$cpus" \
  --set train.lora.r=4 --set train.lora.target_modules=c_attn,c_proj,c_fc --set optim.weight_decay=0
/usr/bin/python3 "$src/tests/numa-vm/check_lora.py" "$out"
rm -rf "$out"

# One process per socket (the seeds' `mpirun -ppn 2`): mpirun binds each rank to its socket, each
# plans only its cpuset, so rank r's one group runs on socket r with its memory on its node.
if [ "$group_by" = socket ]; then
  # The guest boots without a hostname ("(none)"), which Open MPI refuses as a node name.
  [ "$(hostname)" != "(none)" ] || hostname numa-vm-guest
  out=$(mktemp -d)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -n 2 --map-by socket --bind-to socket --mca btl self,vader \
    "$build/src/cli/cputrain-numa" train --config "$fixture/config.yaml" "${kernel[@]}" --progress quiet \
    --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin" \
    --set "data.val=$fixture/val.bin" --set "train.out_dir=$out"
  /usr/bin/python3 - "$out/placement.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for r in p["ranks"]:
    g = r["groups"]
    assert len(g) == 1, f"rank {r['rank']} planned {len(g)} groups"
    g = g[0]
    assert g["numa_node"] == r["rank"], f"rank {r['rank']} on node {g['numa_node']}"
    for buf, nodes in g["memory_nodes"].items():
        assert nodes == [r["rank"]], f"rank {r['rank']} {buf} on {nodes}"
    print(f"rank {r['rank']}: CPUs {g['cpus']}, node {g['numa_node']}, memory {g['memory_nodes']}")
print("one process per socket: each rank planned its socket and kept its memory on its node")
PY
  /usr/bin/python3 "$src/tests/numa-vm/check_parity.py" "$out/metrics.jsonl" "$fixture/losses.json"
  rm -rf "$out"
  # LoRA under mpirun: each rank (node) holds its own base copy, on its node.
  out=$(mktemp -d)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -n 2 --map-by socket --bind-to socket --mca btl self,vader \
    "$build/src/cli/cputrain-numa" train --config "$fixture/config.yaml" "${kernel[@]}" --progress quiet \
    --set "model.init_from=$fixture/model.bin" --set "data.train=$fixture/train.bin" \
    --set "data.val=$fixture/val.bin" --set "train.out_dir=$out" --set train.lora.r=4
  /usr/bin/python3 "$src/tests/numa-vm/check_lora.py" "$out"
  rm -rf "$out"
fi
