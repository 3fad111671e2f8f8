#!/usr/bin/env python3
"""The decoder families Qwen2, Qwen3, Mistral, Gemma 3 (text) and Phi-3 against transformers (CTest).

Run with the peers' environment (scripts/peers-env.sh), as llama_parity.py, whose checks these are
(transformers_parity's Engine, load_hf, check_logits, train_hf, engine_train, compare_training,
compare_weights; llama_parity's check_grads, compare_grads, check_export_files; lora_parity's
PEFT pieces). Nothing is downloaded.

Every mode makes one family's model with transformers' own init (seeded; vocab 256, hidden 64,
intermediate 160, 3 layers, 4 heads over 2 KV heads, max_position_embeddings 64, eager attention,
fp32), with the family's quirks switched on where they can be, so that each is exercised at
these sizes (CASES says which: sliding windows of 8 positions, shorter than the T = 32 it trains
and the T = 64 it is checked at; local and global layers; q/k norms; biases; head_dim apart from
hidden/heads), perturbs every 1-D tensor (norm weights, biases; Gemma's zero-init norms too), saves
it with save_pretrained, and checks:

  1. import   the engine's logits from the directory within 1e-5 (rel_diff) of a float64 copy
              of the model's (every logits check here: check_logits' exact); the loss and every
              gradient (engine_logits ... GRADS) against transformers' float64 autograd, each
              tensor within 1e-5 relative.
  2. train    `cputrain-numa train` from the directory for 10 AdamW steps against PyTorch on the
              same model (llama_parity's run: B=4, T=32, 2 micro-batches, warmup + cosine,
              clipping, weight decay on the 2-D weights): losses and validation losses 1e-5, grad
              norms 1e-4 (bf16 modes: llama_parity's bf16 bounds against torch.autocast).
  3. export   `export --format hf` of the run: save_pretrained's tensor names, F32, HF shapes;
              from_pretrained with no missing, unexpected or mismatched tensor and no warning; the
              original's config values (CONFIG_KEYS); logits equal to the engine's from the run
              within 1e-5; the weights PyTorch's trained ones within WEIGHTS_TOL (fp32).
  4. generate `cputrain-numa generate --temperature 0` from the run directory (KV cache, windows
              included: the prompt and the new tokens run past the window) gives the tokens the
              exported model's generate(do_sample=False) gives.
  5. lora     (fp32 modes) a PEFT adapter of the model (r 4, alpha 6, init_lora_weights False:
              B non-zero), targets PEFT's default for the model type (Phi-3, which PEFT has none
              for: qkv_proj, o_proj, gate_up_proj, down_proj): engine_logits --adapter's logits
              and every adapter gradient against PEFT's float64 autograd (1e-5), `train --adapter`
              for 10 steps against the PeftModel trained by PyTorch (1e-5 / 1e-4), and our last
              step directory loaded by PeftModel.from_pretrained (no missing or unexpected key)
              with the engine's logits.

Tolerances, and float64. The references are float64: transformers' autograd (1, 5), its
training loop (2, 5) and the logits (1, 3, 5) run on a float64 copy of the model. Where twice
transformers' own fp32 distance from float64 is above the bounds above (Qwen3's q_norm
gradients, 2.8e-5: a sum over heads and positions that cancels to 1e-5 of its terms; Gemma 3's
training, 1.3e-4 in grad norms: its post-norms renormalize small outputs; Gemma 3's logits,
4e-6 to 9.3e-6, where one CI run found ours 1.2e-5 from fp32 transformers), the bound is that
twice, measured in the same run and printed: the engine is as close to exact arithmetic as
transformers itself, within 2x, and within the plain bounds wherever transformers is.

A mode NAME-bf16 trains with train.precision bf16 against torch.autocast (exit 77, a CTest skip,
where the engine's `topo --json` says bf16 cannot run: no AVX512_BF16 or AMX, or the kernel
CPUTRAIN_BF16_KERNEL forces cannot run here), within llama_parity's bf16 bounds (2e-3 losses,
5e-2 grad norms), or twice autocast's own distance from the fp32 run where bf16 moves transformers further (Gemma
3's test model: autocast is 7e-3 from fp32 in losses and 19% in one step's grad norm, the engine
8e-3 and 7%); its import, export and generate checks are fp32 as above.

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
import lora_parity as lo  # noqa: E402  (peft)

import argparse  # noqa: E402
import copy  # noqa: E402
import dataclasses  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Callable, Dict, List, Optional, Tuple  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402

try:
    from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, MistralConfig,
                              MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
except ImportError as e:
    sys.exit(f"FAIL: transformers {transformers.__version__} in {sys.executable} lacks a family "
             f"({e}); run: bash scripts/install-deps.sh --peers")

SEED = 20251210          # torch.manual_seed before the model
ADAPTER_SEED = 20251211  # before get_peft_model
V, T = 256, 64           # the bytes tokenizer's vocabulary (generate prints bytes); maxT
RUN = dataclasses.replace(lp.LLAMA_RUN, name="family", vocab_size=V, layers=3)
PROMPT = b"The quick brown fox "  # 20 positions, then NEW_TOKENS: 44 < maxT, 5 windows of 8
NEW_TOKENS = 24
WINDOW = 8
COMMON = dict(vocab_size=V, hidden_size=RUN.channels, intermediate_size=160,
              num_hidden_layers=RUN.layers, num_attention_heads=RUN.heads, num_key_value_heads=2,
              max_position_embeddings=RUN.max_seq_len, attn_implementation="eager",
              torch_dtype=torch.float32)

# The config keys the export must carry over (as transformers reads them, defaults filled in),
# beside each family's own.
CONFIG_KEYS = ["model_type", "vocab_size", "hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
               "tie_word_embeddings", "sliding_window", "layer_types"]


@dataclasses.dataclass(frozen=True)
class FamilyCase:
    about: str
    cls: type
    config: Callable[[], transformers.PretrainedConfig]
    keys: Tuple[str, ...] = ()  # config keys of the family's own that the export must keep
    lora_targets: Optional[Tuple[str, ...]] = None  # None: PEFT's default for the model type
    precision: str = "fp32"

    def run(self) -> "tp.ref.RunConfig":
        return dataclasses.replace(RUN, precision=self.precision)


def qwen2() -> Qwen2Config:
    return Qwen2Config(**COMMON, tie_word_embeddings=True, use_sliding_window=True,
                       sliding_window=WINDOW, max_window_layers=1, rope_theta=1e6,
                       rms_norm_eps=1e-6)


def qwen3() -> Qwen3Config:
    return Qwen3Config(**COMMON, head_dim=32, tie_word_embeddings=False, attention_bias=True,
                       use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2)


def mistral() -> MistralConfig:
    return MistralConfig(**COMMON, sliding_window=WINDOW, tie_word_embeddings=False,
                         rope_theta=1e6)


def gemma3() -> Gemma3TextConfig:
    return Gemma3TextConfig(**COMMON, head_dim=32, query_pre_attn_scalar=24,
                            sliding_window=WINDOW,
                            layer_types=["sliding_attention", "full_attention",
                                         "sliding_attention"],
                            rope_theta=1e6, rope_local_base_freq=1e4,
                            rope_scaling={"rope_type": "linear", "factor": 2.0}, pad_token_id=0)


def phi3() -> Phi3Config:
    return Phi3Config(**COMMON, original_max_position_embeddings=RUN.max_seq_len,
                      sliding_window=WINDOW, pad_token_id=V - 1, tie_word_embeddings=False)


CASES: Dict[str, FamilyCase] = {
    "qwen2": FamilyCase("Qwen2: q/k/v biases (o without), tied, rope_theta 1e6, a window of 8 on "
                        "layers 1-2 (use_sliding_window, max_window_layers 1)",
                        Qwen2ForCausalLM, qwen2, ("use_sliding_window", "max_window_layers")),
    "qwen3": FamilyCase("Qwen3: head_dim 32 (hidden/heads is 16), q/k RMSNorm per head, q/k/v/o "
                        "biases, untied, a window of 8 on layer 2",
                        Qwen3ForCausalLM, qwen3, ("head_dim", "attention_bias",
                                                  "use_sliding_window", "max_window_layers")),
    "mistral": FamilyCase("Mistral: sliding_window 8 on every layer, untied",
                          MistralForCausalLM, mistral),
    "gemma3": FamilyCase("Gemma 3 (Gemma3ForCausalLM): local (window 8, rope_local_base_freq "
                         "1e4) and global (rope_theta 1e6, linear rope scaling 2) layers, "
                         "head_dim 32, query_pre_attn_scalar 24, q/k norms, (1 + w) RMSNorms "
                         "before and after attention and MLP, GeGLU (tanh), sqrt(hidden) "
                         "embedding scale, tied, pad token 0 (no embedding gradient)",
                         Gemma3ForCausalLM, gemma3, ("head_dim", "query_pre_attn_scalar",
                                                     "rope_local_base_freq", "pad_token_id",
                                                     "hidden_activation")),
    "phi3": FamilyCase("Phi-3: fused qkv_proj and gate_up_proj, sliding_window 8, untied, pad "
                       "token 255 (no embedding gradient)",
                       Phi3ForCausalLM, phi3, ("pad_token_id", "partial_rotary_factor"),
                       lora_targets=("qkv_proj", "o_proj", "gate_up_proj", "down_proj")),
}
for _name in list(CASES):
    CASES[_name + "-bf16"] = dataclasses.replace(
        CASES[_name], about=CASES[_name].about + "; train.precision bf16 against torch.autocast",
        precision="bf16")


def make_model(case: FamilyCase):
    torch.manual_seed(SEED)
    model = case.cls(case.config())
    tp.perturb_1d(model)
    return model


def load(case: FamilyCase, d: str, checks: tp.Checks):
    return tp.load_hf(d, checks, case.cls, attn_implementation="eager")


def check_config(case: FamilyCase, exported, original, checks: tp.Checks) -> None:
    """The exported config.json, as transformers reads it, has the original's values, and a tied
    head is tied after loading."""
    keys = CONFIG_KEYS + list(case.keys)
    diff = {k: (getattr(exported.config, k, None), getattr(original.config, k, None))
            for k in keys
            if getattr(exported.config, k, None) != getattr(original.config, k, None)}
    checks.expect(not diff, f"export's config.json reads as the original's "
                  f"{'(ours, original): ' + str(diff) if diff else ''}")
    checks.expect(type(exported) is case.cls, f"export loads as {case.cls.__name__} "
                  f"({type(exported).__name__})")
    if original.config.tie_word_embeddings:
        checks.expect(exported.lm_head.weight.data_ptr()
                      == exported.model.embed_tokens.weight.data_ptr(),
                      "lm_head is tied to embed_tokens after loading the export")


@dataclasses.dataclass
class Reference:
    """The reference run (reference_training) and the bounds it sets."""
    want: dict              # train_hf's record of the float64 run (autocast's in bf16)
    model: torch.nn.Module  # that run's trained model
    loss_tol: float
    norm_tol: float
    weights_tol: float


def weights_distance(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    """transformers_parity.compare_weights' measure: the worst tensor's max |a - b| / max |b|."""
    return max(float((a[k].double() - b[k].double()).abs().max() / b[k].double().abs().max())
               for k in b if b[k].is_floating_point() and b[k].abs().max() > 0)


def reference_training(cfg, model, train_tokens, val_tokens,
                       optimizer: "tp.ref.Optimizer" = tp.ref.ADAMW,
                       unbounded: Tuple[str, ...] = ()) -> Reference:
    """train_hf in float64 on a copy of `model` (the reference), and in fp32 on another copy
    (transformers as users run it), with the bounds on losses, grad norms and trained weights: the
    plain ones, or twice the fp32 run's distance from the float64 one where that is larger
    (module docstring). bf16: autocast's run, with llama_parity's bf16 bounds or twice autocast's
    own distance from fp32's. Every run steps with `optimizer` (AdamW; optim_parity.py's
    others). The tensors named in `unbounded` do not set the weights bound (the caller compares
    them on their own: optim_parity.py's, whose values are partly rounding noise)."""
    if cfg.precision == "bf16":
        # autocast's run, and its distance from fp32's: where bf16 rounding moves transformers
        # itself further than the bf16 bounds (Gemma 3 here: 19% in one step's grad norm), the
        # bound is twice that distance.
        ref_model = copy.deepcopy(model)
        want = tp.train_hf(cfg, ref_model, train_tokens, val_tokens, optimizer)
        fp32 = tp.train_hf(dataclasses.replace(cfg, precision="fp32"), copy.deepcopy(model),
                           train_tokens, val_tokens, optimizer)
        own_loss = max(abs(a - b) / abs(b) for a, b in zip(want["steps"], fp32["steps"]))
        own_norm = max(abs(a - b) / abs(b) for a, b in zip(want["grad_norms"],
                                                           fp32["grad_norms"]))
        r = Reference(want, ref_model, max(lp.BF16_LOSS_TOL, 2 * own_loss),
                      max(lp.BF16_NORM_TOL, 2 * own_norm), tp.WEIGHTS_TOL)
        print(f"  autocast's bf16 training is {own_loss:.2e} (losses), {own_norm:.2e} (grad norms) "
              f"from fp32's: bounds {r.loss_tol:.3g}, {r.norm_tol:.3g}", flush=True)
        return r
    m64, m32 = copy.deepcopy(model).double(), copy.deepcopy(model)
    exact = tp.train_hf(cfg, m64, train_tokens, val_tokens, optimizer)
    fp32 = tp.train_hf(cfg, m32, train_tokens, val_tokens, optimizer)

    def worst(key):
        return max(abs(a - b) / abs(b) for a, b in zip(fp32[key], exact[key]))

    val = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(fp32["val"],
                                                                            exact["val"]))
    own_loss, own_norm = max(worst("steps"), val), worst("grad_norms")
    own_weights = weights_distance(m32.state_dict(),
                                   {k: v for k, v in m64.state_dict().items()
                                    if k not in unbounded})
    r = Reference(exact, m64, max(lp.LOSS_TOL, 2 * own_loss), max(lp.NORM_TOL, 2 * own_norm),
                  max(tp.WEIGHTS_TOL, 2 * own_weights))
    print(f"  transformers' own fp32 training is {own_loss:.2e} (losses), {own_norm:.2e} (grad "
          f"norms), {own_weights:.2e} (weights) from float64's: bounds {r.loss_tol:.3g}, "
          f"{r.norm_tol:.3g}, {r.weights_tol:.3g}", flush=True)
    return r


