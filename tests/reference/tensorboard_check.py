#!/usr/bin/env python3
"""train.report_to: tensorboard read by TensorBoard's own reader (CTest, tests/reference).

Run with the peers' environment (scripts/peers-env.sh: tensorboard, transformers from PyPI).

  1. stop, tear, resume  `cputrain-numa train` (the odd fixture, 12 steps, evaluations every 5,
     checkpoints every 4, --set train.report_to=tensorboard) gets SIGTERM once metrics.jsonl
     has step 5, stops after its step with a checkpoint; half a record is appended to its event
     file (what SIGKILL mid-write leaves); the same command resumes it to step 12. Then:
       - every record's framing checks with TensorBoard's masked CRC32C (its tensorflow stub's
         masked_crc32c), and TensorBoard's EventFileLoader reads the file: the file_version
         event first, then one event per metrics.jsonl row, in order, no step twice;
       - EventAccumulator (TensorBoard's reader, as its UI loads a run) lists the scalar tags
         train/loss, train/learning_rate, train/grad_norm, train/epoch,
         train/tokens_per_second, eval/loss, and each tag's (step, value) series equals
         metrics.jsonl's rows (values as float32);
       - trainer_state.json loads in transformers' TrainerState.load_from_json, its log_history
         one entry per row with HF's keys (loss, learning_rate, grad_norm, epoch / eval_loss).
  2. qa train --report_to tensorboard (a BERT made by tests/data/make_qa_models.py, 4 steps,
     --do_eval): eval/exact_match and eval/f1 at the last step equal eval_results.json's.
  3. classify train --report_to all (the same flag of the one task core: a BERT made by
     tests/data/make_classify_models.py, 4 steps, --do_eval on SST-2-style rows):
     eval/accuracy and eval/loss at the last step equal eval_results.json's, and
     trainer_state.json's last log entry holds them.

Exit 0 when every check holds, 1 otherwise.
"""
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import transformers_parity as tp  # noqa: E402  (exits naming the fix without the peers' env)

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
except ImportError as e:  # a failure, never a skip
    sys.exit(f"FAIL: {sys.executable} cannot import {e.name or e}: the TensorBoard check needs "
             f"the peers' environment with tensorboard; run: bash scripts/install-deps.sh --peers")

import argparse  # noqa: E402
import json  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from transformers import TrainerState  # noqa: E402

FIXTURE = os.path.join(HERE, "fixtures", "odd")
EVENTS = os.path.join("runs", "events.out.tfevents.cputrain-numa")
TAGS = {"train/loss": "loss", "train/learning_rate": "lr", "train/grad_norm": "grad_norm",
        "train/epoch": "epoch", "train/tokens_per_second": "tokens_per_s", "eval/loss": "val_loss"}


