#!/usr/bin/env python3
"""LoRA fine-tuning in PEFT's format against peft + transformers (CTest).

Run with the peers' environment (scripts/peers-env.sh: torch, transformers and peft), as
transformers_parity.py, whose checks these reuse (Engine, load_hf, check_logits, train_hf,
engine_train, compare_training, compare_weights), with llama_parity.py's gradient check
(check_grads, compare_grads) and bert_parity.py's span-head inputs and loss. Nothing is
downloaded.

Each mode makes a tiny base model with transformers (seeded; llama_parity / transformers_parity /
bert_parity's models: vocab 300, hidden 64, 2 layers, 4 heads, maxT 64), wraps it with
peft.get_peft_model(LoraConfig(r=4, lora_alpha=6, lora_dropout=0, init_lora_weights=False)) so
that B starts non-zero (the adapters change the model from step 0; with PEFT's default init B = 0
and every B-side error would be invisible at first), and save_pretrained's both. Then:

  (a) grads   engine_logits --adapter DIR on the base: the loss and every adapter gradient under
              PEFT's names (adapter_model.safetensors' keys: base_model.model.<module>.lora_A.weight)
              against PEFT's autograd in float64, within 1e-5 relative per tensor
              (llama_parity.compare_grads), and the logits within 1e-5 (rel_diff);
  (b) train   `cputrain-numa train --adapter DIR` over model.init_from = the base, 10 AdamW steps,
              no shuffle (llama_parity's run), against transformers_parity.train_hf on the
              PeftModel (is_trainable: lora_A and lora_B train, both 2-D, so both decay): per-step
              losses and validation losses within 1e-5 relative, pre-clip gradient norms within
              1e-4, lrs within 1e-12; our last step directory's adapter_model.safetensors against
              PyTorch's trained adapters within transformers_parity.WEIGHTS_TOL per tensor;
  (c) load    PeftModel.from_pretrained(base, our last step directory): no warning, no missing or
              unexpected adapter key (load_adapter's result), the file's tensors exactly the ones
              PEFT saves for that config (names, shapes, F32), adapter_config.json read back with
              the run's r, lora_alpha, target_modules, fan_in_fan_out; its logits equal
              engine_logits' with --adapter on the same directory within 1e-5;
  (d) merge   `cputrain-numa export --merge` of base + our adapter, loaded by transformers, against
              PeftModel.merge_and_unload() of (c)'s model within 1e-6 of each tensor's largest
              value;
  (e) resume  the same run continued from its step-5 checkpoint (train.resume = that directory,
              into a fresh out_dir) ends with byte-identical adapter files at step 10.

Modes: llama (LlamaForCausalLM, tied head, 4 heads over 2 KV heads; targets q_proj, k_proj,
v_proj, o_proj, gate_proj, up_proj, down_proj: each of our fused products carries several sites),
llama-bf16 (the same trained with train.precision bf16 and train.lora.base_dtype bf16 against
torch.autocast bf16: llama_parity's bf16 bounds, losses 2e-3 and grad norms 5e-2, the trained
adapters not compared; exit 77, a skip, on a CPU without AVX512_BF16),
gpt2 (GPT2LMHeadModel; targets c_attn, c_proj, c_fc: Conv1D, fan_in_fan_out=True, c_proj both the
attention's and the MLP's), bert-qa (BertForQuestionAnswering, task_type QUESTION_ANS: targets
query, value and qa_outputs trained fully as modules_to_save; (a) on the span head's loss, and
(c) on an adapter `qa train --lora_r 4` wrote: a full training parity is bert_parity.py's,
too heavy to repeat here).

self-check runs llama and gpt2 against StandIn (peft and transformers writing the engine's
files; every check must pass), then four broken stand-ins whose faults the checks must catch.

Exit 0 when every check holds, 1 otherwise (and when torch, transformers or peft cannot be
imported), 77 as above.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bf16_gate  # noqa: E402

if __name__ == "__main__":
    bf16_gate.skip_unless_bf16()  # a bf16 mode this CPU cannot run: skip before torch loads
import transformers_parity as tp  # noqa: E402  (torch, transformers, one thread, offline)
import llama_parity as lp  # noqa: E402
import bert_parity as bp  # noqa: E402

import argparse  # noqa: E402
import copy  # noqa: E402
import dataclasses  # noqa: E402
import filecmp  # noqa: E402
import tempfile  # noqa: E402
from typing import Callable, Dict, Optional, Tuple  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

try:
    import peft
    from peft import LoraConfig, PeftConfig, PeftModel, TaskType, get_peft_model
    from peft import get_peft_model_state_dict
except ImportError as e:
    sys.exit(f"FAIL: {sys.executable} cannot import peft ({e}): the LoRA parity tests need the "
             f"peers' environment; run: bash scripts/install-deps.sh --peers")

ref = tp.ref

R, ALPHA = 4, 6       # scale alpha / r = 1.5: a scale of 1 would hide alpha and r swapped
ADAPTER_SEED = 20251201  # torch.manual_seed before get_peft_model (A and B: Kaiming-uniform)
MERGE_TOL = 1e-6      # per tensor, max |ours - peft| / max |peft| of the merged weights
# llama_parity's run (transformers_parity's import-train run for 10 steps, evaluated after 0, 5
# and 10) with a checkpoint after step 5, where (e) resumes.
LORA_RUN = dataclasses.replace(lp.LLAMA_RUN, name="lora", checkpoint_every=5)
RESUME_STEP = 5


@dataclasses.dataclass(frozen=True)
class LoraCase:
    about: str
    make: Callable[[], torch.nn.Module]       # the base model, seeded
    load: Callable[[str, tp.Checks], torch.nn.Module]  # from_pretrained of a base directory
    targets: Tuple[str, ...]
    fan_in_fan_out: bool = False
    task_type: Optional[str] = None
    precision: str = "fp32"  # train.precision; bf16 also stores the frozen base in bf16

    def run(self) -> "ref.RunConfig":
        return dataclasses.replace(LORA_RUN, precision=self.precision)

    def lora_config(self) -> LoraConfig:
        return LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=list(self.targets),
                          fan_in_fan_out=self.fan_in_fan_out, init_lora_weights=False,
                          task_type=self.task_type)


CASES: Dict[str, LoraCase] = {
    "llama": LoraCase("LlamaForCausalLM, tied head, GQA (4 heads over 2 KV heads), every linear "
                      "layer of the blocks adapted",
                      lambda: lp.make_llama(lp.CASES["import-train"]), lp.load_llama,
                      ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                       "down_proj")),
    "llama-bf16": LoraCase("the llama mode with train.precision bf16 and train.lora.base_dtype "
                           "bf16, against torch.autocast bf16",
                           lambda: lp.make_llama(lp.CASES["import-train"]), lp.load_llama,
                           ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj"), precision="bf16"),
    "gpt2": LoraCase("GPT2LMHeadModel, Conv1D layers (fan_in_fan_out), c_proj of attention and MLP",
                     lambda: tp.make_hf_model(tp.IMPORT_RUN), tp.load_hf,
                     ("c_attn", "c_proj", "c_fc"), fan_in_fan_out=True),
    "bert-qa": LoraCase("BertForQuestionAnswering, QUESTION_ANS: query and value adapted, "
                        "qa_outputs trained fully",
                        lambda: bp.make_model("bert"),
                        lambda d, checks: tp.load_hf(d, checks, bp.BertForQuestionAnswering,
                                                     attn_implementation="eager"),
                        ("query", "value"), task_type=TaskType.QUESTION_ANS),
}


class LoraEngine(tp.Engine):
    """The engine's LoRA commands beside transformers_parity.Engine's (engine_logits --adapter,
    train --adapter: Engine.logits / Engine.train's adapter and args)."""

    def export_merged(self, base: str, adapter: str, out_dir: str) -> None:
        """cputrain-numa export --format hf --checkpoint BASE --adapter ADAPTER --merge -o OUT"""
        tp.run([self.cli, "export", "--format", "hf", "--checkpoint", base, "--adapter", adapter,
                "--merge", "-o", out_dir])

    def qa_train(self, args: Tuple[str, ...]) -> None:
        tp.run([self.cli, "qa", "train", *args])


# ---- PEFT's side --------------------------------------------------------------------------------
def peft_names(model: PeftModel, tensors: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Tensors named as model.named_parameters() names them ("...q_proj.lora_A.default.weight",
    "...qa_outputs.modules_to_save.default.weight") under the names PEFT saves them with in
    adapter_model.safetensors (peft's own get_peft_model_state_dict)."""
    sd = get_peft_model_state_dict(model, state_dict={n: torch.from_numpy(np.asarray(t))
                                                      for n, t in tensors.items()})
    return {k: v.numpy() for k, v in sd.items()}


def load_adapter(case: LoraCase, base_dir: str, adapter_dir: str, checks: tp.Checks,
                 trainable: bool = False) -> PeftModel:
    """PeftModel.from_pretrained(a fresh base, adapter_dir), fp32; no warning (PEFT warns of
    missing adapter keys there) and, loading it again with load_adapter (which returns what
    from_pretrained drops), no missing and no unexpected key."""
    base = case.load(base_dir, checks)
    name = os.path.basename(adapter_dir.rstrip("/"))
    with tp.warnings_said(("transformers", "peft")) as said:
        model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=trainable)
        res = model.load_adapter(adapter_dir, adapter_name="reloaded")
        model.delete_adapter("reloaded")
    checks.expect(not said, f"PeftModel.from_pretrained({name}): no warnings {said or ''}")
    checks.expect(not res.missing_keys and not res.unexpected_keys,
                  f"PeftModel load_adapter({name}): no missing or unexpected adapter keys "
                  f"(missing {res.missing_keys}, unexpected {res.unexpected_keys})")
    model.set_adapter("default")
    if trainable:
        model.train()
    else:
        model.eval()
    return model


def make_case(case: LoraCase, tmp: str, checks: tp.Checks) -> Tuple[str, str]:
    """The base and the adapter, save_pretrained'ed into tmp/base and tmp/adapter."""
    base_dir, adapter_dir = os.path.join(tmp, "base"), os.path.join(tmp, "adapter")
    case.make().save_pretrained(base_dir, safe_serialization=True)
    torch.manual_seed(ADAPTER_SEED)
    model = get_peft_model(case.load(base_dir, checks), case.lora_config())
    b = [p for n, p in model.named_parameters() if "lora_B" in n]
    checks.expect(bool(b) and all(float(p.detach().abs().max()) > 0 for p in b),
                  f"init_lora_weights=False: every lora_B is non-zero ({len(b)} tensors)")
    model.save_pretrained(adapter_dir, safe_serialization=True)
    return base_dir, adapter_dir


def check_moves(model: PeftModel, logits: Callable[[torch.nn.Module], np.ndarray], what: str,
                checks: tp.Checks) -> None:
    """The adapter changes the model's logits by far more than LOGITS_TOL (100x at least): else
    the logits checks could not tell an adapter applied from one ignored. logits(m) runs m."""
    with torch.no_grad():
        on = logits(model)
        with model.disable_adapter():
            off = logits(model)
    d = tp.rel_diff(on, off)
    checks.expect(d >= 100 * tp.LOGITS_TOL, f"the {what} moves the logits {d:.3e} (rel_diff) from "
                  f"the base's: at least 100x the {tp.LOGITS_TOL:g} they are checked to")


# ---- (c) our adapter directory in PEFT, (d) the merge ------------------------------------------
def check_files(case: LoraCase, adapter_dir: str, model: PeftModel, checks: tp.Checks) -> None:
    """adapter_model.safetensors holds exactly what PEFT saves for `model` (the same config):
    names and shapes, F32; adapter_config.json reads back with the case's settings."""
    with safe_open(os.path.join(adapter_dir, "adapter_model.safetensors"), framework="np") as f:
        ours = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape()))
                for k in f.keys()}
    want = {k: ("F32", tuple(v.shape)) for k, v in get_peft_model_state_dict(model).items()}
    missing, extra = sorted(set(want) - set(ours)), sorted(set(ours) - set(want))
    bad = [f"{k}: {ours[k]} (PEFT's {want[k]})" for k in sorted(set(ours) & set(want))
           if ours[k] != want[k]]
    checks.expect(not missing and not extra and not bad,
                  f"adapter_model.safetensors: PEFT's {len(want)} tensor names, shapes, F32 "
                  f"(missing {missing}, unexpected {extra}, different {bad})")
    cfg = PeftConfig.from_pretrained(adapter_dir)
    got = (cfg.peft_type, cfg.r, cfg.lora_alpha, sorted(cfg.target_modules),
           cfg.fan_in_fan_out, sorted(cfg.modules_to_save or []), cfg.use_dora, cfg.bias)
    exp = (peft.PeftType.LORA, R, ALPHA, sorted(case.targets), case.fan_in_fan_out,
           ["qa_outputs"] if case.task_type == TaskType.QUESTION_ANS else [], False, "none")
    checks.expect(got == exp, f"adapter_config.json reads back as (peft_type, r, lora_alpha, "
                  f"target_modules, fan_in_fan_out, modules_to_save, use_dora, bias) = {got} "
                  f"(want {exp})")