def check_generate(engine, run_dir: str, model, checks: tp.Checks) -> None:
    """generate --temperature 0 from the run directory against model.generate(do_sample=False)
    on the same prompt (bytes are token ids: V = 256): token for token."""
    t0 = time.time()
    r = subprocess.run([engine.cli, "generate", "--checkpoint", run_dir, "--tokenizer", "bytes",
                        "--temperature", "0", "--tokens", str(NEW_TOKENS), "--prompt",
                        PROMPT.decode()], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    checks.expect(r.returncode == 0, f"generate exited {r.returncode} {r.stderr.decode()[-400:]}")
    print(f"  ran cputrain-numa generate in {time.time() - t0:.1f} s", flush=True)
    out = r.stdout
    ours = list(out[len(PROMPT):-1]) if out.startswith(PROMPT) and out.endswith(b"\n") else None
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    ids = torch.tensor([list(PROMPT)], dtype=torch.long)
    with torch.no_grad():
        g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                           max_new_tokens=NEW_TOKENS, do_sample=False, output_scores=True,
                           return_dict_in_generate=True)
    theirs = g.sequences[0, len(PROMPT):].tolist()
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in g.scores]
    checks.expect(ours == theirs, f"generate: {NEW_TOKENS} greedy tokens (KV cache, "
                  f"{len(PROMPT) + NEW_TOKENS} positions) as transformers' generate (smallest "
                  f"top-2 logit gap on its path {min(gaps):.3g})"
                  + ("" if ours == theirs else f": ours {ours}, transformers' {theirs}"))