def rows(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def framing_ok(path) -> int:
    """Records whose length and data CRCs check with TensorBoard's masked_crc32c; -1 if one
    does not or bytes are left over."""
    data = open(path, "rb").read()
    at, n = 0, 0
    while at < len(data):
        if len(data) - at < 16:
            return -1
        (length,) = struct.unpack_from("<Q", data, at)
        (len_crc,) = struct.unpack_from("<I", data, at + 8)
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        if len_crc != masked_crc32c(data[at:at + 8]) or body_crc != masked_crc32c(body):
            return -1
        at += 16 + length
        n += 1
    return n


def train_cmd(cli, out_dir):
    sets = {"model.init_from": os.path.join(FIXTURE, "model.bin"),
            "data.train": os.path.join(FIXTURE, "train.bin"),
            "data.val": os.path.join(FIXTURE, "val.bin"), "train.out_dir": out_dir,
            "train.steps": 12, "train.eval_every": 5, "train.checkpoint_every": 4,
            "train.report_to": "tensorboard"}
    cmd = [cli, "train", "--progress", "lines", "--config", os.path.join(FIXTURE, "config.yaml")]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def check_resumed_run(cli, tmp, checks):
    out = os.path.join(tmp, "run")
    p = subprocess.Popen(train_cmd(cli, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        try:
            if any(r.get("step", 0) >= 5 and "loss" in r for r in rows(out)):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    stopped_at = max(r["step"] for r in rows(out) if "loss" in r)
    checks.expect(stopped_at < 12 or p.returncode == 0,
                  f"SIGTERM stopped the run after step {stopped_at} (exit {p.returncode})")
    events = os.path.join(out, EVENTS)
    with open(events, "ab") as f:  # half of a record, as a writer killed mid-write leaves
        f.write(struct.pack("<Q", 40) + b"\x01\x02\x03\x04" + b"half a record")
    r = subprocess.run(train_cmd(cli, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    checks.expect(r.returncode == 0, f"the resumed run finished (exit {r.returncode}) "
                                     f"{r.stderr[-300:] if r.returncode else ''}")
    want = rows(out)
    n = framing_ok(events)
    checks.expect(n == len(want) + 1, f"{n} records, each with TensorBoard's masked CRC32C: "
                                      f"file_version + {len(want)} metrics rows")
    loaded = list(EventFileLoader(events).Load())
    steps = [(e.step, "loss" if any(v.tag == "train/loss" for v in e.summary.value) else "eval")
             for e in loaded[1:]]
    checks.expect(loaded[0].file_version == "brain.Event:2" and len(loaded) == len(want) + 1
                  and len(set(steps)) == len(steps) and
                  [e.step for e in loaded[1:]] == [w["step"] for w in want],
                  f"EventFileLoader: file_version, then {len(loaded) - 1} events in the rows' "
                  f"order, none twice")
    acc = EventAccumulator(os.path.join(out, "runs"), size_guidance={"scalars": 0})
    acc.Reload()
    checks.expect(set(acc.Tags()["scalars"]) == set(TAGS),
                  f"EventAccumulator's scalar tags: {sorted(acc.Tags()['scalars'])}")
    for tag, key in TAGS.items():
        ours = [(w["step"], np.float32(w[key])) for w in want if key in w]
        got = [(s.step, np.float32(s.value)) for s in acc.Scalars(tag)]
        checks.expect(got == ours, f"{tag}: {len(got)} (step, value) points = metrics.jsonl's "
                                   f"{key} ({len(ours)})")
    state = TrainerState.load_from_json(os.path.join(out, "trainer_state.json"))
    hf_keys = {"loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm",
               "eval_loss": "val_loss"}
    same = len(state.log_history) == len(want) and all(
        h["step"] == w["step"] and all(h[k] == w[o] for k, o in hf_keys.items() if k in h)
        for h, w in zip(state.log_history, want))
    checks.expect(same and state.global_step == 12,
                  f"trainer_state.json: TrainerState with {len(state.log_history)} log entries, "
                  f"global_step {state.global_step}")


def check_qa(cli, tmp, checks):
    data = os.path.join(tmp, "qa")
    argv = sys.argv
    sys.argv = ["make_qa_models.py", data]
    runpy.run_path(os.path.join(ROOT, "tests", "data", "make_qa_models.py"), run_name="__main__")
    sys.argv = argv
    out = os.path.join(tmp, "qa-run")
    ref = os.path.join(data, "ref")
    tp.run([cli, "qa", "train", "--model_name_or_path", os.path.join(data, "bert"),
            "--train_file", os.path.join(ref, "v1.json"),
            "--validation_file", os.path.join(ref, "v1.json"), "--do_train", "--do_eval",
            "--max_seq_length", "48", "--doc_stride", "16", "--per_device_train_batch_size", "4",
            "--max_steps", "4", "--output_dir", out, "--report_to", "tensorboard",
            "--progress", "quiet"])
    with open(os.path.join(out, "eval_results.json"), encoding="utf-8") as f:
        results = json.load(f)
    acc = EventAccumulator(os.path.join(out, "runs"), size_guidance={"scalars": 0})
    acc.Reload()
    for tag, key in (("eval/exact_match", "eval_exact_match"), ("eval/f1", "eval_f1")):
        got = [(s.step, s.value) for s in acc.Scalars(tag)]
        checks.expect(got == [(4, np.float32(results[key]))],
                      f"qa train: {tag} {got} = eval_results.json's {key} at step 4")
    checks.expect(len(acc.Scalars("train/loss")) == 4, "qa train: train/loss at steps 1-4")


def check_classify(cli, tmp, checks):
    made = os.path.join(tmp, "cls")
    argv = sys.argv
    sys.argv = ["make_classify_models.py", made]
    runpy.run_path(os.path.join(ROOT, "tests", "data", "make_classify_models.py"),
                   run_name="__main__")
    sys.argv = argv
    out = os.path.join(tmp, "cls-run")
    tp.run([cli, "classify", "train", "--model_name_or_path", os.path.join(made, "bert"),
            "--train_file", os.path.join(made, "data", "sst2_train.csv"),
            "--validation_file", os.path.join(made, "data", "sst2_dev.csv"), "--do_train",
            "--do_eval", "--max_seq_length", "64", "--per_device_train_batch_size", "4",
            "--max_steps", "4", "--output_dir", out, "--report_to", "all", "--progress", "quiet"])
    with open(os.path.join(out, "eval_results.json"), encoding="utf-8") as f:
        results = json.load(f)
    acc = EventAccumulator(os.path.join(out, "runs"), size_guidance={"scalars": 0})
    acc.Reload()
    for tag, key in (("eval/accuracy", "eval_accuracy"), ("eval/loss", "eval_loss")):
        got = [(s.step, s.value) for s in acc.Scalars(tag)]
        checks.expect(got == [(4, np.float32(results[key]))],
                      f"classify train: {tag} {got} = eval_results.json's {key} at step 4")
    checks.expect(len(acc.Scalars("train/loss")) == 4, "classify train: train/loss at steps 1-4")
    state = TrainerState.load_from_json(os.path.join(out, "trainer_state.json"))
    last = state.log_history[-1]
    checks.expect(last.get("step") == 4 and
                  all(last.get(k) == results[k] for k in ("eval_accuracy", "eval_loss")),
                  f"classify train: trainer_state.json's last entry is the evaluation: {last}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    a = ap.parse_args(argv)
    checks = tp.Checks()
    with tempfile.TemporaryDirectory() as tmp:
        check_resumed_run(a.cli, tmp, checks)
        check_qa(a.cli, tmp, checks)
        check_classify(a.cli, tmp, checks)
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