def check_merge(engine: LoraEngine, case: LoraCase, base_dir: str, adapter_dir: str,
                model: PeftModel, tmp: str, checks: tp.Checks) -> None:
    """export --merge of base + adapter, read back by transformers, against PEFT's own merge of
    the same adapter (merge_and_unload): every tensor within MERGE_TOL of its largest value."""
    out = os.path.join(tmp, "merged")
    engine.export_merged(base_dir, adapter_dir, out)
    merged = copy.deepcopy(model).merge_and_unload()
    tp.compare_weights(case.load(out, checks).state_dict(), merged.state_dict(), checks, MERGE_TOL)


# ---- decoder modes -----------------------------------------------------------------------------
def last_step_dir(run_dir: str) -> str:
    """The step directory out_dir/latest names (src/model/checkpoint_path.h)."""
    with open(os.path.join(run_dir, "latest")) as f:
        return os.path.join(run_dir, f.read().strip())


def check_decoder(engine: LoraEngine, case: LoraCase, tmp: str) -> int:
    checks = tp.Checks()
    cfg = case.run()
    bf16 = cfg.precision == "bf16"
    V, T = cfg.vocab_size, cfg.max_seq_len
    print(f"lora: {case.about}; r={R} alpha={ALPHA}, {cfg.steps} steps, {cfg.precision}",
          flush=True)
    base_dir, adapter_dir = make_case(case, tmp, checks)

    # (a) the adapter as PEFT saved it: logits and gradients.
    model = load_adapter(case, base_dir, adapter_dir, checks, trainable=True)
    ids = torch.from_numpy(tp.sample_ids(V, T, 11))
    decoder_logits = lambda m: m(input_ids=ids).logits.numpy()  # noqa: E731
    check_moves(model, decoder_logits, "PEFT adapter", checks)
    tp.check_logits(engine, base_dir, model, V, T, 11, "PEFT adapter", tmp, checks,
                    adapter=adapter_dir)
    lp.check_grads(engine, base_dir, model, 21, "PEFT adapter", tmp, checks, adapter=adapter_dir,
                   rename=lambda g: peft_names(model, g))

    # (b) ten steps: the engine from the adapter directory, PyTorch on the PeftModel. bf16:
    # llama_parity's bf16 bounds (autocast also runs the adapters' products in bf16, which the
    # engine runs in fp32), and the trained adapters are not compared (bf16 rounding moves them
    # further than WEIGHTS_TOL).
    args = ("--adapter", adapter_dir)
    sets = {"train.lora.base_dtype": "bf16"} if bf16 else {}
    train_tokens, val_tokens, run_dir, ours, ours_val = tp.engine_train(engine, cfg, base_dir, tmp,
                                                                        args, None, sets)
    decay, other = tp.decay_split(model)
    checks.expect(not other and all("lora_" in n for n in decay),
                  f"AdamW decays exactly the adapters ({len(decay)} lora_A / lora_B tensors, "
                  f"nothing else trains)")
    want = tp.train_hf(cfg, model, train_tokens, val_tokens)
    tp.compare_training(cfg, ours, ours_val, want, checks,
                        *((lp.BF16_LOSS_TOL, lp.BF16_NORM_TOL) if bf16 else
                          (lp.LOSS_TOL, lp.NORM_TOL)))
    step_dir = last_step_dir(run_dir)
    if not bf16:
        trained = {k: torch.from_numpy(v) for k, v in
                   load_file(os.path.join(step_dir, "adapter_model.safetensors")).items()}
        tp.compare_weights(trained, get_peft_model_state_dict(model), checks)

    # (c) our step directory in PEFT: files, loading, logits.
    ours_model = load_adapter(case, base_dir, step_dir, checks)
    check_files(case, step_dir, ours_model, checks)
    check_moves(ours_model, decoder_logits, "trained adapter", checks)
    tp.check_logits(engine, base_dir, ours_model, V, T, 13, "trained adapter loaded by PEFT", tmp,
                    checks, adapter=step_dir)

    # (d) merge.
    check_merge(engine, case, base_dir, step_dir, ours_model, tmp, checks)

    # (e) resume from step 5 into a fresh out_dir: the same step-10 adapter, byte for byte.
    step5 = os.path.join(run_dir, "checkpoints", f"step_{RESUME_STEP:08d}")
    checks.expect(os.path.isdir(step5), f"the run saved {step5}")
    run2 = os.path.join(tmp, "resumed")
    ours2 = tp.engine_train(engine, cfg, base_dir, tmp, args, run2,
                            dict(sets, **{"train.resume": step5}))[3]
    checks.expect([(r["step"], r["loss"]) for r in ours2]
                  == [(r["step"], r["loss"]) for r in ours[RESUME_STEP:]],
                  f"the resumed run ran the steps after {RESUME_STEP} alone, with the straight "
                  f"run's losses bit for bit ({len(ours2)} step rows)")
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        a, b = os.path.join(step_dir, name), os.path.join(last_step_dir(run2), name)
        same = os.path.exists(b) and filecmp.cmp(a, b, shallow=False)
        checks.expect(same, f"resumed at step {RESUME_STEP}: {name} after {cfg.steps} steps "
                      f"byte-identical to the straight run's")
    return checks.exit_code()