def check_lora(engine, case: FamilyCase, hf_dir: str, tmp: str, checks: tp.Checks) -> None:
    """A PEFT adapter of the model: logits and gradients, 10 steps, our adapter loaded by PEFT."""
    cfg = case.run()
    lcase = lo.LoraCase(case.about, lambda: None, lambda d, c: load(case, d, c),
                        case.lora_targets or ())
    adapter_dir = os.path.join(tmp, "adapter")
    torch.manual_seed(ADAPTER_SEED)
    peft_model = get_peft_model(load(case, hf_dir, checks), LoraConfig(
        r=lo.R, lora_alpha=lo.ALPHA, lora_dropout=0.0, init_lora_weights=False,
        target_modules=list(case.lora_targets) if case.lora_targets else None))
    targets = sorted(peft_model.peft_config["default"].target_modules)
    print(f"  LoRA targets (PEFT's for {case.cls.__name__}): {targets}", flush=True)
    peft_model.save_pretrained(adapter_dir, safe_serialization=True)
    model = lo.load_adapter(lcase, hf_dir, adapter_dir, checks, trainable=True)
    ids = torch.from_numpy(tp.sample_ids(V, T, 41))
    lo.check_moves(model, lambda m: m(input_ids=ids).logits.numpy(), "PEFT adapter", checks)
    tp.check_logits(engine, hf_dir, model, V, T, 41, "PEFT adapter", tmp, checks,
                    adapter=adapter_dir, exact=True)
    lp.check_grads(engine, hf_dir, model, 43, "PEFT adapter", tmp, checks, adapter=adapter_dir,
                   rename=lambda g: lo.peft_names(model, g), V=V, T=T)
    run_dir = os.path.join(tmp, "lora-run")
    train_tokens, val_tokens, run_dir, ours, ours_val = tp.engine_train(
        engine, cfg, hf_dir, tmp, ("--adapter", adapter_dir), run_dir)
    r = reference_training(cfg, model, train_tokens, val_tokens)
    tp.compare_training(cfg, ours, ours_val, r.want, checks, r.loss_tol, r.norm_tol)
    step_dir = lo.last_step_dir(run_dir)
    ours_model = lo.load_adapter(lcase, hf_dir, step_dir, checks)
    tp.check_logits(engine, hf_dir, ours_model, V, T, 47, "trained adapter loaded by PEFT", tmp,
                    checks, adapter=step_dir, exact=True)


