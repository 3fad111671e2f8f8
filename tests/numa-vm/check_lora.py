#!/usr/bin/python3
"""Checks a LoRA run's placement.json inside a multi-node guest: the frozen base is stored once per
NUMA node the groups use — one copy per node (not per group), each backed by its node's memory
only (move_pages, as the trainer queried it), every group reading its own node's copy — and that
what trains is the adapters alone, and the loss fell. Usage: check_lora.py OUT_DIR.
Under mpirun (placement.json has "ranks") every rank is checked the same way. Exit 1 with a
reason on failure."""
import json
import os
import sys


def check(p, where, errors):
    lora = p.get("lora")
    if lora is None:
        errors.append(f"{where}: placement.json has no lora section")
        return
    groups = p["groups"]
    nodes = sorted({g["numa_node"] for g in groups})
    copies = lora["base_copies"]
    if sorted(c["numa_node"] for c in copies) != nodes:
        errors.append(f"{where}: base copies on nodes {[c['numa_node'] for c in copies]}, "
                      f"expected one on each of {nodes}")
    for i, c in enumerate(copies):
        if c["memory_nodes"] != [c["numa_node"]]:
            errors.append(f"{where}: base copy {i} (node {c['numa_node']}) is backed by nodes "
                          f"{c['memory_nodes']}")
        for g in c["groups"]:
            if groups[g]["numa_node"] != c["numa_node"]:
                errors.append(f"{where}: group {g} on node {groups[g]['numa_node']} reads the "
                              f"base copy of node {c['numa_node']}")
            if groups[g].get("base_copy") != i:
                errors.append(f"{where}: group {g} says base_copy {groups[g].get('base_copy')}, "
                              f"expected {i}")
    for g, grp in enumerate(groups):
        if grp["memory_nodes"].get("base") != [grp["numa_node"]]:
            errors.append(f"{where}: group {g}'s base is on {grp['memory_nodes'].get('base')}")
    if not 0 < lora["trainable_floats"] < lora["base_floats"] / 10:
        errors.append(f"{where}: {lora['trainable_floats']} trainable floats of "
                      f"{lora['base_floats']}: not adapters alone")
    print(f"{where}: {len(groups)} group(s) on nodes {nodes}, {len(copies)} base cop"
          f"{'y' if len(copies) == 1 else 'ies'} of {copies[0]['fp32_bytes']} bytes; "
          f"{lora['trainable_floats']} trainable floats of {lora['base_floats']}")


def main():
    p = json.load(open(os.path.join(sys.argv[1], "placement.json")))
    errors = []
    if "ranks" in p:
        for r in p["ranks"]:
            check(r, f"rank {r['rank']}", errors)
    else:
        check(p, "process", errors)
    rows = [json.loads(line) for line in open(os.path.join(sys.argv[1], "metrics.jsonl"))]
    losses = [r["loss"] for r in rows if "loss" in r and "val_loss" not in r]
    if len(losses) < 2 or not losses[-1] < losses[0]:
        errors.append(f"the adapters did not train: losses {losses[:1]} ... {losses[-1:]}")
    else:
        print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
