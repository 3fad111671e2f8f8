#!/usr/bin/env python3
"""Our Llama (import, training, gradients, export) against transformers' LlamaForCausalLM (CTest).

Run with the peers' environment (scripts/peers-env.sh), as transformers_parity.py, whose checks
these are (the same functions: Engine, load_hf, check_logits, train_hf, engine_train,
compare_training, compare_weights); this file adds what is Llama's: the models, the gradient
dump, the export's file and config checks. Nothing is downloaded.

Every mode (CASES) makes a LlamaForCausalLM(LlamaConfig(vocab 300, hidden 64, intermediate 160,
2 layers, 4 heads, max_position_embeddings 64, attn_implementation "eager", fp32)) with
transformers' own init, seeded, every 1-D tensor (RMSNorm weights, biases) perturbed so a wrong
mapping shows at step 0, saves it with save_pretrained(safe_serialization=True), and checks:

  1. import   the engine's logits from the directory (engine_logits) against transformers', within
              1e-5 (rel_diff); the engine's gradients there (engine_logits ... GRADS: d(mean
              cross-entropy)/d(param) per HF tensor, and the loss) against transformers' autograd,
              every tensor within 1e-5 relative (|ours - torch| / |torch|, norms over the tensor).
  2. train    `cputrain-numa train` from the directory (model.init_from) for 10 AdamW steps, and
              PyTorch the same model with the same rules (transformers_parity.train_hf:
              gpt2_reference.train_loop, weight decay on the 2-D weights only: embed_tokens, the
              q/k/v/o/gate/up/down projection weights, lm_head): per-step losses and validation
              losses within 1e-5 relative, pre-clip gradient norms within 1e-4, lrs within 1e-12.
  3. export   `cputrain-numa export --format hf` of the run: the tensor names of save_pretrained's
              file (lm_head.weight only when untied), all F32; LlamaForCausalLM.from_pretrained
              loads it with no missing, unexpected or mismatched tensor and no warning, and reads
              the original's config (shape, eps, rope, tying, bias); its logits equal the engine's
              from the run directory within 1e-5; its weights PyTorch's trained ones within
              WEIGHTS_TOL of each tensor's largest value (transformers_parity.py says why looser);
              and the engine's gradients at the trained weights transformers' within 1e-5.

The modes differ in the model (or the precision): import-train (tied, 2 KV heads: GQA), untied
(untied head, attention biases, rms_norm_eps 1e-6), rope-llama3 (rope_theta 500000 with llama3
rope scaling, original_max_position_embeddings 16, so it matters at T = 64), mqa (1 KV head),
mha (4 KV heads = heads) and bf16: train.precision bf16 against torch.autocast("cpu", bfloat16)
with fp32 master weights, losses within 2e-3 and grad norms within 5e-2 (tests/train_test.cc's
bounds for the GPT-2 bf16 fixture); its import, export and gradient checks are fp32 as above, and
the trained weights are not compared (bf16 rounding moves them further than WEIGHTS_TOL). The bf16
products run on the kernel the engine picks (AMX, else VDPBF16PS) or CPUTRAIN_BF16_KERNEL forces
(tests/reference/CMakeLists.txt runs the bf16 modes once per kernel); where the trainer refuses
bf16 (`topo --json` says: no AVX512_BF16 or AMX, or a forced kernel that cannot run here) the
bf16 mode exits 77 (a CTest skip).

--self-check runs a mode with a stand-in for the engine (StandIn: transformers itself, writing the
engine's files: metrics.jsonl, the logits and gradient safetensors, the export) so every
PyTorch-side piece runs without the engine; every check must pass. The mode `self-check` runs
every mode so, then three broken stand-ins whose faults the checks must catch and name.

Exit 0 when every check holds, 1 otherwise (and when torch or transformers cannot be imported),
77 as above.
"""
import copy
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bf16_gate  # noqa: E402

if __name__ == "__main__":
    bf16_gate.skip_unless_bf16()  # a bf16 mode this CPU cannot run: skip before torch loads