def check_case(engine, case: FamilyCase, tmp: str) -> int:
    checks = tp.Checks()
    cfg = case.run()
    print(f"{case.cls.__name__}: {case.about}; {cfg.steps} steps, {cfg.precision}", flush=True)
    hf_dir = os.path.join(tmp, "hf")
    make_model(case).save_pretrained(hf_dir, safe_serialization=True)

    # 1. import
    model = load(case, hf_dir, checks)
    decay, other = tp.decay_split(model)
    checks.expect(all(model.get_parameter(n).dim() >= 2 for n in decay) and
                  all(model.get_parameter(n).dim() == 1 for n in other),
                  f"AdamW decays the {len(decay)} 2-D weights, not the {len(other)} norm weights "
                  f"and biases")
    norm0 = model.model.norm.weight.detach().clone()
    tp.check_logits(engine, hf_dir, model, V, T, 11, "imported model", tmp, checks, exact=True)
    lp.check_grads(engine, hf_dir, model, 21, "imported model", tmp, checks, V=V, T=T)

    # 2. train
    train_tokens, val_tokens, run_dir, ours, ours_val = tp.engine_train(engine, cfg, hf_dir, tmp)
    r = reference_training(cfg, model, train_tokens, val_tokens)
    tp.compare_training(cfg, ours, ours_val, r.want, checks, r.loss_tol, r.norm_tol)

    # 3. export
    export_dir = os.path.join(tmp, "trained-hf")
    engine.export(run_dir, export_dir)
    lp.check_export_files(export_dir, hf_dir, checks)
    trained = load(case, export_dir, checks)
    check_config(case, trained, model, checks)
    moved = (trained.model.norm.weight.detach() - norm0).abs().max().item()
    checks.expect(moved > 1e-3, f"the exported model is trained (model.norm.weight moved "
                  f"{moved:.2e})")
    tp.check_logits(engine, run_dir, trained, V, T, 13, "export (against the run's own "
                    "checkpoint)", tmp, checks, exact=True)
    if cfg.precision == "fp32":
        tp.compare_weights(trained.state_dict(), r.model.state_dict(), checks, r.weights_tol)

    # 4. generate
    check_generate(engine, run_dir, trained, checks)

    # 5. LoRA through peft
    if cfg.precision == "fp32":
        check_lora(engine, case, hf_dir, tmp, checks)
    return checks.exit_code()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=sorted(CASES))
    ap.add_argument("--cli", required=True, help="the cputrain-numa binary")
    ap.add_argument("--engine-logits", required=True, help="the engine_logits binary")
    ap.add_argument("--grads-tol", type=float, default=lp.GRADS_TOL,
                    help=f"per-tensor gradient tolerance (default {lp.GRADS_TOL:g}; sanitizer "
                    "builds pass a looser one: tests/reference/CMakeLists.txt)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    args = ap.parse_args(argv)
    lp.GRADS_TOL = args.grads_tol
    case = CASES[args.mode]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{sys.executable}", flush=True)
    if case.precision == "bf16" and tp.refuses_bf16(args.cli):
        return lp.EXIT_SKIP
    with tempfile.TemporaryDirectory(prefix="family_parity.") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        return check_case(tp.Engine(args.cli, args.engine_logits), case, work)


if __name__ == "__main__":
    sys.exit(main())
