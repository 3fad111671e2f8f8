#!/usr/bin/env python3
"""Validates the MPIJob in deploy/k8s/mpijob.yaml against the MPI Operator's v2beta1 schema.

Usage: /usr/bin/python3 deploy/k8s/validate_mpijob.py [MANIFEST.yaml ...]

The schema, mpijob-v2beta1.schema.json next to this file, is written from the operator's CRD
(its $comment says where each part comes from). Needs Debian's python3-jsonschema and
python3-yaml (scripts/install-deps.sh --test). Exit 0 iff every MPIJob validates, and the
self-check passes: a set of broken copies of the first MPIJob (a misspelt field, a bad enum, a
string count, no containers) must each be rejected, so the schema is known to bite.
"""
import copy
import json
import os
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def errors(validator, doc):
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))]


def mutations(job):
    """(what, broken copy) pairs; each must fail validation."""
    def mutate(what, change):
        broken = copy.deepcopy(job)
        change(broken)
        return what, broken
    worker = lambda j: j["spec"]["mpiReplicaSpecs"]["Worker"]
    return [
        mutate("misspelt spec field slotPerWorker",
               lambda j: j["spec"].update(slotPerWorker=j["spec"].pop("slotsPerWorker", 1))),
        mutate("cleanPodPolicy: Sometimes", lambda j: j["spec"]["runPolicy"].update(cleanPodPolicy="Sometimes")),
        mutate("Worker replicas as a string", lambda j: worker(j).update(replicas="2")),
        mutate("a third replica type", lambda j: j["spec"]["mpiReplicaSpecs"].update(Server=worker(j))),
        mutate("no containers", lambda j: worker(j)["template"]["spec"].pop("containers")),
        mutate("unknown field in the replica spec", lambda j: worker(j).update(replica=2)),
        mutate("mpiImplementation: OpenMP", lambda j: j["spec"].update(mpiImplementation="OpenMP")),
        mutate("apiVersion kubeflow.org/v1", lambda j: j.update(apiVersion="kubeflow.org/v1")),
        mutate("CPU request 'two'",
               lambda j: worker(j)["template"]["spec"]["containers"][0].setdefault("resources", {})
               .setdefault("requests", {}).update(cpu="two")),
    ]


def main(argv):
    with open(os.path.join(HERE, "mpijob-v2beta1.schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    files = argv[1:] or [os.path.join(HERE, "mpijob.yaml")]
    jobs, failed = [], False
    for path in files:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "MPIJob"]
        if not docs:
            print(f"{path}: no MPIJob")
            failed = True
        for doc in docs:
            errs = errors(validator, doc)
            name = doc.get("metadata", {}).get("name")
            print(f"{path}: MPIJob {name}: " + ("valid" if not errs else f"{len(errs)} error(s)"))
            for e in errs:
                print("  " + e)
            failed |= bool(errs)
            jobs.append(doc)
    if jobs:
        for what, broken in mutations(jobs[0]):
            rejected = bool(errors(validator, broken))
            print(f"  self-check: {what}: {'rejected' if rejected else 'ACCEPTED (the schema misses it)'}")
            failed |= not rejected
    print("validate_mpijob: " + ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