# Imports torch and transformers (exit 1 naming the fix when they are missing), sets one thread,
# deterministic algorithms and no hub access.
import transformers_parity as tp  # noqa: E402

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import contextlib  # noqa: E402
import tempfile  # noqa: E402
from typing import Dict, List, Optional, Tuple  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    sys.exit(f"FAIL: transformers {transformers.__version__} in {sys.executable} has no Llama "
             f"({e}); run: bash scripts/install-deps.sh --peers")

ref = tp.ref

GRADS_TOL = 1e-5        # per tensor, |ours - torch| / |torch| (2-norms over the tensor), and loss
LOSS_TOL = 1e-5         # relative: per-step and validation losses (fp32)
NORM_TOL = 1e-4         # relative: pre-clip gradient norms (fp32)
BF16_LOSS_TOL = 2e-3    # tests/train_test.cc, the bf16 fixture against torch.autocast
BF16_NORM_TOL = 5e-2
EXIT_SKIP = 77          # CTest's SKIP_RETURN_CODE (set on the bf16 test)

LLAMA_SEED = 20250902   # torch.manual_seed before LlamaForCausalLM(config)
# The run: transformers_parity's import-train run (B=4, T=32 < maxT=64, 2 micro-batches a step,
# 7 windows so the data order wraps, warmup 4 then cosine, clipping at 1.0, weight decay 0.1),
# 10 steps, evaluated after 0, 5 and 10.
LLAMA_RUN = dataclasses.replace(tp.IMPORT_RUN, name="llama", steps=10, eval_every=5)

# The config keys the export must carry over (as transformers reads them, defaults filled in).
CONFIG_KEYS = ["model_type", "vocab_size", "hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
               "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act"]


@dataclasses.dataclass(frozen=True)
class LlamaCase:
    """One mode: how its LlamaConfig differs from the base (tied, 4 heads over 2 KV heads,
    rms_norm_eps 1e-5, rope_theta 10000, no attention bias) and its train.precision."""
    about: str
    tie: bool = True
    kv_heads: int = 2
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Optional[Dict[str, object]] = None
    attention_bias: bool = False
    precision: str = "fp32"

    def config(self) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=LLAMA_RUN.vocab_size, hidden_size=LLAMA_RUN.channels, intermediate_size=160,
            num_hidden_layers=LLAMA_RUN.layers, num_attention_heads=LLAMA_RUN.heads,
            num_key_value_heads=self.kv_heads, max_position_embeddings=LLAMA_RUN.max_seq_len,
            rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta,
            rope_scaling=dict(self.rope_scaling) if self.rope_scaling else None,
            tie_word_embeddings=self.tie, attention_bias=self.attention_bias,
            attn_implementation="eager", torch_dtype=torch.float32)

    def run(self) -> "ref.RunConfig":
        return dataclasses.replace(LLAMA_RUN, precision=self.precision)

    def tolerances(self) -> Tuple[float, float]:
        """(losses, grad norms) for compare_training."""
        return (BF16_LOSS_TOL, BF16_NORM_TOL) if self.precision == "bf16" else (LOSS_TOL, NORM_TOL)


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
CASES: Dict[str, LlamaCase] = {
    "import-train": LlamaCase("tied head, 4 heads over 2 KV heads (GQA)"),
    "untied": LlamaCase("untied lm_head, q/k/v/o biases, rms_norm_eps 1e-6", tie=False,
                        attention_bias=True, rms_norm_eps=1e-6),
    "rope-llama3": LlamaCase("rope_theta 500000, llama3 rope scaling (factor 8, original 16)",
                             rope_theta=500000.0, rope_scaling=LLAMA3_ROPE),
    "mqa": LlamaCase("1 KV head (MQA)", kv_heads=1),
    "mha": LlamaCase("4 KV heads = heads (MHA)", kv_heads=LLAMA_RUN.heads),
    "bf16": LlamaCase("train.precision bf16 against torch.autocast bf16", precision="bf16"),
}