# ---- bert-qa -----------------------------------------------------------------------------------
def check_bert(engine: LoraEngine, case: LoraCase, tmp: str) -> int:
    checks = tp.Checks()
    # The base's vocabulary is the SQuAD tokenizer's (qa train below reads text): bert_parity's
    # train_check does the same.
    squad = os.path.join(tmp, "squad")
    tp.run([sys.executable, os.path.join(tp.HERE, "squad_reference.py"), squad])
    tok_dir = os.path.join(squad, "tokenizer")
    with open(os.path.join(tok_dir, "vocab.txt"), encoding="utf-8") as f:
        bp.V = len(f.read().splitlines())
    print(f"lora: {case.about}; r={R} alpha={ALPHA}, V={bp.V}", flush=True)
    base_dir, adapter_dir = make_case(case, tmp, checks)

    # (a) logits and gradients of the span head's loss (bert_parity's inputs: rows of different
    # lengths, token types; no ignored label, so the loss is transformers' own). The reference
    # calls the adapted BertForQuestionAnswering (get_base_model(): the adapters are injected in
    # its layers), not the PeftModel: PeftModelForQuestionAnswering.forward (peft 0.21.2) drops
    # token_type_ids (and position_ids) on the way to a LoRA model, so every row would read as
    # type 0 (logits 0.79 apart on these inputs; check_peft_drops_token_types).
    model = load_adapter(case, base_dir, adapter_dir, checks, trainable=True)
    idx, types, lengths, starts, ends = bp.inputs(7, no_ignore=True)
    check_peft_drops_token_types(model, idx, types, lengths)
    span_logits = lambda m: bp.hf_forward(  # noqa: E731
        m.get_base_model(), "bert", idx, types, lengths).start_logits.numpy()
    check_moves(model, span_logits, "PEFT adapter", checks)
    ids = os.path.join(tmp, "ids.safetensors")
    bp.save_inputs(ids, idx, types, lengths, starts, ends)
    out, grads = os.path.join(tmp, "logits.st"), os.path.join(tmp, "grads.st")
    engine.logits(base_dir, ids, out, grads, adapter=adapter_dir)
    check_span_logits(load_file(out)["logits"], model, idx, types, lengths, "PEFT adapter", checks)
    m64 = copy.deepcopy(model).to(torch.float64)
    loss = bp.qa_loss(m64.get_base_model(), "bert", idx, types, lengths, starts, ends)
    loss.backward()
    theirs = {n: p.grad.numpy() for n, p in m64.named_parameters() if p.requires_grad}
    lp.compare_grads(load_file(grads), float(loss.item()), peft_names(model, theirs),
                     "PEFT adapter (span head)", checks)

    # (c) an adapter qa train wrote, in PEFT.
    out_dir = os.path.join(tmp, "qa-out")
    engine.qa_train(("--model_name_or_path", base_dir, "--tokenizer_name", tok_dir,
                     "--train_file", os.path.join(squad, "v1.json"), "--max_seq_length", "48",
                     "--doc_stride", "16", "--per_device_train_batch_size", "8",
                     "--learning_rate", "1e-2", "--max_steps", "3", "--seed", "42",
                     "--lora_r", str(R), "--lora_alpha", str(ALPHA),
                     "--lora_target_modules", ",".join(case.targets), "--output_dir", out_dir,
                     "--progress", "quiet", "--set", "placement.groups=1"))
    ours_model = load_adapter(case, base_dir, out_dir, checks)
    check_files(case, out_dir, ours_model, checks)
    check_moves(ours_model, span_logits, "adapter qa train wrote", checks)
    idx, types, lengths, _, _ = bp.inputs(9)
    bp.save_inputs(ids, idx, types, lengths, np.zeros(bp.B, np.int64), np.zeros(bp.B, np.int64))
    engine.logits(base_dir, ids, out, adapter=out_dir)
    check_span_logits(load_file(out)["logits"], ours_model, idx, types, lengths,
                      "qa train's adapter loaded by PEFT", checks)
    return checks.exit_code()


