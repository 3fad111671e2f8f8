#!/usr/bin/env python3
"""The trainer's Adafactor and SGD against transformers' Adafactor and torch.optim.SGD (CTest).

Run with the peers' environment (scripts/peers-env.sh), as family_parity.py, whose pieces these
are (transformers_parity's Engine, load_hf, make_hf_model, engine_train, compare_training,
compare_weights; llama_parity's make_llama; family_parity's reference_training: the float64
reference and its bounds); this file adds the optimizers (gpt2_reference.Optimizer, what
train_loop steps with) and the engine's optim.* keys that ask for each. Nothing is downloaded.

Every mode makes a model with transformers' own init (seeded; 1-D tensors perturbed so a wrong
mapping shows at step 0), saves it with save_pretrained, trains it for 20 steps with
`cputrain-numa train` from the directory (model.init_from; the optimizer chosen with --set
optim.name=... and its keys) and with transformers_parity.train_hf on the same model (B=4, T=32 <
maxT=64, no shuffle, 7 windows so the data order wraps, warmup 4 then cosine; the optimizer's
groups as AdamW's: weight decay on the 2-D tensors only; clipping before the step), and checks
the per-step losses and the validation losses (after 0, 10, 20 steps) within 1e-5 relative, the
pre-clip gradient norms within 1e-4, the per-step lr within 1e-12 (metrics.jsonl's "lr": the
schedule's; Adafactor with relative_step: its relative step size, min(1e-2, 1/sqrt(t)), t the
1-based step), and the trained weights, `export --format hf` and read back by transformers, within
WEIGHTS_TOL (1e-3 of each tensor's largest value) of the reference's.

  adafactor-gpt2        GPT2LMHeadModel (2 layers, C 64, vocab 300, which the engine pads to 384:
                        Adafactor factors and measures the RMS of the tied wte's 300 real rows)
                        and transformers.optimization.Adafactor with the class's defaults
                        (relative_step and scale_parameter: each tensor's step is 1e-2 times
                        max(eps2, its RMS); no first moment), no weight decay, no clipping. The
                        Conv1D weights are factored as transformers holds them, (in, out), c_attn
                        as one (64, 192) matrix. c_attn.bias starts at transformers' init, 0
                        (below).
  adafactor-llama       LlamaForCausalLM (llama_parity's model, untied lm_head, 4 heads over 2 KV
                        heads) and Adafactor as Hugging Face's Trainer makes it for `--optim
                        adafactor` (scale_parameter False, relative_step False, the schedule's lr
                        set on every group each step), with beta1 0.9 (the first moment on),
                        weight decay 0.1 (p -= wd * lr * p), clipping at 1.0. q_proj, k_proj,
                        v_proj and gate_proj, up_proj are factored one by one, as transformers
                        holds them, though the engine fuses them.
  sgd-gpt2              the GPT-2 model, torch.optim.SGD (foreach=False) with momentum 0.9, weight
                        decay 0.01 (d_p = g + wd * p), clipping at 1.0, lr 0.1.
  sgd-llama             the Llama model, SGD with momentum 0.9, nesterov, dampening 0, no weight
                        decay, 2 micro-batches a step (train.grad_accum_steps 2), clipping at 1.0,
                        lr 0.1.
  adafactor-llama-bf16, sgd-gpt2-bf16
                        those with train.precision bf16 against torch.autocast (fp32 master
                        weights, gradients and optimizer state): llama_parity's bf16 bounds (2e-3
                        losses, 5e-2 grad norms) or twice autocast's own distance from the fp32
                        run where larger; the weights are not compared (bf16 rounding moves them
                        further than WEIGHTS_TOL). Exit 77 (a CTest skip) where the engine's `topo
                        --json` says bf16 cannot run here.

Tolerances, and float64. The reference is the training loop run in float64 on a copy of the model
(family_parity.reference_training); where twice transformers' own fp32 run's distance from it is
above a bound, the bound is that twice, measured in the run and printed. Measured here, fp32
transformers against float64 (losses / grad norms / weights): adafactor-gpt2 1.2e-7 / 1.2e-6 /
5.0e-5, adafactor-llama 1.1e-7 / 6.4e-7 / 4.9e-7, sgd-gpt2 1.7e-7 / 7.8e-7 / 2.9e-7, sgd-llama
1.4e-7 / 1.5e-6 / 3.8e-7: the plain bounds hold with 20x room or more. autocast against fp32:
adafactor-llama 7.7e-5 / 5.9e-3, sgd-gpt2 2.5e-4 / 5.1e-3.

GPT-2's c_attn.bias under Adafactor. The key third of c_attn.bias has a gradient of 0 in exact
arithmetic (softmax ignores a shift shared by all keys) and of rounding noise in fp32, which
Adafactor divides by its own second moment (eps1 = 1e-30 added to its square) into a step of full
size: a random walk in fp32, none in float64. That third is not compared (compare_noisy). It also
reaches the rest of the tensor: its RMS sets the tensor's step size (scale_parameter) and the
update clipping's divisor. With c_attn.bias perturbed like the other biases (RMS 0.2), that moved
transformers' own fp32 run 1.6e-5 from float64 in losses and 1.7e-3 in the other tensors' weights
(1.3e-7 with the key third's gradient zeroed), bounds too loose to tell much. From 0, the tensor's
RMS stays below eps2 (its values below 3e-4 after 20 steps), so its step size is eps2 * 1e-2 (the
other branch of max(eps2, RMS), tested here too) and its noise reaches only its own query and value
thirds, through the clipping: those are compared within NOISY_TOL = 0.25 of their largest value
(fp32 transformers: 5-7% over six draws of the noise's signs).

self-check (no engine) shows the PyTorch side is not vacuous: for every mode the optimizer the
reference builds is the one named (class, group settings, weight decay on the 2-D tensors only),
its state after the run is that optimizer's (Adafactor: exp_avg_sq_row and exp_avg_sq_col of the
factored shapes for every 2-D tensor and exp_avg_sq for the others, exp_avg exactly when beta1 is
set, 20 steps; SGD: a momentum buffer per tensor), its logged lrs are the formula above, and its
losses and weights are far (100x the bounds) from an AdamW run of the same model: a script that
trained AdamW on both sides fails there. Then every mode passes against a stand-in for the engine
(StandIn: transformers itself, writing metrics.jsonl and the export), and stand-ins with a wrong
optimizer must fail, naming the check (FAULTS: AdamW for Adafactor; Adafactor with every second
moment full; Adafactor whose RMS counts the 84 padded vocabulary rows; SGD without nesterov; SGD
decaying every tensor).

Each mode takes about 11 s here (2 busy vCPUs; most of it importing torch and transformers),
self-check 42 s.

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
import family_parity as fp  # noqa: E402  (peft, through lora_parity)

import argparse  # noqa: E402
import copy  # noqa: E402
import dataclasses  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402
from typing import Callable, Dict, List, Optional, Tuple, Union  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2LMHeadModel, LlamaForCausalLM  # noqa: E402
from transformers.optimization import Adafactor  # noqa: E402

ref = tp.ref

# The runs: transformers_parity's import-train run and llama_parity's (B=4, T=32 < maxT=64, 7
# windows so the data order wraps, warmup 4 then cosine), 20 steps of one micro-batch, evaluated
# after 0, 10 and 20; each mode changes the optimizer's keys (CASES).
GPT2_RUN = dataclasses.replace(tp.IMPORT_RUN, name="optim-gpt2", steps=20, eval_every=10,
                               grad_accum_steps=1)
LLAMA_RUN = dataclasses.replace(lp.LLAMA_RUN, name="optim-llama", steps=20, eval_every=10,
                                grad_accum_steps=1)
LLAMA = lp.LlamaCase("untied lm_head, 4 heads over 2 KV heads (GQA)", tie=False)


def yaml_bool(b: bool) -> str:
    return "true" if b else "false"


@dataclasses.dataclass(frozen=True)
class AdafactorSpec:
    """transformers.optimization.Adafactor's arguments (defaults: the class's) and the engine's
    optim.adafactor.* keys that ask for the same. `fault`: Adafactor, or a subclass that gets it
    wrong for self-check."""
    scale_parameter: bool = True
    relative_step: bool = True
    warmup_init: bool = False
    decay_rate: float = -0.8
    clip_threshold: float = 1.0
    beta1: Optional[float] = None
    eps: Tuple[float, float] = (1e-30, 1e-3)
    fault: type = Adafactor  # self-check's faults: Unfactored, PaddedRows

    def sets(self) -> Dict[str, object]:
        a = "optim.adafactor."
        return {"optim.name": "adafactor",
                a + "scale_parameter": yaml_bool(self.scale_parameter),
                a + "relative_step": yaml_bool(self.relative_step),
                a + "warmup_init": yaml_bool(self.warmup_init),
                a + "decay_rate": repr(self.decay_rate),
                a + "clip_threshold": repr(self.clip_threshold),
                a + "beta1": repr(self.beta1 or 0.0),
                a + "eps1": repr(self.eps[0]), a + "eps2": repr(self.eps[1])}

    def relative_lr(self, step: int) -> float:
        """The relative step size of 0-based `step`, by transformers' own Adafactor._get_lr with
        the parameter scale off: what the engine logs as the step's lr."""
        return Adafactor._get_lr({"lr": None, "relative_step": True, "scale_parameter": False,
                                  "warmup_init": self.warmup_init, "eps": self.eps},
                                 {"step": step + 1})

    def optimizer(self) -> "ref.Optimizer":
        cls = self.fault

        def make(cfg, decayed, other):
            return cls([{"params": decayed, "weight_decay": cfg.weight_decay},
                        {"params": other, "weight_decay": 0.0}],
                       lr=None if self.relative_step else cfg.lr, eps=self.eps,
                       clip_threshold=self.clip_threshold, decay_rate=self.decay_rate,
                       beta1=self.beta1, scale_parameter=self.scale_parameter,
                       relative_step=self.relative_step, warmup_init=self.warmup_init)

        if self.relative_step:  # transformers refuses an lr then: the loop must not set one
            return ref.Optimizer(make, lambda cfg, s: self.relative_lr(s), scheduled=False)
        return ref.Optimizer(make)  # HF's Trainer: its scheduler sets group["lr"] each step