def load_llama(d: str, checks: tp.Checks) -> LlamaForCausalLM:
    """tp.load_hf for Llama: eager attention (not saved in config.json), fp32, eval mode; no
    missing/unexpected/mismatched tensor, no warning."""
    return tp.load_hf(d, checks, LlamaForCausalLM, attn_implementation="eager")


def make_llama(case: LlamaCase) -> LlamaForCausalLM:
    """transformers' own init of case.config(), seeded, every 1-D tensor perturbed."""
    torch.manual_seed(LLAMA_SEED)
    model = LlamaForCausalLM(case.config())
    tp.perturb_1d(model)
    return model


def expected_decay(case: LlamaCase) -> List[str]:
    """The tensors AdamW decays, by name: embeddings, the 7 projection weights, an untied head."""
    names = ["model.embed_tokens.weight"]
    for layer in range(LLAMA_RUN.layers):
        names += [f"model.layers.{layer}.self_attn.{p}_proj.weight" for p in "qkvo"]
        names += [f"model.layers.{layer}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
    return names + ([] if case.tie else ["lm_head.weight"])


# ---- gradients -------------------------------------------------------------------------------
def hf_grads(model, idx: np.ndarray, targets: np.ndarray) -> Tuple[float, Dict[str, np.ndarray]]:
    """transformers' autograd, in float64 on a copy of the model (the same weights, widened
    exactly): the mean cross-entropy over the B*T positions of idx against targets and its
    gradient for every trainable parameter, by named_parameters() name (a tied head is the embedding's, its
    share included). float64, so that GRADS_TOL bounds the engine's fp32 error alone (against
    transformers' own fp32 gradients the two roundings add). The largest is a tensor whose
    gradient is small next to the activations it is made of, through softmax's backward: layer
    1's q_proj with attention biases (|grad| 2e-5), 8.8e-6 relative in the Release build."""
    m64 = copy.deepcopy(model).to(torch.float64)
    loss = tp.hf_loss(m64, torch.from_numpy(idx), torch.from_numpy(targets))
    loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in m64.named_parameters()
             if p.requires_grad}  # a PeftModel's frozen base has none
    return float(loss.item()), grads


def fp32_distance(model, idx: np.ndarray, targets: np.ndarray,
                  exact: Dict[str, np.ndarray]) -> float:
    """How far transformers' own fp32 gradients are from float64's (`exact`, by named_parameters()
    name): the worst tensor's relative 2-norm distance."""
    m32 = copy.deepcopy(model)
    tp.hf_loss(m32, torch.from_numpy(idx), torch.from_numpy(targets)).backward()
    return max(float(np.linalg.norm(p.grad.double().numpy() - exact[n]) /
                     max(np.linalg.norm(exact[n]), 1e-30))
               for n, p in m32.named_parameters() if p.requires_grad and n in exact)


def grads_bound(model, idx: np.ndarray, targets: np.ndarray, exact: Dict[str, np.ndarray]) -> float:
    """check_grads' tolerance: GRADS_TOL, or twice transformers' own fp32
    distance from float64 where that is larger: a tensor made by cancellation (layer 1's q_proj
    with attention biases) is as far from float64 in PyTorch's fp32 as in ours, by a margin that
    depends on the CPU's vector width (8.8e-6 ours on a Zen 5, 1.2e-5 on a Zen 3)."""
    own = fp32_distance(model, idx, targets, exact)
    tol = max(GRADS_TOL, 2 * own)
    print(f"  transformers' own fp32 gradients are {own:.2e} from float64: bound {tol:.3g}",
          flush=True)
    return tol