def check_peft_drops_token_types(model: PeftModel, idx, types, lengths) -> None:
    """Says whether PeftModelForQuestionAnswering still drops token_type_ids (peft 0.21.2 does:
    its forward passes neither them nor position_ids to the LoRA model), which is why this file
    runs the adapted model itself; a note, not a check: a peft that passes them is fine too."""
    with torch.no_grad():
        via_peft = bp.hf_forward(model, "bert", idx, types, lengths).start_logits
        direct = bp.hf_forward(model.get_base_model(), "bert", idx, types, lengths).start_logits
    gap = float((via_peft - direct).abs().max())
    print(f"  note: PeftModelForQuestionAnswering.forward {'drops' if gap > 0 else 'passes'} "
          f"token_type_ids (peft {peft.__version__}; start logits {gap:.3e} apart)")


def check_span_logits(ours: np.ndarray, model: PeftModel, idx, types, lengths, what: str,
                      checks: tp.Checks) -> None:
    """engine_logits' start/end logits against the PeftModel's within LOGITS_TOL (rel_diff)."""
    with torch.no_grad():
        r = bp.hf_forward(model.get_base_model(), "bert", idx, types, lengths)
    theirs = np.stack([r.start_logits.numpy(), r.end_logits.numpy()], axis=-1)
    d = tp.rel_diff(ours, theirs) if ours.shape == theirs.shape else float("inf")
    checks.expect(d <= tp.LOGITS_TOL, f"start/end logits of the {what} within {tp.LOGITS_TOL:g} "
                  f"(rel {d:.3e}; shapes {ours.shape}, {theirs.shape})")