class Unfactored(Adafactor):
    """Adafactor keeping every tensor's full second moment (self-check's fault)."""

    @staticmethod
    def _get_options(param_group, param_shape):
        return False, param_group["beta1"] is not None


class PaddedRows(Adafactor):
    """Adafactor over GPT-2's wte as if it held the engine's padded vocabulary (self-check's
    fault): its RMS (the parameter scale; the update clipping) counts 384 rows, the 84 past
    vocab_size 0. (Its factored second moment is the real rows' either way: the padded rows scale
    the column means by 300/384 and the row factors' mean by the same, which cancel.)"""

    @staticmethod
    def _rms(tensor):
        rows = GPT2_RUN.padded_vocab if tensor.shape[0] == GPT2_RUN.vocab_size else tensor.shape[0]
        return tensor.norm(2) / ((tensor.numel() // tensor.shape[0] * rows) ** 0.5)


@dataclasses.dataclass(frozen=True)
class SGDSpec:
    """torch.optim.SGD's arguments (single-tensor path) and the engine's optim.* keys for them.
    decay_all is a fault for self-check: weight decay on every tensor, biases and norms too."""
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    decay_all: bool = False

    def sets(self) -> Dict[str, object]:
        return {"optim.name": "sgd", "optim.momentum": repr(self.momentum),
                "optim.dampening": repr(self.dampening),
                "optim.nesterov": yaml_bool(self.nesterov)}

    def optimizer(self) -> "ref.Optimizer":
        def make(cfg, decayed, other):
            groups = ([{"params": decayed + other, "weight_decay": cfg.weight_decay}]
                      if self.decay_all else
                      [{"params": decayed, "weight_decay": cfg.weight_decay},
                       {"params": other, "weight_decay": 0.0}])
            return torch.optim.SGD(groups, lr=cfg.lr, momentum=self.momentum,
                                   dampening=self.dampening, nesterov=self.nesterov,
                                   foreach=False)

        return ref.Optimizer(make)


@dataclasses.dataclass(frozen=True)
class Family:
    """A test model: how it is made (transformers' init, seeded, 1-D tensors perturbed), how it is
    loaded (tp.load_hf with `load_kwargs`), and the tensors whose values are partly rounding noise
    under Adafactor (`noisy`: compared on their own, compare_noisy)."""
    cls: type
    make: Callable[[], torch.nn.Module]
    load_kwargs: Tuple[Tuple[str, str], ...] = ()
    noisy: Tuple[str, ...] = ()

    def load(self, d: str, checks: "tp.Checks"):
        return tp.load_hf(d, checks, self.cls, **dict(self.load_kwargs))


def gpt2_qkv_bias_zero() -> GPT2LMHeadModel:
    """make_hf_model's GPT-2 with c_attn.bias back at transformers' init, 0 (module docstring:
    its RMS stays below eps2, so the noise of its key third reaches nothing else)."""
    model = tp.make_hf_model(GPT2_RUN)
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.bias.zero_()
    return model


C_ATTN_BIASES = tuple(f"transformer.h.{i}.attn.c_attn.bias" for i in range(GPT2_RUN.layers))
GPT2 = Family(GPT2LMHeadModel, lambda: tp.make_hf_model(GPT2_RUN))
GPT2_QKV_BIAS_ZERO = Family(GPT2LMHeadModel, gpt2_qkv_bias_zero, noisy=C_ATTN_BIASES)
LLAMA_FAMILY = Family(LlamaForCausalLM, lambda: lp.make_llama(LLAMA),
                      (("attn_implementation", "eager"),))


@dataclasses.dataclass(frozen=True)
class OptimCase:
    about: str
    family: Family
    run: "ref.RunConfig"
    spec: Union[AdafactorSpec, SGDSpec]


CASES: Dict[str, OptimCase] = {
    "adafactor-gpt2": OptimCase(
        "GPT-2 (c_attn.bias from 0), Adafactor's defaults (relative_step, scale_parameter, no "
        "first moment), no weight decay, no clipping", GPT2_QKV_BIAS_ZERO,
        dataclasses.replace(GPT2_RUN, weight_decay=0.0, grad_clip=0.0), AdafactorSpec()),
    "adafactor-llama": OptimCase(
        "Llama, Adafactor as the Trainer's --optim adafactor (scale_parameter and relative_step "
        "off, the schedule's lr) with beta1 0.9, weight decay 0.1, clipping 1.0", LLAMA_FAMILY,
        dataclasses.replace(LLAMA_RUN, weight_decay=0.1, grad_clip=1.0),
        AdafactorSpec(scale_parameter=False, relative_step=False, beta1=0.9)),
    "sgd-gpt2": OptimCase(
        "GPT-2, SGD momentum 0.9, weight decay 0.01, clipping 1.0", GPT2,
        dataclasses.replace(GPT2_RUN, lr=0.1, min_lr=0.01, weight_decay=0.01, grad_clip=1.0),
        SGDSpec(momentum=0.9)),
    "sgd-llama": OptimCase(
        "Llama, SGD momentum 0.9, nesterov, dampening 0, 2 micro-batches a step", LLAMA_FAMILY,
        dataclasses.replace(LLAMA_RUN, lr=0.1, min_lr=0.01, weight_decay=0.0, grad_clip=1.0,
                            grad_accum_steps=2),
        SGDSpec(momentum=0.9, nesterov=True)),
}
for _name in ("adafactor-llama", "sgd-gpt2"):
    CASES[_name + "-bf16"] = dataclasses.replace(
        CASES[_name], about=CASES[_name].about + "; train.precision bf16 against torch.autocast",
        run=dataclasses.replace(CASES[_name].run, precision="bf16"))

# c_attn.bias of adafactor-gpt2 (module docstring): its query and value thirds within this of
# their largest value; fp32 transformers is 5-7% from float64 there over six draws of the key
# third's noise (its signs re-drawn each step).
NOISY_TOL = 0.25


def compare_noisy(trained: Dict[str, torch.Tensor], reference: Dict[str, torch.Tensor],
                  names: Tuple[str, ...], C: int, checks: "tp.Checks") -> None:
    """GPT-2's c_attn.bias under Adafactor (module docstring): the key third not at all (0 in
    exact arithmetic, rounding noise in both), the query and value thirds within NOISY_TOL."""
    def thirds(sd):
        return {f"{n}[{what}]": sd[n][i * C:(i + 1) * C]
                for n in names for i, what in ((0, "query"), (2, "value"))}

    tp.compare_weights(thirds(trained), thirds(reference), checks, NOISY_TOL)


def check_case(engine, case: OptimCase, tmp: str) -> int:
    checks = tp.Checks()
    cfg = case.run
    print(f"{case.family.cls.__name__}: {case.about}; {cfg.steps} steps, {cfg.precision}; the "
          f"engine's keys {case.spec.sets()}", flush=True)
    hf_dir = os.path.join(tmp, "hf")
    case.family.make().save_pretrained(hf_dir, safe_serialization=True)
    model = case.family.load(hf_dir, checks)
    train_tokens, val_tokens, run_dir, ours, ours_val = tp.engine_train(
        engine, cfg, hf_dir, tmp, sets=case.spec.sets())
    r = fp.reference_training(cfg, model, train_tokens, val_tokens, case.spec.optimizer(),
                              case.family.noisy)
    tp.compare_training(cfg, ours, ours_val, r.want, checks, r.loss_tol, r.norm_tol)
    if cfg.precision != "fp32":
        return checks.exit_code()
    export_dir = os.path.join(tmp, "trained-hf")
    engine.export(run_dir, export_dir)
    trained = case.family.load(export_dir, checks).state_dict()
    want = r.model.state_dict()
    noisy = case.family.noisy
    tp.compare_weights({k: v for k, v in trained.items() if k not in noisy},
                       {k: v for k, v in want.items() if k not in noisy}, checks, r.weights_tol)
    if noisy:
        compare_noisy(trained, want, noisy, cfg.channels, checks)
    return checks.exit_code()


# ---- the stand-in engine and the self-check ---------------------------------------------------
class StandIn:
    """What the engine is asked for, done by transformers: train -> RUN/metrics.jsonl
    (llama_parity.write_metrics) and RUN/hf, training with `optimizer` (default the case's own;
    another one is a fault the checks must catch) after checking the engine was given the case's
    config and optim.* keys; export -> save_pretrained."""

    def __init__(self, case: OptimCase, optimizer: Optional["ref.Optimizer"] = None):
        self.case, self.optimizer = case, optimizer or case.spec.optimizer()

    def _load(self, d: str):
        return self.case.family.cls.from_pretrained(d, torch_dtype=torch.float32,
                                                    **dict(self.case.family.load_kwargs))

    def train(self, config: str, sets: Dict[str, object], args: Tuple[str, ...] = ()) -> None:
        cfg = self.case.run
        with open(config) as f:
            assert f.read() == ref.config_yaml(cfg), "config.yaml is not config_yaml(cfg)"
        want = self.case.spec.sets()
        asked = {k: sets.get(k) for k in want}
        assert asked == want, f"the engine is asked for {asked}, not {want}"
        run_dir = str(sets["train.out_dir"])
        model = self._load(str(sets["model.init_from"]))
        tokens = [ref.decode_tokens(open(str(sets[k]), "rb").read())
                  for k in ("data.train", "data.val")]
        lp.write_metrics(run_dir, cfg, tp.train_hf(cfg, model, *tokens, self.optimizer))
        model.save_pretrained(os.path.join(run_dir, "hf"), safe_serialization=True)

    def export(self, run_dir: str, out_dir: str) -> None:
        self._load(os.path.join(run_dir, "hf")).save_pretrained(out_dir, safe_serialization=True)


def state_problems(case: OptimCase, opt: torch.optim.Optimizer,
                   names: Dict[torch.Tensor, str]) -> List[str]:
    """What is wrong with the optimizer a reference run built and its state after the run: its
    class and group settings are the case's, and each tensor's state is that optimizer's."""
    cfg, spec, problems = case.run, case.spec, []
    want_type = Adafactor if isinstance(spec, AdafactorSpec) else torch.optim.SGD
    if type(opt) is not want_type:
        return [f"the reference built {type(opt).__name__}, not {want_type.__name__}"]
    groups = [(g["weight_decay"], len(g["params"])) for g in opt.param_groups]
    if [wd for wd, _ in groups] != [cfg.weight_decay, 0.0]:
        problems.append(f"groups (weight decay, tensors) {groups}: want {cfg.weight_decay} on the "
                        f"2-D tensors, 0 on the others")
    if isinstance(spec, AdafactorSpec):
        want = {"scale_parameter": spec.scale_parameter, "relative_step": spec.relative_step,
                "warmup_init": spec.warmup_init, "decay_rate": spec.decay_rate,
                "clip_threshold": spec.clip_threshold, "beta1": spec.beta1, "eps": spec.eps}
    else:
        want = {"momentum": spec.momentum, "dampening": spec.dampening,
                "nesterov": spec.nesterov, "foreach": False}
    for g in opt.param_groups:
        got = {k: g[k] for k in want}
        if got != want:
            problems.append(f"group settings {got}, want {want}")
    factored = 0
    for p, n in names.items():
        st = opt.state[p]
        if isinstance(spec, SGDSpec):
            buf = st.get("momentum_buffer")
            if buf is None or buf.shape != p.shape or not buf.abs().max() > 0:
                problems.append(f"{n}: no momentum buffer of its shape")
            continue
        rows, cols = tuple(p.shape[:-1]), tuple(p.shape[:-2] + p.shape[-1:])
        shapes = {k: tuple(v.shape) for k, v in st.items() if torch.is_tensor(v) and v.dim()}
        want_st = ({"exp_avg_sq_row": rows, "exp_avg_sq_col": cols} if p.dim() >= 2 else
                   {"exp_avg_sq": tuple(p.shape)})
        if spec.beta1 is not None:
            want_st["exp_avg"] = tuple(p.shape)
        if shapes != want_st or st.get("step") != cfg.steps:
            problems.append(f"{n} {tuple(p.shape)}: state {shapes} after step {st.get('step')}, "
                            f"want {want_st} after {cfg.steps}")
        factored += p.dim() >= 2
    kind = ("momentum buffers" if isinstance(spec, SGDSpec) else
            f"{factored} factored (exp_avg_sq_row, exp_avg_sq_col), {len(names) - factored} full")
    print(f"  {type(opt).__name__} state after {cfg.steps} steps: {len(names)} tensors, {kind}; "
          f"groups (weight decay, tensors) {groups}", flush=True)
    return problems


def check_reference(case: OptimCase) -> List[str]:
    """The reference run of `case` is its optimizer's (state_problems), logs the lr the engine must
    log, and is far from an AdamW run of the same model and data (train_loop's default): a script
    that trained AdamW on both sides fails here."""
    cfg = case.run
    model = case.family.make()
    tokens = ref.make_tokens(cfg)
    made: List[torch.optim.Optimizer] = []
    own = case.spec.optimizer()
    capture = dataclasses.replace(own, make=lambda *a: made.append(own.make(*a)) or made[-1])
    trained = copy.deepcopy(model)
    rec = tp.train_hf(cfg, trained, *tokens, capture)
    names = {p: n for n, p in trained.named_parameters()}
    problems = state_problems(case, made[0], names)
    relative = isinstance(case.spec, AdafactorSpec) and case.spec.relative_step
    assert not (relative and case.spec.warmup_init), "no mode has warmup_init (its lr: 1e-6 * t)"
    lrs = [min(1e-2, 1 / math.sqrt(s + 1)) if relative else ref.lr_at(cfg, s)
           for s in range(cfg.steps)]
    if rec["lrs"] != lrs:
        problems.append(f"logged lrs {rec['lrs']}, want {lrs}")
    adamw_model = copy.deepcopy(model)
    adamw = tp.train_hf(cfg, adamw_model, *tokens)
    dl = max(abs(a - b) / abs(b) for a, b in zip(rec["steps"], adamw["steps"]))
    dw = fp.weights_distance(trained.state_dict(), adamw_model.state_dict())
    print(f"  against AdamW on the same run: losses {dl:.2e} apart, weights {dw:.2e}", flush=True)
    if dl < 100 * lp.LOSS_TOL or dw < 100 * tp.WEIGHTS_TOL:
        problems.append(f"the run is {dl:.2e} (losses) and {dw:.2e} (weights) from AdamW's: want "
                        f"at least {100 * lp.LOSS_TOL:g} and {100 * tp.WEIGHTS_TOL:g}")
    return problems


# Stand-ins with the wrong optimizer: (mode, the stand-in's optimizer, what a failure must name).
FAULTS: Dict[str, Tuple[str, "ref.Optimizer", str]] = {
    "adamw": ("adafactor-gpt2", ref.ADAMW, "per-step loss"),
    "unfactored": ("adafactor-llama",
                   dataclasses.replace(CASES["adafactor-llama"].spec, fault=Unfactored).optimizer(),
                   "per-step loss"),
    "padded-rows": ("adafactor-gpt2",
                    dataclasses.replace(CASES["adafactor-gpt2"].spec, fault=PaddedRows).optimizer(),
                    "per-step loss"),
    "no-nesterov": ("sgd-llama", SGDSpec(momentum=0.9).optimizer(), "per-step loss"),
    "decay-all": ("sgd-gpt2", SGDSpec(momentum=0.9, decay_all=True).optimizer(),
                  "trained weights"),
}


def self_check(tmp: str) -> int:
    """check_reference for every mode, every mode against the stand-in (all checks must pass),
    then each FAULTS stand-in (its mode must fail, naming the check)."""
    problems = []
    for name, case in CASES.items():
        print(f"==== self-check {name}: the reference", flush=True)
        problems += [f"{name}: {p}" for p in check_reference(case)]
    for name, case in CASES.items():
        d = os.path.join(tmp, name)
        os.makedirs(d)
        print(f"==== self-check {name}: against the stand-in", flush=True)
        if check_case(StandIn(case), case, d) != 0:
            problems.append(f"{name}: a check failed against the stand-in")
    for fault, (name, optimizer, named) in FAULTS.items():
        d = os.path.join(tmp, "fault-" + fault)
        os.makedirs(d)
        case = CASES[name]
        if not lp.fault_caught(f"{fault} ({name})", named,
                               lambda: check_case(StandIn(case, optimizer), case, d)):
            problems.append(f"fault {fault}: not caught, or no failure names {named!r}")
    for p in problems:
        print("SELF-CHECK FAILED:", p)
    print(f"self-check: {'FAILED' if problems else 'ok'} ({len(CASES)} modes, {len(FAULTS)} "
          f"faults; transformers {transformers.__version__}, torch {torch.__version__})")
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=sorted(CASES) + ["self-check"])
    ap.add_argument("--cli", help="the cputrain-numa binary")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.mode != "self-check" and not args.cli:
        ap.error("--cli is required (but for self-check)")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{sys.executable}", flush=True)
    with tempfile.TemporaryDirectory(prefix="optim_parity.") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        if args.mode == "self-check":
            return self_check(work)
        case = CASES[args.mode]
        if case.run.precision == "bf16" and tp.refuses_bf16(args.cli):
            return lp.EXIT_SKIP
        return check_case(tp.Engine(args.cli, ""), case, work)


if __name__ == "__main__":
    sys.exit(main())