def check_grads(engine, checkpoint: str, model, seed: int, what: str, tmp: str,
                checks: tp.Checks, adapter: Optional[str] = None,
                rename=lambda grads: grads, V: Optional[int] = None,
                T: Optional[int] = None, bound=None) -> None:
    """engine_logits CHECKPOINT IDS OUT GRADS on (B=2, T=maxT) ids and targets against hf_grads
    (compare_grads): the same tensor names and HF shapes, the loss and every tensor within
    the bound (below) relative. adapter: engine_logits --adapter DIR, against `model` = the PeftModel;
    rename maps hf_grads' dict (named_parameters() names) to the names of the engine's file.
    V, T: the model's vocabulary and positions (default LLAMA_RUN's: family_parity.py's differ);
    bound(model, idx, targets, grads): the tolerance (default grads_bound: GRADS_TOL, or twice
    transformers' own fp32 distance from float64 where that is larger)."""
    V, T = V or LLAMA_RUN.vocab_size, T or LLAMA_RUN.max_seq_len
    idx, targets = tp.sample_ids(V, T, seed), tp.sample_ids(V, T, seed + 1)
    ids_path = os.path.join(tmp, "grads-ids.safetensors")
    out_path, grads_path = os.path.join(tmp, "logits.st"), os.path.join(tmp, "grads.st")
    save_file({"idx": idx.astype(np.float32), "targets": targets.astype(np.float32)}, ids_path)
    engine.logits(checkpoint, ids_path, out_path, grads_path,
                  **({"adapter": adapter} if adapter else {}))
    loss, theirs = hf_grads(model, idx, targets)
    tol = (bound or grads_bound)(model, idx, targets, theirs)
    compare_grads(load_file(grads_path), loss, rename(theirs), what, checks, tol)


def compare_grads(ours: Dict[str, np.ndarray], loss: float, theirs: Dict[str, np.ndarray],
                  what: str, checks: tp.Checks, tol: Optional[float] = None) -> None:
    """A GRADS file's tensors (engine_logits: a 'loss' of shape [1] and one gradient per
    parameter) against the reference's loss and gradients under the same names: the same names
    and shapes, the loss and every tensor within tol (default GRADS_TOL) relative (2-norm of the
    difference / 2-norm of the reference's). A gradient that is 0 in exact arithmetic (the
    reference's norm below 1e-12: a softmax ignores a shift shared by all its inputs, as a span
    head's bias) must be below ZERO_TOL in norm instead, fp32 rounding noise. A failure names
    each tensor off."""
    tol = GRADS_TOL if tol is None else tol
    ZERO_TOL = 1e-6  # sums of O(1) fp32 terms (bert_parity.py)
    ours = dict(ours)
    got_loss = ours.pop("loss", None)
    if got_loss is None or got_loss.shape != (1,):
        checks.expect(False, f"gradients of the {what}: a 'loss' of shape [1] in GRADS "
                      f"({None if got_loss is None else list(got_loss.shape)})")
    else:
        d = abs(float(got_loss[0]) - loss) / abs(loss)
        checks.expect(d <= tol, f"loss of the {what} within {tol:g}: ours "
                      f"{float(got_loss[0])!r}, transformers {loss!r} (relative {d:.3e})")
    missing, extra = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    checks.expect(not missing and not extra, f"gradients of the {what}: one tensor per parameter "
                  f"under its HF name (missing {missing}, unexpected {extra})")
    off, worst = [], (0.0, "")
    for name in theirs:
        if name not in ours:
            continue
        g, r = ours[name].astype(np.float64), theirs[name].astype(np.float64)
        if g.shape != r.shape:
            off.append(f"{name}: shape {list(g.shape)}, HF's {list(r.shape)}")
            continue
        if np.linalg.norm(r) < 1e-12:
            if np.linalg.norm(g) > ZERO_TOL:
                off.append(f"{name}: 0 in exact arithmetic, ours has norm {np.linalg.norm(g):.3e}")
            continue
        d = float(np.linalg.norm(g - r) / np.linalg.norm(r))
        worst = max(worst, (d, name))
        if d > tol:
            i = np.unravel_index(int(np.argmax(np.abs(g - r))), r.shape)
            off.append(f"{name}: relative {d:.3e}, worst element {tuple(map(int, i))} ours "
                       f"{g[i]:.4e} transformers {r[i]:.4e} (|grad| {np.linalg.norm(r):.3e})")
    print(f"  gradients of the {what}: {len(theirs)} tensors, worst {worst[1]} at "
          f"{worst[0]:.3e} relative")
    checks.expect(not off, f"gradients of the {what} within {tol:g} per tensor"
                  + ("" if not off else ": " + "; ".join(off)))