# ---- the stand-in engine, for self-check -------------------------------------------------------
class StandIn:
    """What the engine is asked for in the decoder modes, done by peft + transformers and written
    to the engine's files (llama_parity.StandIn's counterpart): logits and gradients as
    engine_logits writes them, train -> RUN/metrics.jsonl and step directories holding PEFT's
    save_pretrained (a resumed run trains again from the start and logs the steps after
    RESUME_STEP), export --merge
    -> merge_and_unload's save_pretrained. `fault` breaks one thing the checks must catch:
      grad-scale     the gradient of layer 1's first lora_B is 1e-4 too large
      stale-adapter  the last step directory holds the adapter the run started from
      merge-drop     the merged export is the base without the adapter
      no-resume      train.resume is ignored: the resumed run starts over"""

    FAULTS = {"grad-scale": "layers.1.", "stale-adapter": "lora_", "merge-drop": "_proj.weight",
              "no-resume": "resumed run"}

    def __init__(self, case: LoraCase, cfg: "ref.RunConfig", fault: Optional[str] = None):
        assert fault is None or fault in self.FAULTS, fault
        self.case, self.cfg, self.fault = case, cfg, fault
        self.checks = tp.Checks()  # its own loads' checks, not the test's

    def _model(self, base: str, adapter: Optional[str], trainable: bool = False):
        model = self.case.load(base, self.checks)
        return PeftModel.from_pretrained(model, adapter, is_trainable=trainable) if adapter \
            else model

    def logits(self, checkpoint: str, ids: str, out: str, grads: Optional[str] = None,
               adapter: Optional[str] = None) -> None:
        model = self._model(checkpoint, adapter, trainable=True).eval()
        inputs = load_file(ids)
        idx = inputs["idx"].astype(np.int64)
        with torch.no_grad():
            save_file({"logits": model(input_ids=torch.from_numpy(idx)).logits.numpy()}, out)
        if grads:
            loss, g = lp.hf_grads(model, idx, inputs["targets"].astype(np.int64))
            g = peft_names(model, g)
            if self.fault == "grad-scale":
                first_b = next(k for k in g if ".layers.1." in k and "lora_B" in k)
                g[first_b] = g[first_b] * (1 + 1e-4)
            save_file(dict(g, loss=np.array([loss], dtype=np.float32)), grads)

    def train(self, config: str, sets: Dict[str, object], args: Tuple[str, ...] = ()) -> None:
        adapter = args[args.index("--adapter") + 1]
        run_dir = str(sets["train.out_dir"])
        model = self._model(str(sets["model.init_from"]), adapter, trainable=True)
        tokens = [ref.decode_tokens(open(str(sets[k]), "rb").read())
                  for k in ("data.train", "data.val")]
        lp.write_metrics(run_dir, self.cfg, tp.train_hf(self.cfg, model, *tokens),
                         RESUME_STEP if "train.resume" in sets and self.fault != "no-resume"
                         else 0)
        if self.fault == "stale-adapter":
            model = self._model(str(sets["model.init_from"]), adapter)
        for step in (RESUME_STEP, self.cfg.steps):  # the steps' contents do not matter here
            model.save_pretrained(os.path.join(run_dir, "checkpoints", f"step_{step:08d}"))
        with open(os.path.join(run_dir, "latest"), "w") as f:
            f.write(f"checkpoints/step_{self.cfg.steps:08d}\n")

    def export_merged(self, base: str, adapter: str, out_dir: str) -> None:
        model = self._model(base, adapter)
        merged = self.case.load(base, self.checks) if self.fault == "merge-drop" else \
            model.merge_and_unload()
        merged.save_pretrained(out_dir, safe_serialization=True)


