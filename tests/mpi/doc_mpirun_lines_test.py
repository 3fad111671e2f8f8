#!/usr/bin/env python3
"""Every documented mpirun line that runs cputrain-numa works as written (issue 15: README.md's
and configs/multi-node.yaml's lines lacked the `--bind-to none` that docs/multi-node.md calls
required, and `mpirun -n 1 cputrain-numa train` trained on one core).

Each line is extracted from README.md, docs/*.md, deploy/k8s/README.md, tests/netns/README.md,
configs/*.yaml
(comments) and deploy/k8s/mpijob.yaml (the launcher's args), then
  1. checked for the binding flags docs/multi-node.md requires: `--bind-to none`, or
     `--bind-to socket` with one rank per socket (`ppr:1:socket`);
  2. run in a reduced form on this one machine: 1 rank, no hostfile/host list, no interface
     names, `topo --json` in place of `train` (the same config and --set, the same planner):
     it must exit 0, say nothing about the binding, and use every core of the cpuset for workers
     or comm threads (of one socket with --bind-to socket).
Usage: doc_mpirun_lines_test.py BUILD_DIR
"""
import json
import os
import re
import shlex
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def markdown_and_comment_lines(path):
    """mpirun command lines of a Markdown file or of a YAML file's comments, continuations
    (trailing backslash) joined."""
    out, cur = [], None
    for raw in open(path, encoding="utf-8"):
        line = raw.rstrip("\n")
        if path.endswith(".yaml"):
            if not line.lstrip().startswith("#"):
                cur = None
                continue
            line = line.lstrip()[1:]
        text = line.strip()
        if cur is None and text.startswith("mpirun "):
            cur = ""
        if cur is None:
            continue
        cur += " " + text.rstrip("\\").strip()
        if not text.endswith("\\"):
            out.append(cur.strip())
            cur = None
    return out


def mpijob_args(path):
    """The launcher's `args:` list of an MPIJob manifest, from `- mpirun` to the list's end."""
    words, indent = [], None
    for raw in open(path, encoding="utf-8"):
        stripped = raw.strip()
        if indent is None:
            if stripped == "- mpirun":
                indent = len(raw) - len(raw.lstrip())
                words.append("mpirun")
            continue
        if not stripped or stripped.startswith("#"):
            continue
        if len(raw) - len(raw.lstrip()) != indent or not stripped.startswith("- "):
            break
        words.append(stripped[2:].strip().strip('"'))
    return [shlex.join(words)] if words else []


def documented():
    files = [os.path.join(SRC, p) for p in ("README.md", "deploy/k8s/README.md", "tests/netns/README.md")]
    files += sorted(os.path.join(SRC, "docs", f) for f in os.listdir(os.path.join(SRC, "docs"))
                    if f.endswith(".md"))
    files += sorted(os.path.join(SRC, "configs", f)
                    for f in os.listdir(os.path.join(SRC, "configs")) if f.endswith(".yaml"))
    found = []
    for f in files:
        found += [(os.path.relpath(f, SRC), l) for l in markdown_and_comment_lines(f)]
    found += [("deploy/k8s/mpijob.yaml", l)
              for l in mpijob_args(os.path.join(SRC, "deploy/k8s/mpijob.yaml"))]
    return [(f, l) for f, l in found if "cputrain-numa" in l.split()]


def binding_problem(words):
    bind = words[words.index("--bind-to") + 1] if "--bind-to" in words else None
    if bind == "none":
        return None
    if bind == "socket" and any("ppr:1:socket" in w for w in words):
        return None
    return f"--bind-to {bind}" if bind else "no --bind-to (mpirun binds each rank to a core)"


def reduced(words, binary):
    """The line for this machine: 1 rank, `topo --json` for `train`, no host or interface."""
    out, i = [], 0
    drop_with_value = {"-n", "-np", "--hostfile", "--host", "-H", "-x"}
    drop_mca = ("btl_tcp_if_include", "oob_tcp_if_include")
    while i < len(words):
        w = words[i]
        if w in drop_with_value:
            i += 2
            continue
        if w == "--mca" and i + 1 < len(words) and words[i + 1] in drop_mca:
            i += 3
            continue
        if w == "...":
            i += 1
            continue
        if w == "cputrain-numa":
            rest = [x for x in words[i + 2:] if x != "..."]
            cmd = [binary, "topo", "--json"]
            j = 0
            while j < len(rest):  # keep --config (if the file is here) and --set
                if rest[j] in ("--config", "-c"):
                    path = os.path.join(SRC, rest[j + 1])
                    if os.path.exists(path):
                        cmd += ["--config", path]
                    j += 2
                elif rest[j] == "--set":
                    cmd += ["--set", rest[j + 1]]
                    j += 2
                else:
                    j += 1
            return out[:1] + ["-n", "1"] + out[1:] + cmd
        out.append(w)
        i += 1
    raise ValueError("no cputrain-numa in the line")


def main():
    build = os.path.abspath(sys.argv[1])
    binary = os.path.join(build, "src/cli/cputrain-numa")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for k in ("OMP_NUM_THREADS", "OMPI_MCA_hwloc_base_binding_policy"):
        env.pop(k, None)
    plan = json.loads(subprocess.run([binary, "topo", "--json"], check=True, env=env,
                                     capture_output=True, text=True).stdout)
    cores = [len(g["cpus"]) for g in plan["groups"]]
    lines = documented()
    # README (2), docs/multi-node.md (2), configs/multi-node.yaml, deploy/k8s/mpijob.yaml
    assert len(lines) >= 6, f"found only {len(lines)} documented mpirun lines: {lines}"
    failures = []
    for where, line in lines:
        words = shlex.split(line)
        problem = binding_problem(words)
        if problem:
            failures.append(f"{where}: {line}\n    binding: {problem}")
            continue
        cmd = reduced(words, binary)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            failures.append(f"{where}: {shlex.join(cmd)}\n    exit {r.returncode}: {r.stderr}")
            continue
        if "bind" in r.stderr:
            failures.append(f"{where}: {shlex.join(cmd)}\n    warned: {r.stderr}")
            continue
        # workers and comm CPUs (configs/multi-node.yaml sets comm_threads: 1)
        got = [len(g["cpus"]) + len(g["comm_cpus"]) for g in json.loads(r.stdout)["groups"]]
        want = cores[:1] if "ppr:1:socket" in line else cores
        if got != want:
            failures.append(f"{where}: {shlex.join(cmd)}\n    planned {got} CPUs, want {want}")
            continue
        print(f"ok  {where}: {line}")
    if failures:
        print("FAILED:\n" + "\n".join(failures))
        sys.exit(1)
    print(f"{len(lines)} documented mpirun lines: binding flags as required, each runs")


if __name__ == "__main__":
    main()