# ---- the export's files and config -----------------------------------------------------------
def check_export_files(export_dir: str, saved_dir: str, checks: tp.Checks) -> None:
    """The export's model.safetensors holds exactly the tensors save_pretrained wrote for the same
    model (saved_dir; lm_head.weight only when untied), each F32 and of the same shape."""
    def tensors(d):
        with safe_open(os.path.join(d, "model.safetensors"), framework="np") as f:
            return {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()}

    path = os.path.join(export_dir, "model.safetensors")
    if not os.path.exists(path):
        checks.expect(False, f"the export wrote {path}")
        return
    ours, want = tensors(export_dir), tensors(saved_dir)
    missing, extra = sorted(set(want) - set(ours)), sorted(set(ours) - set(want))
    checks.expect(not missing and not extra, f"export's tensor names are save_pretrained's "
                  f"(missing {missing}, unexpected {extra})")
    bad = [f"{k}: {ours[k]} (want {want[k]})" for k in sorted(set(ours) & set(want))
           if ours[k] != want[k]]
    checks.expect(not bad, f"export's tensors F32 in HF shapes {bad or ''}")


def check_export_config(exported, original, checks: tp.Checks) -> None:
    """The exported config.json, as transformers reads it, has the original's values (CONFIG_KEYS)
    and the tied head is tied after loading."""
    diff = {k: (getattr(exported.config, k, None), getattr(original.config, k, None))
            for k in CONFIG_KEYS
            if getattr(exported.config, k, None) != getattr(original.config, k, None)}
    checks.expect(not diff, f"export's config.json reads as the original's "
                  f"{'(ours, original): ' + str(diff) if diff else ''}")
    checks.expect(type(exported).__name__ == "LlamaForCausalLM",
                  f"export loads as LlamaForCausalLM ({type(exported).__name__})")
    if original.config.tie_word_embeddings:
        checks.expect(exported.lm_head.weight.data_ptr()
                      == exported.model.embed_tokens.weight.data_ptr(),
                      "lm_head is tied to embed_tokens after loading the export")


# ---- one mode --------------------------------------------------------------------------------
def check_case(engine, case: LlamaCase, tmp: str) -> int:
    checks = tp.Checks()
    cfg = case.run()
    V, T = cfg.vocab_size, cfg.max_seq_len
    print(f"llama: {case.about}; {cfg.steps} steps, {cfg.precision}", flush=True)
    hf_dir = os.path.join(tmp, "hf")
    make_llama(case).save_pretrained(hf_dir, safe_serialization=True)
    checks.expect(os.path.exists(os.path.join(hf_dir, "model.safetensors")),
                  "save_pretrained wrote model.safetensors")

    # 1. import: the model as the engine gets it, read back from the directory.
    model = load_llama(hf_dir, checks)
    decay, _ = tp.decay_split(model)
    checks.expect(decay == expected_decay(case), f"AdamW decays exactly the 2-D weights "
                  f"({len(decay)} tensors: embed_tokens, q/k/v/o/gate/up/down, "
                  f"{'tied head' if case.tie else 'lm_head'})")
    norm0 = model.model.norm.weight.detach().clone()
    tp.check_logits(engine, hf_dir, model, V, T, 11, "imported model", tmp, checks)
    check_grads(engine, hf_dir, model, 21, "imported model", tmp, checks)

    # 2. train: the engine and PyTorch, the same steps from the same directory.
    train_tokens, val_tokens, run_dir, ours, ours_val = tp.engine_train(engine, cfg, hf_dir, tmp)
    want = tp.train_hf(cfg, model, train_tokens, val_tokens)
    tp.compare_training(cfg, ours, ours_val, want, checks, *case.tolerances())

    # 3. export: the run's weights -> a HF directory -> transformers.
    export_dir = os.path.join(tmp, "trained-hf")
    engine.export(run_dir, export_dir)
    check_export_files(export_dir, hf_dir, checks)
    trained = load_llama(export_dir, checks)
    check_export_config(trained, model, checks)
    moved = (trained.model.norm.weight.detach() - norm0).abs().max().item()
    checks.expect(moved > 1e-3, f"the exported model is trained (model.norm.weight moved "
                  f"{moved:.2e})")
    tp.check_logits(engine, run_dir, trained, V, T, 13, "export (against the run's own "
                    "checkpoint)", tmp, checks)
    if cfg.precision == "fp32":
        tp.compare_weights(trained.state_dict(), model.state_dict(), checks)
    check_grads(engine, run_dir, trained, 31, "trained model", tmp, checks)
    return checks.exit_code()


