#!/usr/bin/env python3
"""PEFT LoRA adapters (src/model/peft.h) against the real peft library (CTest).

Run with the peers' environment (scripts/peers-env.sh: torch, transformers, peft). Nothing is
downloaded: each mode makes a tiny model with transformers' own init (seeded, fp32, eager
attention, every 1-D tensor perturbed so a wrong mapping shows), save_pretrained's it as the base,
wraps a copy with peft.get_peft_model(LoraConfig(..., init_lora_weights=False): A and B both
random, so the adapter is far from a no-op) and saves the adapter with save_pretrained. Then:

  merge      `cputrain-numa export --format hf --checkpoint BASE --adapter ADAPTER --merge`
             loads in AutoModelFor... with no missing, unexpected or mismatched tensor and no
             warning, and every tensor equals PeftModel.from_pretrained(BASE, ADAPTER)
             .merge_and_unload()'s within MERGE_TOL (absolute).
  write      peft_roundtrip (peft_roundtrip.cc: LoadAdapter then WriteAdapter) writes the adapter
             again: its adapter_config.json has exactly the keys peft's has, its safetensors
             exactly peft's tensor names and shapes (F32, metadata format pt), and
             PeftModel.from_pretrained(BASE, OURS) holds peft's own adapter weights bit for bit
             and gives the logits of the adapter peft saved within LOGITS_TOL (rel_diff).
  fresh      peft_roundtrip with a seed writes an adapter peft never saw (new random A and B, the
             modules to save moved off the base): PeftModel.from_pretrained loads it, and its
             merge_and_unload() equals our export --merge of it within MERGE_TOL; the unmerged
             PeftModel's logits equal transformers' logits of our merged export within LOGITS_TOL.
  generate   (decoders) `cputrain-numa generate --checkpoint BASE --adapter ADAPTER --tokenizer
             bytes --temperature 0` on a prompt of bytes (V = 256: a byte is a token id) gives the
             tokens PeftModel.generate(do_sample=False) gives; the smallest top-1/top-2 logit gap
             along peft's path is printed (a tie would make greedy decoding ambiguous).
  dtypes     (llama-rslora) the adapter's tensors cast to BF16 and to F16: export --merge of each
             equals peft's merge of the same file within MERGE_TOL.
  refusals   (gpt2) export --adapter without --merge, and an adapter of another model, exit 2
             naming the fix / the file.

Modes: gpt2 (GPT2LMHeadModel, target_modules="all-linear": every Conv1D, which peft saves as the
full path of each layer's module, fan_in_fan_out), llama (LlamaForCausalLM, GQA 4/2 heads, untied
head, all seven linear layers), llama-rslora (the same with use_rslora, lora_dropout 0.05 and the
BF16/F16 files), bert (BertForQuestionAnswering, task_type QUESTION_ANS: query, value and
qa_outputs as a module to save), distilbert (DistilBertForQuestionAnswering: q_lin, v_lin and
the MLP's lin1, lin2; peft has no default target_modules for it).

Exit 0 when every check holds, 1 otherwise (and when torch, transformers or peft cannot be
imported).
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Imports torch and transformers (exit 1 naming the fix when they are missing), sets one thread,
# deterministic algorithms and no hub access.
import transformers_parity as tp  # noqa: E402

try:
    import peft  # noqa: E402
    from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
except ImportError as e:
    sys.exit(f"FAIL: {sys.executable} cannot import peft ({e}): run: bash scripts/install-deps.sh "
             f"--peers")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoModelForQuestionAnswering,  # noqa: E402
                          BertConfig, BertForQuestionAnswering, DistilBertConfig,
                          DistilBertForQuestionAnswering, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM)

MERGE_TOL = 1e-6   # absolute, per element: merged weights (each |W| < 1)
LOGITS_TOL = 1e-5  # tp.rel_diff
V, C, L, NH, MAXT = 256, 32, 2, 4, 64
SEED = 20261201
PROMPT = b"Hello, adapter"
NEW_TOKENS = 16

CASES = {
    "gpt2": dict(kind="gpt2", lora=dict(r=4, lora_alpha=8, lora_dropout=0.1,
                                        target_modules="all-linear", fan_in_fan_out=True,
                                        task_type="CAUSAL_LM")),
    "llama": dict(kind="llama", lora=dict(r=4, lora_alpha=16, task_type="CAUSAL_LM",
                                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                          "gate_proj", "up_proj", "down_proj"])),
    "llama-rslora": dict(kind="llama", dtypes=True,
                         lora=dict(r=8, lora_alpha=4, lora_dropout=0.05, use_rslora=True,
                                   task_type="CAUSAL_LM", target_modules=["q_proj", "v_proj",
                                                                          "down_proj"])),
    "bert": dict(kind="bert", lora=dict(r=4, lora_alpha=8, task_type="QUESTION_ANS",
                                        target_modules=["query", "value"])),
    "distilbert": dict(kind="distilbert", lora=dict(r=4, lora_alpha=8, task_type="QUESTION_ANS",
                                                    target_modules=["q_lin", "v_lin", "lin1",
                                                                    "lin2"])),
}


def make_base(kind: str):
    torch.manual_seed(SEED)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=C, n_layer=L, n_head=NH,
                                           n_positions=MAXT, resid_pdrop=0.0, embd_pdrop=0.0,
                                           attn_pdrop=0.0, attn_implementation="eager"))
    elif kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=48,
                                             num_hidden_layers=L, num_attention_heads=NH,
                                             num_key_value_heads=2, max_position_embeddings=MAXT,
                                             tie_word_embeddings=False,
                                             attn_implementation="eager"))
    elif kind == "distilbert":
        model = DistilBertForQuestionAnswering(DistilBertConfig(
            vocab_size=V, dim=C, hidden_dim=48, n_layers=L, n_heads=NH,
            max_position_embeddings=MAXT, dropout=0.0, attention_dropout=0.0, qa_dropout=0.0,
            attn_implementation="eager"))
    else:
        model = BertForQuestionAnswering(BertConfig(
            vocab_size=V, hidden_size=C, intermediate_size=48, num_hidden_layers=L,
            num_attention_heads=NH, max_position_embeddings=MAXT, type_vocab_size=2,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            attn_implementation="eager"))
    with torch.no_grad():
        g = torch.Generator().manual_seed(SEED + 1)
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


def auto_class(kind: str):
    return AutoModelForCausalLM if kind in ("gpt2", "llama") else AutoModelForQuestionAnswering


def load_base(kind: str, base_dir: str):
    return auto_class(kind).from_pretrained(base_dir, torch_dtype=torch.float32).eval()


def make_adapter(case: dict, base_dir: str, adapter_dir: str) -> None:
    """peft's adapter over a copy of the base, A and B random; a saved module moved off the base
    (peft copies it at init: unchanged it would prove nothing)."""
    torch.manual_seed(SEED + 2)
    pm = get_peft_model(load_base(case["kind"], base_dir),
                        LoraConfig(init_lora_weights=False, **case["lora"]))
    with torch.no_grad():
        g = torch.Generator().manual_seed(SEED + 3)
        for name, p in pm.named_parameters():
            if ".modules_to_save." in name:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    pm.save_pretrained(adapter_dir)


def peft_model(kind: str, base_dir: str, adapter_dir: str):
    return PeftModel.from_pretrained(load_base(kind, base_dir), adapter_dir).eval()


def peft_merged(kind: str, base_dir: str, adapter_dir: str):
    return peft_model(kind, base_dir, adapter_dir).merge_and_unload().eval()


def cli(args, what: str, expect_rc: int = 0):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != expect_rc:
        sys.exit(f"FAIL: {what}: {' '.join(args)} exited {r.returncode}, expected {expect_rc}:\n"
                 f"{r.stdout.decode(errors='replace')}{r.stderr.decode(errors='replace')}")
    return r


def compare_weights(checks: tp.Checks, ours, theirs, what: str) -> None:
    a, b = ours.state_dict(), theirs.state_dict()
    checks.expect(set(a) == set(b), f"{what}: the same tensor names "
                  f"{sorted(set(a) ^ set(b)) or ''}")
    worst, where = 0.0, ""
    for k in sorted(set(a) & set(b)):
        d = float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0
        if d > worst:
            worst, where = d, k
    checks.expect(worst <= MERGE_TOL, f"{what}: every tensor within {MERGE_TOL:g} of peft's "
                  f"merge_and_unload() (max |diff| {worst:.3g} at {where or '-'})")


def inputs(kind: str):
    ids = torch.tensor(tp.sample_ids(V, 24, SEED + 4, B=2), dtype=torch.long)
    if kind in ("gpt2", "llama"):
        return dict(input_ids=ids)
    if kind == "distilbert":
        return dict(input_ids=ids, attention_mask=torch.ones_like(ids))
    types = torch.zeros_like(ids)
    types[:, 12:] = 1
    return dict(input_ids=ids, token_type_ids=types, attention_mask=torch.ones_like(ids))


def outputs(model, kind: str) -> np.ndarray:
    # A PeftModel runs as the model it wraps, LoRA layers active: peft 0.21.2's
    # PeftModelForQuestionAnswering.forward drops token_type_ids (it never passes them on).
    if isinstance(model, PeftModel):
        model = model.get_base_model()
    with torch.no_grad():
        out = model(**inputs(kind))
    if kind not in ("gpt2", "llama"):
        return torch.stack([out.start_logits, out.end_logits]).numpy()
    return out.logits.numpy()


def file_tensors(path: str) -> dict:
    with safe_open(path, "pt") as f:
        return {k: (f.get_slice(k).get_dtype(), list(f.get_slice(k).get_shape())) for k in f.keys()}


def check_merge(checks, cli_path, kind, base_dir, adapter_dir, out_dir, what) -> None:
    cli([cli_path, "export", "--format", "hf", "--checkpoint", base_dir, "--adapter", adapter_dir,
         "--merge", "-o", out_dir], what)
    ours = tp.load_hf(out_dir, checks, cls=auto_class(kind))
    compare_weights(checks, ours, peft_merged(kind, base_dir, adapter_dir), what)
    # Not vacuous: the adapter moves the weights far beyond the tolerance.
    base = load_base(kind, base_dir).state_dict()
    moved = max(float((v - base[k]).abs().max()) for k, v in ours.state_dict().items())
    checks.expect(moved > 1e-2, f"{what}: the merge moves the base's weights (max |merged - base| "
                  f"{moved:.3g})")


def check_write(checks, tool, kind, base_dir, adapter_dir, ours_dir) -> None:
    cli([tool, base_dir, adapter_dir, ours_dir], "peft_roundtrip")
    theirs_cfg = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    ours_cfg = json.load(open(os.path.join(ours_dir, "adapter_config.json")))
    checks.expect(set(ours_cfg) == set(theirs_cfg), "write: adapter_config.json has peft's keys "
                  f"{sorted(set(ours_cfg) ^ set(theirs_cfg)) or ''}")
    same = ["peft_type", "r", "lora_alpha", "lora_dropout", "task_type", "fan_in_fan_out",
            "use_rslora", "bias", "use_dora", "modules_to_save", "inference_mode"]
    if not isinstance(theirs_cfg["target_modules"], str) and all(
            "." not in t for t in theirs_cfg["target_modules"]):
        same.append("target_modules")  # peft's order is a set's: compared sorted
    differ = [k for k in same if (sorted(ours_cfg[k]) if k == "target_modules" else ours_cfg[k])
              != (sorted(theirs_cfg[k]) if k == "target_modules" else theirs_cfg[k])]
    checks.expect(not differ, f"write: {', '.join(same)} as peft wrote them "
                  f"{[(k, ours_cfg[k], theirs_cfg[k]) for k in differ] or ''}")
    ours_t = file_tensors(os.path.join(ours_dir, "adapter_model.safetensors"))
    theirs_t = file_tensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    checks.expect(ours_t == theirs_t, f"write: the {len(theirs_t)} tensors' names, dtypes and "
                  "shapes are peft's" + ("" if ours_t == theirs_t else
                                         f" {sorted(set(ours_t.items()) ^ set(theirs_t.items()))}"))
    with safe_open(os.path.join(ours_dir, "adapter_model.safetensors"), "pt") as f:
        checks.expect(f.metadata() == {"format": "pt"}, f"write: metadata {f.metadata()}")
    theirs, ours = peft_model(kind, base_dir, adapter_dir), peft_model(kind, base_dir, ours_dir)
    a, b = theirs.state_dict(), ours.state_dict()
    adapter_keys = [k for k in a if "lora_" in k or "modules_to_save" in k]
    differ = [k for k in adapter_keys if not torch.equal(a[k], b[k])]
    checks.expect(adapter_keys and not differ, f"write: PeftModel.from_pretrained(ours) holds "
                  f"peft's {len(adapter_keys)} adapter tensors bit for bit {differ[:3] or ''}")
    d = tp.rel_diff(outputs(ours, kind), outputs(theirs, kind))
    checks.expect(d <= LOGITS_TOL, f"write: logits of PeftModel(ours) vs PeftModel(peft's) "
                  f"rel_diff {d:.3g} <= {LOGITS_TOL:g}")


def check_fresh(checks, cli_path, tool, kind, base_dir, adapter_dir, tmp) -> None:
    fresh, merged = os.path.join(tmp, "fresh"), os.path.join(tmp, "fresh_merged")
    cli([tool, base_dir, adapter_dir, fresh, "77"], "peft_roundtrip (fresh)")
    check_merge(checks, cli_path, kind, base_dir, fresh, merged, "fresh: export --merge")
    ours = tp.load_hf(merged, checks, cls=auto_class(kind))
    d = tp.rel_diff(outputs(ours, kind), outputs(peft_model(kind, base_dir, fresh), kind))
    checks.expect(d <= LOGITS_TOL, f"fresh: logits of our merged export vs the unmerged "
                  f"PeftModel of our adapter rel_diff {d:.3g} <= {LOGITS_TOL:g}")


def check_generate(checks, cli_path, kind, base_dir, adapter_dir) -> None:
    r = cli([cli_path, "generate", "--checkpoint", base_dir, "--adapter", adapter_dir,
             "--tokenizer", "bytes", "--temperature", "0", "--tokens", str(NEW_TOKENS),
             "--prompt", PROMPT.decode()], "generate --adapter")
    out = r.stdout
    ours = list(out[len(PROMPT):-1]) if out.startswith(PROMPT) and out.endswith(b"\n") else None
    model = peft_model(kind, base_dir, adapter_dir)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    ids = torch.tensor([list(PROMPT)], dtype=torch.long)
    with torch.no_grad():
        g = model.generate(input_ids=ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                           output_scores=True, return_dict_in_generate=True)
    theirs = g.sequences[0, len(PROMPT):].tolist()
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in g.scores]
    checks.expect(ours == theirs, f"generate --adapter: {NEW_TOKENS} greedy tokens as "
                  f"PeftModel.generate's (smallest top-2 logit gap on peft's path {min(gaps):.3g})"
                  + ("" if ours == theirs else f": ours {ours}, peft's {theirs}"))


def check_dtypes(checks, cli_path, kind, base_dir, adapter_dir, tmp) -> None:
    for dtype, name in [(torch.bfloat16, "BF16"), (torch.float16, "F16")]:
        d = os.path.join(tmp, f"adapter_{name}")
        os.makedirs(d)
        tensors = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
        save_file({k: v.to(dtype) for k, v in tensors.items()},
                  os.path.join(d, "adapter_model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(adapter_dir, "adapter_config.json")) as src, \
                open(os.path.join(d, "adapter_config.json"), "w") as dst:
            dst.write(src.read())
        check_merge(checks, cli_path, kind, base_dir, d, os.path.join(tmp, f"merged_{name}"),
                    f"{name} adapter: export --merge")


def check_refusals(checks, cli_path, base_dir, adapter_dir, tmp) -> None:
    r = cli([cli_path, "export", "--format", "hf", "--checkpoint", base_dir, "--adapter",
             adapter_dir, "-o", os.path.join(tmp, "x")], "export --adapter without --merge", 2)
    err = r.stderr.decode(errors="replace")
    checks.expect("--merge" in err, f"export --adapter without --merge: exit 2 naming --merge "
                  f"({err.strip().splitlines()[0] if err.strip() else ''})")
    other = os.path.join(tmp, "bert_adapter")
    make_adapter(CASES["bert"], save_base("bert", tmp), other)
    r = cli([cli_path, "generate", "--checkpoint", base_dir, "--adapter", other, "--tokenizer",
             "bytes", "--tokens", "2"], "generate with a BERT adapter over GPT-2", 2)
    err = r.stderr.decode(errors="replace")
    checks.expect("adapter_config.json" in err and "QUESTION_ANS" in err,
                  f"an adapter of another model: exit 2 naming the file "
                  f"({err.strip().splitlines()[0] if err.strip() else ''})")


def save_base(kind: str, tmp: str) -> str:
    d = os.path.join(tmp, f"base_{kind}")
    make_base(kind).save_pretrained(d, safe_serialization=True)
    return d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=sorted(CASES))
    ap.add_argument("--cli", required=True, help="the cputrain-numa binary")
    ap.add_argument("--roundtrip", required=True, help="the peft_roundtrip binary")
    args = ap.parse_args(argv)
    case = CASES[args.mode]
    kind = case["kind"]
    checks = tp.Checks()
    print(f"peft {peft.__version__}: mode {args.mode}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = save_base(kind, tmp)
        adapter_dir = os.path.join(tmp, "adapter")
        make_adapter(case, base_dir, adapter_dir)
        check_merge(checks, args.cli, kind, base_dir, adapter_dir, os.path.join(tmp, "merged"),
                    "export --adapter --merge")
        check_write(checks, args.roundtrip, kind, base_dir, adapter_dir, os.path.join(tmp, "ours"))
        check_fresh(checks, args.cli, args.roundtrip, kind, base_dir, adapter_dir, tmp)
        if kind in ("gpt2", "llama"):
            check_generate(checks, args.cli, kind, base_dir, adapter_dir)
        if case.get("dtypes"):
            check_dtypes(checks, args.cli, kind, base_dir, adapter_dir, tmp)
        if args.mode == "gpt2":
            check_refusals(checks, args.cli, base_dir, adapter_dir, tmp)
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
