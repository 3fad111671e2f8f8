"""Skips a bf16 mode of a parity script (exit 77, a CTest skip) before torch is imported.

The parity scripts' NAME-bf16 modes are skips where the engine's own `topo --json` says
train.precision bf16 cannot run here (transformers_parity.engine_trains_bf16: no AVX512_BF16 or
AMX, or a CPUTRAIN_BF16_KERNEL that cannot run). They used to find out after importing torch and
transformers (~10 s each; 26 of them skip on a CPU without bf16 instructions). Call
skip_unless_bf16() first thing, before those imports: it looks at the command line only (the
mode, `bf16` or ending in `-bf16`, and --cli), and does nothing when it cannot tell, so the
script's own check still decides then.
"""
import json
import subprocess
import sys

EXIT_SKIP = 77


def skip_unless_bf16(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    mode = argv[0] if argv and not argv[0].startswith("-") else ""
    if not (mode == "bf16" or mode.endswith("-bf16")):
        return
    cli = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--cli"), "")
    if not cli:
        return
    try:
        out = subprocess.run([cli, "topo", "--json"], capture_output=True, text=True, check=True)
        p = json.loads(out.stdout)["precisions"]
    except (OSError, subprocess.CalledProcessError, ValueError, KeyError):
        return  # the script's own check reports it
    if p.get("bf16_kernel", "none") == "none":
        print(p.get("bf16_kernel_detail", ""))
        print(f"SKIP: {mode}: train.precision bf16 cannot run here", flush=True)
        sys.exit(EXIT_SKIP)
