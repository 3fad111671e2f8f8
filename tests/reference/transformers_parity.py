#!/usr/bin/env python3
"""Our Hugging Face GPT-2 format against the real transformers library (CTest, tests/reference).

Run with the peers' environment (scripts/peers-env.sh: PyPI's torch 2.x and transformers), which
CMake passes as CPUTRAIN_PEERS_PYTHON. Nothing is downloaded: every model is made here.

  export        the engine trains the `odd` fixture (tests/reference/fixtures/odd) for a few
                steps, `cputrain-numa export --format hf` writes the result, and
                transformers.GPT2LMHeadModel.from_pretrained loads it with no missing, unexpected
                or mismatched tensor and no warning; its logits on (B=2, T=maxT) token ids must be
                the logits the engine computes from the trained model.bin itself
                (engine_logits.cc), within 1e-5 relative; and `cputrain-numa eval` on the
                exported directory must give transformers' mean loss on val.bin within 1e-5
                relative.
  import-train  a GPT2LMHeadModel(GPT2Config(...)) made by transformers (seeded, dropout 0, every
                bias and LayerNorm parameter perturbed so a wrong mapping shows from step 0) is
                save_pretrained'ed (safetensors). The engine's logits from that directory (its
                import) must be transformers' within 1e-5 relative. `cputrain-numa train` starts
                from the directory (model.init_from) and PyTorch trains the same transformers
                model with the trainer's rules (below): the per-step losses and pre-clip gradient
                norms must agree within 1e-4 relative, the learning rates within 1e-12, the
                validation losses within 1e-4 relative, and the trained weights, exported with
                `export --format hf` and read back by transformers, PyTorch's within 1e-3 of each
                tensor's largest value (WEIGHTS_TOL says why looser).

The training rules are the PyTorch reference's (gpt2_reference.py, README.md next to it), reused
from it: its RunConfig and config_yaml (the trainer's config), lr_at (warmup then cosine),
window (data.shuffle false: window p mod n, micro-batch j of step s at position s*k + j),
make_tokens / encode_tokens (data), and its train_loop(), run on a transformers model:
AdamW (torch.optim.AdamW, foreach=False) with weight decay on the 2-D tensors only (wte, wpe and
the four Conv1D weights: the reference's DECAYED), loss = mean cross-entropy of the logits against
the next tokens, each of k micro-batch losses scaled 1/k, clip_grad_norm_ over all parameters.

The pieces below the GPT-2 modes' constants (Checks, Engine, load_hf, check_logits, train_hf,
engine_train, compare_training, compare_weights) are family-neutral: llama_parity.py runs the
Llama checks through the same functions.

Exit 0 when every check holds, 1 otherwise (and when torch or transformers cannot be imported).
"""
import os
import sys

sys.dont_write_bytecode = True  # gpt2_reference is imported from the source tree
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    from safetensors.numpy import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:  # a failure, never a skip: the check must not silently disappear
    sys.exit(f"FAIL: {sys.executable} cannot import {e.name or e} ({e}): the transformers parity "
             f"tests need the peers' environment; run: bash scripts/install-deps.sh --peers")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Dict, List, Optional, Tuple  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt2_reference as ref  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

LOGITS_TOL = 1e-5  # rel_diff below
EVAL_TOL = 1e-5    # relative, eval's mean loss
LOSS_TOL = 1e-4    # relative, per-step training loss, pre-clip grad norm and val loss
                   # (tests/train_test.cc's bound against the hand-written reference)
# Per tensor, max |ours - torch| / max |torch| after the import-train run. Looser than the losses:
# AdamW divides by sqrt(v) + eps, so a gradient that is rounding noise (the key bias's: softmax
# ignores a shift shared by all keys, so it is 0 in exact arithmetic) moves its parameter by a
# noise-driven fraction of lr each step; measured 4e-5 (c_proj), 3e-6 absolute. A tensor mapped to
# the wrong name or left untransposed is off by O(1).
WEIGHTS_TOL = 1e-3
LR_TOL = 1e-12     # absolute: the schedule is the same formula in double

