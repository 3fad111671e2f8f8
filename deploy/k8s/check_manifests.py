#!/usr/bin/env python3
"""Checks deploy/k8s/*.yaml without a cluster: what `kubectl apply --dry-run` would need one for.

Usage: /usr/bin/python3 deploy/k8s/check_manifests.py [--binary build/src/cli/cputrain-numa]

Needs PyYAML and Debian's python3-kubernetes (its API models; not a project dependency:
`apt-get install python3-kubernetes`). Exit code 0 iff every check passed. It checks:
  * every file parses, every document has apiVersion, kind and metadata.name;
  * core objects (ConfigMap, PersistentVolumeClaim) and every pod template of the MPIJob
    survive a round trip through the Kubernetes client's models with no field dropped: a
    misspelt or misplaced field (which the API server would reject or prune) is named;
  * the MPIJob's own fields are those of kubeflow.org/v2beta1 (kubeflow/mpi-operator
    pkg/apis/kubeflow/v2beta1/types.go, plus launcherCreationPolicy of later versions);
  * what the engine relies on: `mpirun -n` equals Worker replicas x slotsPerWorker, one rank
    per node (--map-by ppr:1:node), --bind-to none; worker CPU and memory requests equal
    limits with whole CPUs (Guaranteed QoS, exclusive CPUs under the static CPU manager); a
    required anti-affinity on kubernetes.io/hostname over the workers' own labels; every
    volumeMount has a volume; /dev/shm is a memory emptyDir with a size limit; the ConfigMap
    and PVC the workers mount are the ones defined here; the container args leave the image's
    entry point in place (no `command`);
  * with --binary, the training config in the ConfigMap passes `cputrain-numa config` (the
    engine's strict parser) with the launcher's --set flags.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import yaml
from kubernetes.client import ApiClient

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ["pvc.yaml", "mpijob.yaml"]
MPIJOB_SPEC_FIELDS = {"slotsPerWorker", "runPolicy", "mpiReplicaSpecs", "sshAuthMountPath",
                      "waitForWorkers", "launcherCreationPolicy", "mpiImplementation",
                      "runLauncherAsWorker"}
RUN_POLICY_FIELDS = {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                     "backoffLimit", "schedulingPolicy", "suspend", "managedBy"}
REPLICA_SPEC_FIELDS = {"replicas", "template", "restartPolicy"}
MODELS = {"ConfigMap": "V1ConfigMap", "PersistentVolumeClaim": "V1PersistentVolumeClaim"}

failures = []


def check(ok, what):
    print(("  PASS " if ok else "  FAIL ") + what)
    if not ok:
        failures.append(what)


def dropped_fields(original, roundtrip, path=""):
    """Keys of `original` that the model round trip lost, as dotted paths."""
    lost = []
    if isinstance(original, dict):
        for key, value in original.items():
            if not isinstance(roundtrip, dict) or key not in roundtrip:
                lost.append(path + "." + key)
            else:
                lost += dropped_fields(value, roundtrip[key], path + "." + key)
    elif isinstance(original, list) and isinstance(roundtrip, list):
        for i, (a, b) in enumerate(zip(original, roundtrip)):
            lost += dropped_fields(a, b, f"{path}[{i}]")
    return lost


def roundtrip(obj, model):
    client = ApiClient()
    typed = client._ApiClient__deserialize(obj, model)  # the client's own decoder
    return client.sanitize_for_serialization(typed)


def check_model(obj, model, what):
    lost = dropped_fields(obj, roundtrip(obj, model))
    check(not lost, f"{what}: every field is a {model} field" + (f" (unknown: {lost})" if lost else ""))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", help="cputrain-numa, to check the training config")
    args = parser.parse_args()

    docs = {}
    for name in FILES:
        with open(os.path.join(HERE, name)) as f:
            loaded = [d for d in yaml.safe_load_all(f) if d is not None]
        print(f"{name}: {len(loaded)} document(s)")
        for d in loaded:
            ok = all(k in d for k in ("apiVersion", "kind", "metadata")) and "name" in d["metadata"]
            check(ok, f"{name}: {d.get('kind')} has apiVersion, kind, metadata.name")
            docs[d["kind"]] = d
            if d["kind"] in MODELS:
                check_model(d, MODELS[d["kind"]], f"{name}: {d['kind']} {d['metadata']['name']}")

    job = docs["MPIJob"]
    spec = job["spec"]
    print("MPIJob " + job["metadata"]["name"] + ":")
    check(job["apiVersion"] == "kubeflow.org/v2beta1", "apiVersion kubeflow.org/v2beta1")
    check(set(spec) <= MPIJOB_SPEC_FIELDS, f"spec fields are v2beta1 fields ({sorted(set(spec) - MPIJOB_SPEC_FIELDS) or 'ok'})")
    check(set(spec.get("runPolicy", {})) <= RUN_POLICY_FIELDS, "runPolicy fields are v2beta1 fields")
    check(spec.get("mpiImplementation") == "OpenMPI", "mpiImplementation: OpenMPI")
    check(set(spec["mpiReplicaSpecs"]) == {"Launcher", "Worker"}, "one Launcher and Workers")
    for role, rs in spec["mpiReplicaSpecs"].items():
        check(set(rs) <= REPLICA_SPEC_FIELDS, f"{role}: replica spec fields")
        check_model(rs["template"], "V1PodTemplateSpec", f"{role}: pod template")
        container = rs["template"]["spec"]["containers"][0]
        check("command" not in container and "args" in container,
              f"{role}: args only, so the image's entry point runs")

    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    worker_rs = spec["mpiReplicaSpecs"]["Worker"]
    worker_pod = worker_rs["template"]["spec"]
    worker = worker_pod["containers"][0]
    argv = launcher["args"]
    check(argv[0] == "mpirun", "the launcher runs mpirun")
    n = int(argv[argv.index("-n") + 1]) if "-n" in argv else None
    check(n == worker_rs["replicas"] * spec.get("slotsPerWorker", 1),
          f"mpirun -n {n} = {worker_rs['replicas']} workers x {spec.get('slotsPerWorker', 1)} slot(s)")
    check("--map-by" in argv and argv[argv.index("--map-by") + 1] == "ppr:1:node", "--map-by ppr:1:node")
    check("--bind-to" in argv and argv[argv.index("--bind-to") + 1] == "none", "--bind-to none")

    res = worker["resources"]
    cpu = str(res["requests"].get("cpu", ""))
    check(res["requests"] == res["limits"], "worker: requests equal limits (Guaranteed QoS)")
    check(cpu.isdigit() and int(cpu) > 0, f"worker: a whole number of CPUs ({cpu})")
    lres = launcher["resources"]
    check(lres["requests"] == lres["limits"], "launcher: requests equal limits")

    labels = worker_rs["template"]["metadata"]["labels"]
    terms = (worker_pod.get("affinity", {}).get("podAntiAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", []))
    check(any(t.get("topologyKey") == "kubernetes.io/hostname"
              and t.get("labelSelector", {}).get("matchLabels", {}).items() <= labels.items()
              for t in terms), "workers: required anti-affinity per hostname on their own labels")

    volumes = {v["name"]: v for v in worker_pod["volumes"]}
    mounts = {m["name"]: m for m in worker["volumeMounts"]}
    check(set(mounts) <= set(volumes), f"worker: every volumeMount has a volume ({sorted(mounts)})")
    shm = [volumes[m["name"]] for m in mounts.values() if m["mountPath"] == "/dev/shm"]
    check(len(shm) == 1 and shm[0].get("emptyDir", {}).get("medium") == "Memory"
          and "sizeLimit" in shm[0]["emptyDir"], "/dev/shm: a memory emptyDir with a sizeLimit")
    claims = {v["persistentVolumeClaim"]["claimName"] for v in volumes.values() if "persistentVolumeClaim" in v}
    check(claims == {docs["PersistentVolumeClaim"]["metadata"]["name"]}, f"worker: mounts the PVC defined in pvc.yaml ({claims})")
    pvc_modes = docs["PersistentVolumeClaim"]["spec"]["accessModes"]
    check(pvc_modes == ["ReadWriteMany"], "the PVC is ReadWriteMany (mounted by every worker)")
    maps = {v["configMap"]["name"] for v in volumes.values() if "configMap" in v}
    check(maps == {docs["ConfigMap"]["metadata"]["name"]}, f"worker: mounts the ConfigMap defined here ({maps})")

    config_path = argv[argv.index("--config") + 1]
    config_mount = next(m for m in worker["volumeMounts"] if config_path.startswith(m["mountPath"] + "/"))
    key = os.path.relpath(config_path, config_mount["mountPath"])
    check(key in docs["ConfigMap"]["data"], f"--config {config_path} is key '{key}' of the ConfigMap")
    if args.binary:
        sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(docs["ConfigMap"]["data"][key])
            f.flush()
            cmd = [args.binary, "config", "--config", f.name] + sum((["--set", s] for s in sets), [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
        check(proc.returncode == 0, "cputrain-numa config accepts the training config"
              + ("" if proc.returncode == 0 else ": " + proc.stderr.strip()))

    if failures:
        print(f"check_manifests: {len(failures)} check(s) FAILED")
        return 1
    print("check_manifests: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
