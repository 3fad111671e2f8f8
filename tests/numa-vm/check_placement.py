#!/usr/bin/python3
"""Checks a run's placement.json inside a multi-node guest: group g's workers are bound to, and
ran on, CPUs of node `numa_node`, which is the expected node for g, and every buffer of the group
(params, grads, optimizer, activations) is backed by that node only (move_pages, as the trainer
queried it). Usage: check_placement.py OUT_DIR EXPECTED_GROUPS. Exit 1 with a reason on failure."""
import json
import os
import sys


def node_cpus():
    cpus = {}
    base = "/sys/devices/system/node"
    for d in os.listdir(base):
        if d.startswith("node") and d[4:].isdigit():
            text = open(f"{base}/{d}/cpulist").read().strip()
            s = set()
            for part in text.split(","):
                if "-" in part:
                    a, b = part.split("-")
                    s.update(range(int(a), int(b) + 1))
                elif part:
                    s.add(int(part))
            cpus[int(d[4:])] = s
    return cpus


def main():
    out, expected = sys.argv[1], int(sys.argv[2])
    p = json.load(open(os.path.join(out, "placement.json")))
    nodes = node_cpus()
    groups = p["groups"]
    errors = []
    if p["simulated"]:
        errors.append("placement.json says the topology is simulated")
    if len(groups) != expected:
        errors.append(f"{len(groups)} groups, expected {expected}")
    for g, grp in enumerate(groups):
        node = grp["numa_node"]
        if node != g:
            errors.append(f"group {g} has numa_node {node}, expected {g}")
        local = nodes.get(node, set())
        for w, (binding, seen) in enumerate(zip(grp["worker_bindings"], grp["worker_cpus_seen"])):
            if len(binding) != 1 or binding[0] not in local:
                errors.append(f"group {g} worker {w} is bound to {binding}, not one CPU of node {node} {sorted(local)}")
            if seen not in local:
                errors.append(f"group {g} worker {w} ran on CPU {seen}, not on node {node}")
        for buf, where in grp["memory_nodes"].items():
            if where != [node]:
                errors.append(f"group {g} {buf} is on nodes {where}, expected [{node}]")
        print(f"group {g}: CPUs {grp['cpus']} on node {node}; memory " +
              ", ".join(f"{k} {v}" for k, v in grp["memory_nodes"].items()))
    if errors:
        print("FAILED:\n  " + "\n  ".join(errors))
        return 1
    print(f"placement OK: {len(groups)} groups, every worker on its node's CPUs, every buffer on its node")
    return 0


if __name__ == "__main__":
    sys.exit(main())
