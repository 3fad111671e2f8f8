#!/usr/bin/python3
"""Compares a run's metrics.jsonl with a reference fixture's losses.json: every step's loss within
1e-4 relative (the parity tolerance of tests/reference/README.md), or the LIMIT given (2e-3 for
the bf16 fixture: train.precision: bf16 against torch.autocast). Usage: check_parity.py
METRICS.jsonl LOSSES.json [LIMIT]. Exit 1 on a mismatch."""
import json
import sys

ours = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = [o["loss"] for o in ours if "loss" in o]
ref = json.load(open(sys.argv[2]))["steps"]
limit = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
if len(ours) != len(ref):
    print(f"FAILED: {len(ours)} steps, reference has {len(ref)}")
    sys.exit(1)
worst = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
print(f"parity: {len(ours)} steps, worst relative difference {worst:.2e} (limit {limit:.0e})")
sys.exit(0 if worst <= limit else 1)