# ---- the stand-in engine, for --self-check ------------------------------------------------
class StandIn:
    """What the engine is asked for, done by transformers, written to the engine's files:
    train -> RUN/metrics.jsonl (step rows with loss, lr, grad_norm; eval rows with val_loss) and
    RUN/hf (the trained model); export -> save_pretrained; logits (and gradients) -> safetensors
    as engine_logits writes them. `fault` breaks one thing, to show the checks catch it:
      swap-norms   the export swaps layer 0's two RMSNorm weights
      grad-scale   the gradient of layer 1's k_proj weight is 1e-4 too large
      tied-head    the export of a tied model writes lm_head.weight too"""

    FAULTS = {"swap-norms": "model.layers.0.input_layernorm.weight",
              "grad-scale": "model.layers.1.self_attn.k_proj.weight",
              "tied-head": "lm_head.weight"}

    def __init__(self, cfg: "ref.RunConfig", fault: Optional[str] = None):
        assert fault is None or fault in self.FAULTS, fault
        self.cfg, self.fault = cfg, fault

    @staticmethod
    def _load(checkpoint: str) -> LlamaForCausalLM:
        d = checkpoint if os.path.exists(os.path.join(checkpoint, "config.json")) else \
            os.path.join(checkpoint, "hf")
        model = LlamaForCausalLM.from_pretrained(d, attn_implementation="eager",
                                                 torch_dtype=torch.float32)
        return model.eval()

    def logits(self, checkpoint: str, ids: str, out: str, grads: Optional[str] = None) -> None:
        model = self._load(checkpoint)
        inputs = load_file(ids)
        idx = inputs["idx"].astype(np.int64)
        with torch.no_grad():
            save_file({"logits": model(input_ids=torch.from_numpy(idx)).logits.numpy()}, out)
        if grads:
            loss, g = hf_grads(model, idx, inputs["targets"].astype(np.int64))
            if self.fault == "grad-scale":
                g[self.FAULTS["grad-scale"]] *= 1 + 1e-4
            save_file(dict(g, loss=np.array([loss], dtype=np.float32)), grads)

    def train(self, config: str, sets: Dict[str, object], args: Tuple[str, ...] = ()) -> None:
        with open(config) as f:  # the engine is given the reference's config, unchanged
            assert f.read() == ref.config_yaml(self.cfg), "config.yaml is not config_yaml(cfg)"
        run_dir = str(sets["train.out_dir"])
        model = self._load(str(sets["model.init_from"]))
        tokens = [ref.decode_tokens(open(str(sets[k]), "rb").read())
                  for k in ("data.train", "data.val")]
        write_metrics(run_dir, self.cfg, tp.train_hf(self.cfg, model, *tokens))
        model.save_pretrained(os.path.join(run_dir, "hf"), safe_serialization=True)

    def export(self, run_dir: str, out_dir: str) -> None:
        model = self._load(run_dir)
        model.save_pretrained(out_dir, safe_serialization=True)
        if self.fault in ("swap-norms", "tied-head"):
            path = os.path.join(out_dir, "model.safetensors")
            t = load_file(path)
            if self.fault == "swap-norms":
                a, b = (f"model.layers.0.{n}.weight" for n in ("input_layernorm",
                                                               "post_attention_layernorm"))
                t[a], t[b] = t[b], t[a]
            else:
                t["lm_head.weight"] = t["model.embed_tokens.weight"].copy()
            save_file(t, path, metadata={"format": "pt"})