# The import-train run: L=2, C=64, NH=4, V=300 (padded to 384 by the engine), maxT=64, T=32 < maxT;
# AdamW with betas (0.9, 0.95), weight decay 0.1, clipping at 1.0, warmup 4 then cosine to 3e-4;
# 2 micro-batches of B=4 per step (train.grad_accum_steps), 7 windows so the data order wraps.
IMPORT_RUN = ref.RunConfig(
    name="transformers", layers=2, channels=64, heads=4, vocab_size=300, max_seq_len=64,
    seed=1234, batch_size=4, seq_len=32, train_windows=7, train_extra=29, val_windows=2,
    lr=3e-3, min_lr=3e-4, schedule="cosine", warmup_steps=4, beta1=0.9, beta2=0.95, eps=1e-8,
    weight_decay=0.1, grad_clip=1.0, steps=16, eval_every=8, eval_batches=2, checkpoint_every=0,
    grad_accum_steps=2)
IMPORT_SEED = 20250901  # torch.manual_seed before GPT2LMHeadModel(config)

EXPORT_STEPS = 6  # the export test trains the `odd` fixture this long before exporting


class Checks:
    """Collects failed checks; prints every one and the numbers."""

    def __init__(self):
        self.failed = []

    def expect(self, ok: bool, what: str):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.failed.append(what)

    def exit_code(self) -> int:
        if self.failed:
            print(f"{len(self.failed)} check(s) FAILED (transformers {transformers.__version__}, "
                  f"torch {torch.__version__})")
            return 1
        print(f"all checks passed (transformers {transformers.__version__}, "
              f"torch {torch.__version__})")
        return 0


def run(cmd, cwd=None) -> str:
    """Runs a command; its stdout, or exit 1 with its stderr."""
    t0 = time.time()
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    print(f"  ran {os.path.basename(cmd[0])} {cmd[1]} in {time.time() - t0:.1f} s", flush=True)
    return r.stdout


def engine_trains_bf16(cli: str) -> Tuple[bool, str]:
    """Whether the engine runs train.precision bf16 here, and on which kernel, as its own `topo
    --json` says (kernels/bf16.h: auto picks AMX, else VDPBF16PS; CPUTRAIN_BF16_KERNEL forces one,
    tile-model on any CPU; CPUTRAIN_DISABLE_BF16=1 turns auto off). The environment is this
    process's, which the engine runs inherit: (False, why) means the bf16 mode is a skip (77)."""
    out = subprocess.run([cli, "topo", "--json"], capture_output=True, text=True, check=True)
    p = json.loads(out.stdout)["precisions"]
    return p.get("bf16_kernel", "none") != "none", p.get("bf16_kernel_detail", "")


def refuses_bf16(cli: str, command: str = "train") -> bool:
    """Prints the kernel the engine's bf16 products run on (engine_trains_bf16); True, after
    saying so, where the engine refuses bf16 here: the caller's mode is then a skip (77)."""
    ok, kernel = engine_trains_bf16(cli)
    print(kernel, flush=True)
    if not ok:
        print(f"SKIP: {command} refuses train.precision bf16 here")
    return not ok


class Engine:
    """The engine's commands as these tests call them (llama_parity.py's stand-in for
    --self-check has the same methods)."""

    def __init__(self, cli: str, engine_logits: str):
        self.cli, self.engine_logits = cli, engine_logits

    def logits(self, checkpoint: str, ids: str, out: str, grads: Optional[str] = None,
               adapter: Optional[str] = None) -> None:
        """engine_logits [--adapter ADAPTER] CHECKPOINT IDS OUT [GRADS] (engine_logits.cc)."""
        run([self.engine_logits] + (["--adapter", adapter] if adapter else []) +
            [checkpoint, ids, out] + ([grads] if grads else []))

    def train(self, config: str, sets: Dict[str, object], args: Tuple[str, ...] = ()) -> None:
        """cputrain-numa train --config CONFIG [ARGS] --set key=value ..."""
        cmd = [self.cli, "train", "--progress", "quiet", "--config", config, *args]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        run(cmd)

    def export(self, run_dir: str, out_dir: str) -> None:
        """cputrain-numa export --format hf --checkpoint RUN_DIR -o OUT_DIR"""
        run([self.cli, "export", "--format", "hf", "--checkpoint", run_dir, "-o", out_dir])