def self_check(tmp: str) -> int:
    """The decoder modes against the stand-in (every check must pass), then each fault on the
    llama mode (the checks must fail, naming what the fault broke)."""
    problems = []
    for name in ("llama", "gpt2"):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        print(f"==== self-check {name}", flush=True)
        if check_decoder(StandIn(CASES[name], CASES[name].run()), CASES[name], d) != 0:
            problems.append(f"{name}: a check failed against the stand-in")
    for fault, named in StandIn.FAULTS.items():
        d = os.path.join(tmp, "fault-" + fault)
        os.makedirs(d)
        if not lp.fault_caught(fault, named, lambda: check_decoder(
                StandIn(CASES["llama"], CASES["llama"].run(), fault), CASES["llama"], d)):
            problems.append(f"fault {fault}: not caught, or no failure names {named}")
    for p in problems:
        print("SELF-CHECK FAILED:", p)
    print(f"self-check: {'FAILED' if problems else 'ok'} (2 modes, {len(StandIn.FAULTS)} faults)")
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=sorted(CASES) + ["self-check"])
    ap.add_argument("--cli", help="the cputrain-numa binary")
    ap.add_argument("--engine-logits", help="the engine_logits binary")
    ap.add_argument("--grads-tol", type=float, default=lp.GRADS_TOL,
                    help="per-tensor gradient tolerance (tests/reference/CMakeLists.txt: looser "
                    "in sanitizer builds)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    args = ap.parse_args(argv)
    lp.GRADS_TOL = args.grads_tol
    print(f"peft {peft.__version__}, transformers {tp.transformers.__version__}, torch "
          f"{torch.__version__}, {sys.executable}", flush=True)
    if args.mode != "self-check" and not (args.cli and args.engine_logits):
        ap.error("--cli and --engine-logits are required (or the mode self-check)")
    engine = LoraEngine(args.cli, args.engine_logits)
    with tempfile.TemporaryDirectory(prefix="lora_parity.") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        if args.mode == "self-check":
            return self_check(work)
        case = CASES[args.mode]
        if case.precision == "bf16" and tp.refuses_bf16(args.cli):
            return lp.EXIT_SKIP
        if args.mode == "bert-qa":
            return check_bert(engine, case, work)
        return check_decoder(engine, case, work)


if __name__ == "__main__":
    sys.exit(main())