def write_metrics(run_dir: str, cfg: "ref.RunConfig", rec: dict, first: int = 0) -> None:
    """RUN/metrics.jsonl as the trainer writes it, from train_hf's record: a stand-in's run (one
    resumed after `first` steps logs the steps from there)."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for s in range(first, cfg.steps):
            f.write(json.dumps({"step": s, "loss": rec["steps"][s], "lr": rec["lrs"][s],
                                "grad_norm": rec["grad_norms"][s]}) + "\n")
        for v in rec["val"]:
            f.write(json.dumps({"step": v["after_steps"], "val_loss": v["loss"]}) + "\n")


def fault_caught(fault: str, named: str, check) -> bool:
    """Runs check() (a mode against a broken stand-in; its exit code) with its output held back,
    prints its failures, and says whether it failed with a failure naming `named`."""
    print(f"==== self-check: fault {fault} (must fail, naming {named})", flush=True)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        failed = check() != 0
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("FAIL")]
    for ln in lines:
        print("  (expected) " + ln[:400])
    return failed and any(named in ln for ln in lines)


def self_check(tmp: str) -> int:
    """Every mode against the stand-in (all checks must pass), then each StandIn fault on the
    import-train mode (the checks must fail, naming the tensor)."""
    problems = []
    for name, case in CASES.items():
        d = os.path.join(tmp, name)
        os.makedirs(d)
        print(f"==== self-check {name}", flush=True)
        if check_case(StandIn(case.run()), case, d) != 0:
            problems.append(f"{name}: a check failed against the stand-in")
    for fault, tensor in StandIn.FAULTS.items():
        d = os.path.join(tmp, "fault-" + fault)
        os.makedirs(d)
        case = CASES["import-train"]
        if not fault_caught(fault, tensor,
                            lambda: check_case(StandIn(case.run(), fault), case, d)):
            problems.append(f"fault {fault}: not caught, or no failure names {tensor}")
    for p in problems:
        print("SELF-CHECK FAILED:", p)
    print(f"self-check: {'FAILED' if problems else 'ok'} ({len(CASES)} modes, "
          f"{len(StandIn.FAULTS)} faults; transformers {transformers.__version__}, "
          f"torch {torch.__version__})")
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=sorted(CASES) + ["self-check"])
    ap.add_argument("--cli", help="the cputrain-numa binary")
    ap.add_argument("--engine-logits", help="the engine_logits binary")
    ap.add_argument("--self-check", action="store_true",
                    help="run the mode against the transformers stand-in, without the engine")
    ap.add_argument("--grads-tol", type=float, default=GRADS_TOL,
                    help=f"per-tensor gradient tolerance (default {GRADS_TOL:g}; the sanitizer "
                    "builds, whose code differs, pass a looser one: tests/reference/CMakeLists.txt)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    args = ap.parse_args(argv)
    globals()["GRADS_TOL"] = args.grads_tol
    real = args.mode != "self-check" and not args.self_check
    if real and not (args.cli and args.engine_logits):
        ap.error("--cli and --engine-logits are required (or --self-check)")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{sys.executable}", flush=True)
    with tempfile.TemporaryDirectory(prefix="llama_parity.") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        if args.mode == "self-check":
            return self_check(work)
        case = CASES[args.mode]
        if not real:
            return check_case(StandIn(case.run()), case, work)
        if case.precision == "bf16" and tp.refuses_bf16(args.cli):
            return EXIT_SKIP
        return check_case(tp.Engine(args.cli, args.engine_logits), case, work)


if __name__ == "__main__":
    sys.exit(main())