@contextlib.contextmanager
def warnings_said(loggers: Tuple[str, ...] = ("transformers",)):
    """Collects what the block logs at WARNING or above on `loggers` and what it raises as Python
    warnings, as lines ("WARNING: ...", "UserWarning: ..."), into the list it yields."""
    said: List[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(f"{record.levelname}: {record.getMessage()}")

    keep = Keep(level=logging.WARNING)
    for name in loggers:
        logging.getLogger(name).addHandler(keep)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield said
    finally:
        for name in loggers:
            logging.getLogger(name).removeHandler(keep)
        said += [f"{w.category.__name__}: {w.message}" for w in caught]


def load_hf(d: str, checks: Checks, cls=GPT2LMHeadModel, **kwargs):
    """cls.from_pretrained(d, **kwargs), fp32, eval mode. Every tensor of the model must come from
    the file (no missing, unexpected or mismatched tensor), and loading must log or raise no
    warning (transformers' logger, Python's warnings): a warning there is how transformers reports
    a config key it ignored or a tensor it re-tied or re-initialised."""
    with warnings_said() as said:
        model, info = cls.from_pretrained(d, output_loading_info=True,
                                          torch_dtype=torch.float32, **kwargs)
    problems = {k: v for k, v in info.items() if v}
    checks.expect(not problems, f"from_pretrained({os.path.basename(d)}): no missing, unexpected "
                  f"or mismatched tensors {problems or ''}")
    checks.expect(not said, f"from_pretrained({os.path.basename(d)}): no warnings "
                  f"{said or ''}")
    model.eval()
    return model


def rel_diff(ours: np.ndarray, theirs: np.ndarray) -> float:
    """The larger of max |ours - theirs| / max(1, |theirs|) (elementwise, as
    tests/hf_gpt2_test.cc) and max |ours - theirs| / max |theirs| (against the tensor's scale:
    stricter for the small logits of a model near its init), in double."""
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    d = np.abs(a - b)
    return float(max(np.max(d / np.maximum(1.0, np.abs(b))), np.max(d) / np.max(np.abs(b))))


def hf_loss(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of a transformers causal LM's logits of x against y (the next tokens):
    the engine's loss. (labels= would shift inside the model and drop the last position.)"""
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def sample_ids(V: int, T: int, seed: int, B: int = 2) -> np.ndarray:
    """(B, T) int64 token ids, seeded; V-1 and 0 included (the vocabulary's last row and first)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, V, size=(B, T)).astype(np.int64)
    idx[0, 0], idx[-1, -1] = V - 1, 0
    return idx


# ---- checks shared by the GPT-2 and the Llama modes --------------------------------------------
def check_logits(engine: Engine, checkpoint: str, model, V: int, T: int, seed: int, what: str,
                 tmp: str, checks: Checks, adapter: Optional[str] = None,
                 exact: bool = False) -> None:
    """The engine's logits for `checkpoint` (engine_logits; with a PEFT adapter: --adapter)
    against transformers' `model` (a PeftModel with the adapter), on B=2 rows of T ids
    (sample_ids): within LOGITS_TOL by rel_diff. exact: against a float64 copy of `model`
    instead, within LOGITS_TOL or twice transformers' own fp32 distance from it where that is
    larger (a model whose fp32 rounding alone nears LOGITS_TOL: family_parity.py's Gemma 3)."""
    idx = sample_ids(V, T, seed)
    ids_path, out_path = os.path.join(tmp, "idx.safetensors"), os.path.join(tmp, "logits.st")
    save_file({"idx": idx.astype(np.float32)}, ids_path)
    engine.logits(checkpoint, ids_path, out_path, **({"adapter": adapter} if adapter else {}))
    ours = load_file(out_path)["logits"]
    with torch.no_grad():
        theirs = model(input_ids=torch.from_numpy(idx)).logits.numpy()
    tol = LOGITS_TOL
    if exact:
        theirs32 = theirs
        with torch.no_grad():
            theirs = copy.deepcopy(model).double()(input_ids=torch.from_numpy(idx)).logits.numpy()
        own = rel_diff(theirs32, theirs)
        tol = max(LOGITS_TOL, 2 * own)
        print(f"  transformers' own fp32 logits of the {what} are {own:.2e} from float64: "
              f"bound {tol:.3g}")
    checks.expect(ours.shape == theirs.shape, f"logits shape {ours.shape} == {theirs.shape}")
    d = rel_diff(ours, theirs) if ours.shape == theirs.shape else float("inf")
    if ours.shape == theirs.shape:
        where = np.unravel_index(np.argmax(np.abs(ours - theirs)), ours.shape)
        print(f"  logits of the {what}: relative {d:.3e} (rel_diff), max abs "
              f"{np.max(np.abs(ours - theirs)):.3e} at (b, t, v) = {tuple(map(int, where))}: "
              f"ours {ours[where]:.7f} transformers {theirs[where]:.7f} (|logits| up to "
              f"{np.max(np.abs(theirs)):.2f})")
    checks.expect(d <= tol, f"logits of the {what} within {tol:g}: {d:.3e}")


def decay_split(model) -> Tuple[List[str], List[str]]:
    """Names of the trainable parameters AdamW decays (the 2-D ones: embeddings, projection and
    head weights; a PeftModel's lora_A and lora_B) and of the others (biases, norm weights), in
    named_parameters() order, which lists a tied head once, as the embedding."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]  # not a frozen base's
    params = dict(model.named_parameters())
    return [n for n in names if params[n].dim() >= 2], [n for n in names if params[n].dim() < 2]


def train_hf(cfg: "ref.RunConfig", model, train_tokens: np.ndarray,
             val_tokens: Optional[np.ndarray], optimizer: "ref.Optimizer" = ref.ADAMW) -> dict:
    """gpt2_reference.train_loop for a transformers model: the same lr schedule, data order,
    accumulation, clipping and optimizer groups (decay_split: weight decay on the 2-D tensors
    only; the optimizer AdamW unless `optimizer` says another: optim_parity.py), the forward and
    the validation loss in cfg.precision (fp32, or bf16 = torch.autocast with fp32 master weights,
    gradients and optimizer state, as gpt2_reference.py runs it)."""
    model.train()  # dropout is 0: train and eval mode compute the same
    prec = ref.PRECISIONS[cfg.precision]
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    decay, other = decay_split(model)

    def micro_loss(x, y):
        with prec.context():
            return hf_loss(model, x, y)

    def evaluate() -> float:
        with torch.no_grad():
            ls = [micro_loss(*ref.window(val_tokens, cfg.batch_size, cfg.seq_len, i)).item()
                  for i in range(cfg.eval_batches)]
        return sum(ls) / len(ls)

    return ref.train_loop(cfg, [params[n] for n in decay], [params[n] for n in other],
                          list(params.values()), micro_loss,
                          None if val_tokens is None else evaluate, train_tokens, optimizer)


def engine_train(engine: Engine, cfg: "ref.RunConfig", init_from: str, tmp: str,
                 args: Tuple[str, ...] = (), run_dir: Optional[str] = None,
                 sets: Optional[Dict[str, object]] = None):
    """Writes the run's data (gpt2_reference.make_tokens, llm.c token files) and config
    (gpt2_reference.config_yaml) into tmp and trains with the engine from `init_from`
    (model.init_from), into run_dir (default tmp/run); args (train's flags: --adapter DIR) and
    sets (more --set keys) are passed on. Returns the train and val tokens, the run directory,
    and metrics.jsonl's step rows and evaluation rows."""
    run_dir = run_dir or os.path.join(tmp, "run")
    train_tokens, val_tokens = ref.make_tokens(cfg)
    for name, toks in (("train.bin", train_tokens), ("val.bin", val_tokens)):
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(ref.encode_tokens(toks))
    config = os.path.join(tmp, "config.yaml")
    with open(config, "w") as f:
        f.write(ref.config_yaml(cfg))
    # The trainer's config is the reference's (its model shape keys agree with the HF
    # config.json), started from the HF directory.
    engine.train(config, {"model.init_from": init_from,
                          "data.train": os.path.join(tmp, "train.bin"),
                          "data.val": os.path.join(tmp, "val.bin"),
                          "train.out_dir": run_dir, **(sets or {})}, args)
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return (train_tokens, val_tokens, run_dir, [r for r in rows if "loss" in r],
            [r for r in rows if "val_loss" in r])


def compare_training(cfg: "ref.RunConfig", ours: List[dict], ours_val: List[dict], want: dict,
                     checks: Checks, loss_tol: float, norm_tol: float) -> None:
    """The engine's metrics.jsonl rows against train_hf's record: every step's loss (relative,
    loss_tol), pre-clip gradient norm (relative, norm_tol) and lr (LR_TOL absolute), and every
    validation loss (relative, loss_tol). A failure names the worst step and both values."""
    checks.expect(len(ours) == cfg.steps, f"{len(ours)} step rows in metrics.jsonl ({cfg.steps})")
    worst = {"loss": (0.0, -1), "grad_norm": (0.0, -1), "lr": (0.0, -1)}
    for s, r in enumerate(ours[: cfg.steps]):
        dl = abs(r["loss"] - want["steps"][s]) / abs(want["steps"][s])
        dn = abs(r["grad_norm"] - want["grad_norms"][s]) / abs(want["grad_norms"][s])
        dr = abs(r["lr"] - want["lrs"][s])
        for key, d in (("loss", dl), ("grad_norm", dn), ("lr", dr)):
            worst[key] = max(worst[key], (d, s))
        print(f"  step {s:2d}  loss ours {r['loss']:.7f} torch {want['steps'][s]:.7f} "
              f"(rel {dl:.1e})  grad norm ours {r['grad_norm']:.6f} torch "
              f"{want['grad_norms'][s]:.6f} (rel {dn:.1e})  lr {r['lr']:.3e}")
    for key, want_key, tol, how in (("loss", "steps", loss_tol, "relative"),
                                    ("grad_norm", "grad_norms", norm_tol, "relative"),
                                    ("lr", "lrs", LR_TOL, "absolute")):
        d, s = worst[key]
        at = (f" (worst step {s}: ours {ours[s][key]!r}, torch {want[want_key][s]!r})"
              if s >= 0 else "")
        checks.expect(d <= tol, f"per-step {key} within {tol:g} {how}: {d:.3e}{at}")
    if cfg.grad_clip > 0:
        clipped = sum(n > cfg.grad_clip for n in want["grad_norms"])
        margin = min(abs(n - cfg.grad_clip) / cfg.grad_clip for n in want["grad_norms"])
        print(f"  clipping: {clipped} of {cfg.steps} steps; the closest pre-clip norm is "
              f"{margin:.1%} from {cfg.grad_clip}")
    else:
        print("  clipping: off (optim.grad_clip 0)")
    by_step = {r["step"]: r["val_loss"] for r in ours_val}
    worst_val, at = 0.0, ""
    for v in want["val"]:
        got = by_step.get(v["after_steps"])
        if got is None:
            checks.expect(False, f"an evaluation after {v['after_steps']} steps in metrics.jsonl")
            continue
        d = abs(got - v["loss"]) / abs(v["loss"])
        if d >= worst_val:
            worst_val = d
            at = f" (after {v['after_steps']} steps: ours {got!r}, torch {v['loss']!r})"
        print(f"  val after {v['after_steps']:2d} steps: ours {got:.7f} torch {v['loss']:.7f}")
    checks.expect(worst_val <= loss_tol,
                  f"validation losses within {loss_tol:g}: {worst_val:.3e}{at}")


def compare_weights(trained: Dict[str, torch.Tensor], reference: Dict[str, torch.Tensor],
                    checks: Checks, tol: float = WEIGHTS_TOL) -> None:
    """Per tensor of `reference` (PyTorch's trained state_dict): max |ours - torch| / max |torch|
    against `trained` (the engine's, exported and read back by transformers), within tol. A
    failure names the worst tensor and where in it."""
    worst_w, worst_name, at = 0.0, "", ""
    for name, t in reference.items():
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue  # GPT-2's buffers (older transformers), not parameters
        diff = (trained[name].double() - t.double()).abs()
        d = (diff.max() / t.double().abs().max()).item()
        if d >= worst_w:
            i = np.unravel_index(int(diff.argmax()), tuple(t.shape))
            worst_w, worst_name = d, name
            at = (f" at {tuple(map(int, i))}: ours {trained[name][i].item():.7f}, torch "
                  f"{t[i].item():.7f}")
    print(f"  trained weights: worst tensor {worst_name}, max |ours - torch| / max |torch| = "
          f"{worst_w:.3e}{at}")
    checks.expect(worst_w <= tol, f"trained weights (exported) within {tol:g} of PyTorch's: "
                  f"{worst_w:.3e} ({worst_name}{at})")


# ---- export: engine -> HF directory -> transformers ------------------------------------------
def check_export(engine: Engine, tmp: str) -> int:
    checks = Checks()
    fx = os.path.join(HERE, "fixtures", "odd")
    cfg = ref.CONFIGS["odd"]
    ms = ref.shape_of(cfg)
    run_dir, hf_dir = os.path.join(tmp, "run"), os.path.join(tmp, "hf")
    # A few engine steps from the fixture's init, so the exported weights are trained ones
    # (biases and LayerNorm parameters no longer 0 and 1).
    engine.train(os.path.join(fx, "config.yaml"),
                 {"model.init_from": os.path.join(fx, "model.bin"),
                  "data.train": os.path.join(fx, "train.bin"),
                  "data.val": os.path.join(fx, "val.bin"),
                  "train.steps": EXPORT_STEPS, "train.eval_every": 0, "train.out_dir": run_dir})
    engine.export(run_dir, hf_dir)

    model = load_hf(hf_dir, checks)
    c = model.config
    got = (c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.n_positions, c.activation_function,
           c.layer_norm_epsilon, c.tie_word_embeddings)
    want = (ms.L, ms.C, ms.NH, ms.V, ms.maxT, "gelu_new", 1e-5, True)
    checks.expect(got == want, f"config.json as transformers reads it: {got} (want {want})")
    checks.expect(model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
                  "lm_head is tied to wte")

    # The trained weights moved away from the init (else the test would check little).
    _, init = ref.decode_checkpoint(open(os.path.join(fx, "model.bin"), "rb").read())
    moved = (model.transformer.h[0].ln_1.bias.detach() - init["ln1b"][0]).abs().max().item()
    checks.expect(moved > 1e-3, f"the exported model is trained (ln_1.bias moved {moved:.2e})")

    # The engine's logits come from the trainer's own model.bin, not from the export.
    check_logits(engine, run_dir, model, ms.V, ms.maxT, 7, "export", tmp, checks)

    # eval on the exported directory (the HF import path of eval) against transformers' loss.
    B, T, nb = 4, 24, 3
    out = run([engine.cli, "eval", "--checkpoint", hf_dir, "--data", os.path.join(fx, "val.bin"),
               "--batches", str(nb), "--json", "--set", f"data.batch_size={B}",
               "--set", f"data.seq_len={T}"])
    doc = json.loads(out.strip().splitlines()[-1])
    val = ref.decode_tokens(open(os.path.join(fx, "val.bin"), "rb").read())
    with torch.no_grad():
        losses = [hf_loss(model, *ref.window(val, B, T, i)).item() for i in range(nb)]
    want_loss = sum(losses) / len(losses)
    e = abs(doc["loss"] - want_loss) / abs(want_loss)
    print(f"  eval: ours {doc['loss']:.8f} over {doc['windows']} windows, transformers "
          f"{want_loss:.8f}: relative {e:.3e}")
    checks.expect(doc["windows"] == nb and e <= EVAL_TOL,
                  f"eval loss of the export within {EVAL_TOL:g}: {e:.3e}")
    return checks.exit_code()


# ---- import-train: transformers' save_pretrained -> engine training vs PyTorch ----------------
def perturb_1d(model) -> None:
    """Adds seeded N(0, 0.2) noise to every 1-D parameter (biases, norm weights): transformers'
    init makes them 0 and 1, which would hide one mapped to the wrong place until training moved
    it. Draws from torch's global generator: seed it first."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.2)


def make_hf_model(cfg: "ref.RunConfig") -> GPT2LMHeadModel:
    """transformers' own GPT-2 at its own init, dropout off, every 1-D tensor perturbed."""
    torch.manual_seed(IMPORT_SEED)
    config = GPT2Config(n_layer=cfg.layers, n_embd=cfg.channels, n_head=cfg.heads,
                        vocab_size=cfg.vocab_size, n_positions=cfg.max_seq_len, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    perturb_1d(model)
    return model


def check_import_train(engine: Engine, tmp: str) -> int:
    checks = Checks()
    cfg = IMPORT_RUN
    hf_dir = os.path.join(tmp, "hf")
    make_hf_model(cfg).save_pretrained(hf_dir, safe_serialization=True)
    checks.expect(os.path.exists(os.path.join(hf_dir, "model.safetensors")),
                  "save_pretrained wrote model.safetensors")
    train_tokens, val_tokens, run_dir, ours, ours_val = engine_train(engine, cfg, hf_dir, tmp)

    # PyTorch: the model as the engine got it, read back from the directory.
    model = load_hf(hf_dir, checks)
    decay, other = decay_split(model)
    assert len(decay) == 2 + 4 * cfg.layers and len(other) == 2 + 8 * cfg.layers, (decay, other)

    # Before training: the engine's logits from the HF directory itself (its import) against
    # transformers'.
    check_logits(engine, hf_dir, model, cfg.vocab_size, cfg.max_seq_len, 11, "imported model",
                 tmp, checks)

    want = train_hf(cfg, model, train_tokens, val_tokens)
    compare_training(cfg, ours, ours_val, want, checks, LOSS_TOL, LOSS_TOL)

    # The trained weights, exported and read back by transformers, against PyTorch's after the
    # same steps: per tensor, max |ours - torch| / max |torch|.
    out_dir = os.path.join(tmp, "trained-hf")
    engine.export(run_dir, out_dir)
    compare_weights(load_hf(out_dir, checks).state_dict(), model.state_dict(), checks)
    return checks.exit_code()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["export", "import-train"])
    ap.add_argument("--cli", required=True, help="the cputrain-numa binary")
    ap.add_argument("--engine-logits", required=True, help="the engine_logits binary")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    args = ap.parse_args(argv)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{sys.executable}", flush=True)
    engine = Engine(args.cli, args.engine_logits)
    with tempfile.TemporaryDirectory(prefix="transformers_parity.") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        if args.mode == "export":
            return check_export(engine, work)
        return check_import_train(engine, work)


if __name__ == "__main__":
    sys.exit(main())
