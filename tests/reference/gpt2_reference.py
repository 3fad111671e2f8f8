#!/usr/bin/python3
"""PyTorch reference for cputrain-numa: a GPT-2 in llm.c's parameter layout, and the fixtures
the C++ numerics tests compare against.

Modes (run with Debian's /usr/bin/python3, which has torch 1.13 and numpy):
  --out DIR              write every config's fixture directory DIR/<name>/
  --verify DIR           regenerate in memory and check the files in DIR/<name>/ are reproduced
  --check-against DIR    load DIR/tiny_init_seed1337.bin + DIR/kjv_bytes_200k.bin (an
                         independent PyTorch run, /work/shared/fixtures) and compare our 20
                         losses with DIR/tiny_loss_1proc.jsonl
  --floor                measure how far fp32 torch is from fp64 torch on each config (the
                         rounding floor the C++ tolerances are based on)
  --bf16-variants        train `odd` under torch.autocast bf16 and under two emulations of bf16
                         products, and print how far apart they and fp32 are (README.md,
                         "BF16 autocast")

The binary layouts, the training rules and the tolerances are documented in README.md next to
this file; the code below is the executable form of that document.
"""
import os

# OpenBLAS ignores torch.set_num_threads(); it reads these when torch is imported (docs/machine-notes.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import contextlib
import dataclasses
import json
import math
import re
import struct
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False  # no TF32 anywhere (CPU ignores it; be explicit)
torch.backends.cudnn.allow_tf32 = False

# ---- binary formats (llm.c) ------------------------------------------------------------------
CHECKPOINT_MAGIC, CHECKPOINT_VERSION = 20240326, 3  # fp32 checkpoint
TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1          # uint16 token file
DEBUG_MAGIC, DEBUG_VERSION = 20240327, 2            # one-batch debug state
HEADER_INTS = 256


# ---- configs ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class RunConfig:
    name: str
    # model
    layers: int          # L
    channels: int        # C
    heads: int           # NH
    vocab_size: int      # V
    max_seq_len: int     # maxT
    seed: int
    # data
    batch_size: int      # B (global, divisible by 4 so 1, 2 and 4 groups can split it)
    seq_len: int         # T
    train_windows: int   # n = (N-1) div (B*T) of the train file; < steps makes the order wrap
    train_extra: int     # tokens after the last full window (not a multiple of B*T on purpose)
    val_windows: int     # 0 = no val.bin
    # optim
    lr: float
    min_lr: float
    schedule: str        # "constant" | "cosine"
    warmup_steps: int
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    grad_clip: float     # 0 = no clipping
    # train
    steps: int
    eval_every: int
    eval_batches: int
    checkpoint_every: int
    grad_accum_steps: int = 1  # k micro-batches of B x T per step, each loss scaled 1/k
    precision: str = "fp32"    # the trainer's train.precision: "fp32" or "bf16" (torch.autocast)

    def __post_init__(self):
        assert self.precision in ("fp32", "bf16"), self.precision

    @property
    def padded_vocab(self) -> int:  # Vp: V rounded up to a multiple of 128
        return (self.vocab_size + 127) // 128 * 128


CONFIGS: Dict[str, RunConfig] = {
    c.name: c
    for c in [
        # The same run as /work/shared/fixtures (B=4, T=32, AdamW 1e-3, wd 0), on our own data.
        RunConfig(name="tiny", layers=2, channels=64, heads=4, vocab_size=256, max_seq_len=64,
                  seed=1337, batch_size=4, seq_len=32, train_windows=32, train_extra=51,
                  val_windows=0, lr=1e-3, min_lr=1e-3, schedule="constant", warmup_steps=0,
                  beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, grad_clip=0.0, steps=20,
                  eval_every=0, eval_batches=1, checkpoint_every=0),
        # Nothing a power of two: head size 16 but C=48, NH=3, V=300 padded to 384, T=24 < maxT=40.
        # 7 train windows for 20 steps, so the data order wraps (s mod n) twice.
        RunConfig(name="odd", layers=3, channels=48, heads=3, vocab_size=300, max_seq_len=40,
                  seed=4242, batch_size=4, seq_len=24, train_windows=7, train_extra=37,
                  val_windows=3, lr=3e-3, min_lr=3e-4, schedule="cosine", warmup_steps=5,
                  beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0, steps=20,
                  eval_every=10, eval_batches=2, checkpoint_every=0),
        # `odd` with gradient accumulation: 3 micro-batches of B=4 per step, each loss scaled 1/3
        # (k micro-batches of B x T: 60 windows of 7 in 20 steps, so steps straddle epochs).
        RunConfig(name="accum", layers=3, channels=48, heads=3, vocab_size=300, max_seq_len=40,
                  seed=4242, batch_size=4, seq_len=24, train_windows=7, train_extra=37,
                  val_windows=3, lr=3e-3, min_lr=3e-4, schedule="cosine", warmup_steps=5,
                  beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0, steps=20,
                  eval_every=10, eval_batches=2, checkpoint_every=0, grad_accum_steps=3),
        # `odd` under torch.autocast("cpu", bfloat16): same model.bin and data, bf16 products.
        RunConfig(name="bf16", layers=3, channels=48, heads=3, vocab_size=300, max_seq_len=40,
                  seed=4242, batch_size=4, seq_len=24, train_windows=7, train_extra=37,
                  val_windows=3, lr=3e-3, min_lr=3e-4, schedule="cosine", warmup_steps=5,
                  beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0, steps=20,
                  eval_every=10, eval_batches=2, checkpoint_every=0, precision="bf16"),
    ]
}


def lr_at(cfg: RunConfig, step: int) -> float:
    """Learning rate of 0-based step `step`."""
    if cfg.schedule == "constant":
        return cfg.lr
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / (cfg.steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * progress))


# ---- parameters: the one table everything else derives from ---------------------------------
# (name, shape given (L, C, Vp, maxT), init, residual projection?, weight-decayed?)
#   init: "normal" (std 0.02, or 0.02/sqrt(2L) for residual projections), "zero" or "one".
#   wte's padding rows V..Vp-1 stay zero.
PARAMS = [
    ("wte",      lambda L, C, Vp, T: (Vp, C),        "normal", False, True),
    ("wpe",      lambda L, C, Vp, T: (T, C),         "normal", False, True),
    ("ln1w",     lambda L, C, Vp, T: (L, C),         "one",    False, False),
    ("ln1b",     lambda L, C, Vp, T: (L, C),         "zero",   False, False),
    ("qkvw",     lambda L, C, Vp, T: (L, 3 * C, C),  "normal", False, True),
    ("qkvb",     lambda L, C, Vp, T: (L, 3 * C),     "zero",   False, False),
    ("attprojw", lambda L, C, Vp, T: (L, C, C),      "normal", True,  True),
    ("attprojb", lambda L, C, Vp, T: (L, C),         "zero",   False, False),
    ("ln2w",     lambda L, C, Vp, T: (L, C),         "one",    False, False),
    ("ln2b",     lambda L, C, Vp, T: (L, C),         "zero",   False, False),
    ("fcw",      lambda L, C, Vp, T: (L, 4 * C, C),  "normal", False, True),
    ("fcb",      lambda L, C, Vp, T: (L, 4 * C),     "zero",   False, False),
    ("fcprojw",  lambda L, C, Vp, T: (L, C, 4 * C),  "normal", True,  True),
    ("fcprojb",  lambda L, C, Vp, T: (L, C),         "zero",   False, False),
    ("lnfw",     lambda L, C, Vp, T: (C,),           "one",    False, False),
    ("lnfb",     lambda L, C, Vp, T: (C,),           "zero",   False, False),
]
PARAM_NAMES = [p[0] for p in PARAMS]
DECAYED = [p[0] for p in PARAMS if p[4]]


@dataclasses.dataclass(frozen=True)
class ModelShape:
    L: int
    C: int
    NH: int
    V: int
    Vp: int
    maxT: int

    def param_shapes(self) -> List[Tuple[str, Tuple[int, ...]]]:
        return [(name, shape(self.L, self.C, self.Vp, self.maxT)) for name, shape, *_ in PARAMS]


def shape_of(cfg: RunConfig) -> ModelShape:
    return ModelShape(cfg.layers, cfg.channels, cfg.heads, cfg.vocab_size, cfg.padded_vocab,
                      cfg.max_seq_len)


def init_params(ms: ModelShape, seed: int) -> Dict[str, torch.Tensor]:
    """GPT-2 init: N(0, 0.02) for wte's real rows, wpe and the weight matrices, 0.02/sqrt(2L) for
    the two residual projections, zero biases, LayerNorm weight 1. Draws in table order from one
    torch.Generator seeded with `seed` (the C++ RNG differs; the tests load model.bin)."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for (name, _, init, residual, _), (_, shape) in zip(PARAMS, ms.param_shapes()):
        t = torch.zeros(shape, dtype=torch.float32)
        if init == "one":
            t.fill_(1.0)
        elif init == "normal":
            std = 0.02 / math.sqrt(2 * ms.L) if residual else 0.02
            rows = t[: ms.V] if name == "wte" else t  # wte padding rows stay zero
            rows.normal_(0.0, std, generator=gen)
        params[name] = t
    return params


# ---- matrix products: fp32, or bf16 operands with fp32 results --------------------------------
def round_bf16(t: torch.Tensor) -> torch.Tensor:
    """t rounded to bf16 (round to nearest even) and widened back: a bf16 operand's value."""
    return t.to(torch.bfloat16).float()


class Bf16OperandsMatmul(torch.autograd.Function):
    """a @ b with both operands rounded to bf16, the product accumulated and returned in fp32: the
    bf16 plan of the C++ engine (bf16 inputs to the dot products, fp32 accumulators and outputs).
    Backward rounds the upstream gradient too and multiplies it with the saved rounded operands,
    fp32 results. a is (..., M, K) and b (..., K, N) with the same leading dims (or none)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a16, b16 = round_bf16(a), round_bf16(b)
        ctx.save_for_backward(a16, b16)
        return a16 @ b16

    @staticmethod
    def backward(ctx, dout: torch.Tensor):
        a16, b16 = ctx.saved_tensors
        d16 = round_bf16(dout)
        return d16 @ b16.transpose(-2, -1), a16.transpose(-2, -1) @ d16


def bf16_operands_linear(x: torch.Tensor, w: torch.Tensor,
                         b: Optional[torch.Tensor]) -> torch.Tensor:
    """F.linear with Bf16OperandsMatmul; x is (..., IN), w (OUT, IN). The bias is added in fp32 to
    the fp32 product (the engine adds it in the epilogue; it is no operand of a dot product)."""
    out = Bf16OperandsMatmul.apply(x.reshape(-1, x.shape[-1]), w.t())
    out = out.view(*x.shape[:-1], w.shape[0])
    return out if b is None else out + b


@dataclasses.dataclass(frozen=True)
class Products:
    """How gpt2_forward computes its matrix products. linear(x, w, b) (F.linear's signature) is
    used by the 4 linear layers of a block and by the LM head; attention(a, b) = a @ b by q @ k^T
    and att @ v."""
    linear: Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]
    attention: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


FP32_PRODUCTS = Products(linear=F.linear, attention=torch.matmul)


@dataclasses.dataclass(frozen=True)
class Precision:
    """A way to run the model: under torch.autocast or not, and with which products."""
    autocast: bool
    products: Products
    about: str

    def context(self) -> contextlib.AbstractContextManager:
        if self.autocast:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()


# "fp32" and "bf16" are the trainer's train.precision values; the two emulations are measured by
# --bf16-variants (README.md, "BF16 autocast") and "bf16-emulated" is recorded in the bf16 fixture.
PRECISIONS: Dict[str, Precision] = {
    "fp32": Precision(False, FP32_PRODUCTS, "fp32"),
    "bf16": Precision(True, FP32_PRODUCTS, "torch.autocast('cpu', dtype=torch.bfloat16)"),
    "bf16-emulated": Precision(
        False, Products(linear=bf16_operands_linear, attention=Bf16OperandsMatmul.apply),
        "bf16 operands, fp32 accumulation and outputs: linear layers, LM head, q@k^T, att@v"),
    "bf16-emulated-linear": Precision(
        False, Products(linear=bf16_operands_linear, attention=torch.matmul),
        "bf16 operands, fp32 accumulation and outputs: linear layers and LM head only"),
}


class CannotReproduce(RuntimeError):
    """This torch on this CPU does not compute a fixture the way the fixture is defined."""


def require_fp32_accumulation() -> None:
    """Raises CannotReproduce unless this torch's bf16 matrix products accumulate in fp32.
    torch 1.13 hands bf16 mm/bmm to oneDNN (fp32 accumulators) only on CPUs with AVX512BW, VL and
    DQ; elsewhere its own gemm accumulates in bf16 (256 + 1 rounds to 256). With oneDNN disabled
    that moved the bf16 run's losses by 1.0e-3 and its step-0 gradients by 4.8% of a tensor's max
    (README.md, "BF16 autocast"): another computation than the fixture's and the engine's."""
    # Ones sum to 512 = 2^9, exact in bf16. b is contiguous on purpose: torch's own gemm
    # accumulates in bf16 only on that path (with b = a.t() it sums in fp32 and gives 512).
    a = torch.ones(16, 512, dtype=torch.bfloat16)
    b = torch.ones(512, 16, dtype=torch.bfloat16)
    mm = (a @ b)[0, 0].item()
    bmm = torch.bmm(a[None], b[None])[0, 0, 0].item()
    if mm != 512 or bmm != 512:
        raise CannotReproduce(
            f"this torch accumulates bf16 matrix products in bf16 (a 512-term sum of ones gives "
            f"mm {mm:g}, bmm {bmm:g}), so torch.autocast bf16 here is not the computation the "
            f"bf16 fixture records. HINT: regenerate and verify it on a CPU with AVX512BW/VL/DQ "
            f"(torch uses oneDNN there), or with torch.backends.mkldnn enabled")


# ---- the model -------------------------------------------------------------------------------
def gpt2_forward(p: Dict[str, torch.Tensor], ms: ModelShape, idx: torch.Tensor,
                 targets: Optional[torch.Tensor], mm: Products = FP32_PRODUCTS):
    """idx, targets are (B,T) int64. Returns logits (B,T,V) over the real vocab and the mean
    cross-entropy loss (or None). Works in the dtype of the parameters (and of autocast, when the
    caller enters it); `mm` computes the matrix products."""
    B, T = idx.shape
    C, NH, L, V = ms.C, ms.NH, ms.L, ms.V
    hs = C // NH
    x = F.embedding(idx, p["wte"]) + p["wpe"][:T]  # (B,T,C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = mm.linear(h, p["qkvw"][l], p["qkvb"][l])  # (B,T,3C), rows of qkvw are [q; k; v]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)  # (B,NH,T,hs)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = mm.attention(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B,NH,T,T)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = mm.attention(att, v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + mm.linear(y, p["attprojw"][l], p["attprojb"][l])
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(mm.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")  # (B,T,4C)
        x = x + mm.linear(h, p["fcprojw"][l], p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = mm.linear(x, p["wte"][:V], None)  # tied head, real vocab: padding never predicted
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.view(-1, V), targets.reshape(-1))
    return logits, loss


# ---- deterministic, learnable data -----------------------------------------------------------
class SplitMix64:
    """A PRNG defined by integer arithmetic only, so the text is the same everywhere."""

    def __init__(self, seed: int):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def pick(self, seq):
        return seq[self.next() % len(seq)]


# A toy grammar; the non-ASCII words put bytes >= 128 (2- and 3-byte UTF-8) into the data.
_DET = ["the", "a", "every", "no", "some", "this", "that", "one"]
_ADJ = ["old", "quick", "quiet", "red", "naïve", "small", "great", "über", "golden", "dark",
        "bright", "crème", "façade"]
_NOUN = ["river", "mountain", "café", "fox", "king", "señor", "city", "garden", "road", "sea",
         "Ångström", "bird", "stone", "piñata", "smörgåsbord", "jalapeño", "résumé", "→arrow"]
_VERB = ["sees", "follows", "builds", "carries", "finds", "keeps", "loves", "knows", "crosses",
         "remembers", "watches"]
_PREP = ["near", "under", "beyond", "with", "from", "over"]
_END = [".", ".", ".", "!", "?", ";"]


def make_text(seed: int, min_chars: int) -> str:
    rng = SplitMix64(seed)
    out: List[str] = []
    n = 0
    while n < min_chars:
        words = [rng.pick(_DET)]
        if rng.next() % 2:
            words.append(rng.pick(_ADJ))
        words += [rng.pick(_NOUN), rng.pick(_VERB), rng.pick(_DET)]
        if rng.next() % 3 == 0:
            words.append(rng.pick(_ADJ))
        words.append(rng.pick(_NOUN))
        if rng.next() % 2:
            words += [rng.pick(_PREP), rng.pick(_DET), rng.pick(_NOUN)]
        s = " ".join(words)
        s = s[0].upper() + s[1:] + rng.pick(_END) + ("\n" if rng.next() % 5 == 0 else " ")
        out.append(s)
        n += len(s)
    return "".join(out)


_PIECE_RE = re.compile(r" ?[^ .!?;\n]+|[.!?;\n ]")


def tokenize(text: str, vocab_size: int) -> List[int]:
    """Bytes tokenizer (ids 0..255 = UTF-8 bytes) plus, when V > 256, a word-level vocabulary:
    the V-256 most frequent pieces (" word", punctuation runs; ties by text) get ids 256..V-1 in
    order of frequency. A piece not in that vocabulary is emitted as its UTF-8 bytes."""
    pieces = _PIECE_RE.findall(text)
    assert "".join(pieces) == text
    extra: Dict[str, int] = {}
    if vocab_size > 256:
        counts: Dict[str, int] = {}
        for pc in pieces:
            if len(pc.encode("utf-8")) > 1:
                counts[pc] = counts.get(pc, 0) + 1
        ranked = sorted(counts, key=lambda s: (-counts[s], s))[: vocab_size - 256]
        extra = {s: 256 + i for i, s in enumerate(ranked)}
    ids: List[int] = []
    for pc in pieces:
        if pc in extra:
            ids.append(extra[pc])
        else:
            ids.extend(pc.encode("utf-8"))
    return ids


def make_tokens(cfg: RunConfig) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """train (and val) token arrays: one text stream, train first, val the continuation."""
    BT = cfg.batch_size * cfg.seq_len
    n_train = cfg.train_windows * BT + 1 + cfg.train_extra
    n_val = cfg.val_windows * BT + 1 if cfg.val_windows else 0
    need = n_train + n_val
    chars = need  # word tokens make ids shorter than the text: grow the text until it suffices
    while len(ids := tokenize(make_text(cfg.seed, chars), cfg.vocab_size)) < need:
        chars *= 2
    arr = np.asarray(ids[:need], dtype=np.uint16)
    assert int(arr.max()) < cfg.vocab_size
    train = arr[:n_train]
    val = arr[n_train:] if n_val else None
    # The fixture must exercise every part of the vocabulary it claims to: bytes >= 128 and, for
    # V > 256, every id 256..V-1 (so the head's last real column is trained and checked).
    assert int(train.max()) >= 128
    if cfg.vocab_size > 256:
        missing = set(range(256, cfg.vocab_size)) - set(train.tolist())
        assert not missing, f"{cfg.name}: ids {sorted(missing)} absent from train.bin"
    return train, val


def window(tokens: np.ndarray, B: int, T: int, step: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Batch of data position `step` (the step with k = 1; micro-batch j of step s reads position
    s*k + j): window i = step mod n, n = (N-1) div (B*T). The trainer reads windows so with
    data.shuffle: false."""
    n = (len(tokens) - 1) // (B * T)
    i = step % n
    buf = torch.from_numpy(tokens[i * B * T: i * B * T + B * T + 1].astype(np.int64))
    return buf[:-1].view(B, T), buf[1:].view(B, T)


# ---- training --------------------------------------------------------------------------------
def global_grad_norm(params: List[torch.Tensor]) -> torch.Tensor:
    """Exactly clip_grad_norm_'s norm: the 2-norm of the per-tensor 2-norms."""
    return torch.norm(torch.stack([torch.norm(p.grad.detach(), 2.0) for p in params]), 2.0)


def forward(p, ms: ModelShape, idx: torch.Tensor, targets: Optional[torch.Tensor],
            prec: Precision):
    """gpt2_forward in precision `prec`. The caller runs backward() outside autocast, as
    PyTorch's autocast documentation asks: the backward ops take the forward ops' dtypes."""
    with prec.context():
        return gpt2_forward(p, ms, idx, targets, prec.products)


def val_loss(p, ms, val: np.ndarray, cfg: RunConfig, prec: Precision) -> float:
    """Mean of the losses of val windows 0..eval_batches-1 (each window as in `window`)."""
    with torch.no_grad():
        losses = [forward(p, ms, *window(val, cfg.batch_size, cfg.seq_len, i), prec)[1].item()
                  for i in range(cfg.eval_batches)]
    return float(np.float32(sum(losses) / len(losses)))


# ---- optimizers: how train_loop updates the weights -------------------------------------------
@dataclasses.dataclass(frozen=True)
class Optimizer:
    """How train_loop updates the weights. make(cfg, decayed, other) builds the torch optimizer
    over two groups: `decayed` with weight decay cfg.weight_decay, `other` with none. lr(cfg, step)
    is the learning rate of 0-based `step`, which the loop records; scheduled: the loop sets it on
    every group before the step (an lr scheduler's work, as Hugging Face's Trainer does), or, when
    False, leaves the optimizer to compute its own step size (transformers' Adafactor with
    relative_step, which refuses an lr; optim_parity.py)."""
    make: Callable[[RunConfig, List[torch.Tensor], List[torch.Tensor]], torch.optim.Optimizer]
    lr: Callable[[RunConfig, int], float] = lr_at
    scheduled: bool = True


def make_adamw(cfg: RunConfig, decayed: List[torch.Tensor],
               other: List[torch.Tensor]) -> torch.optim.Optimizer:
    """The trainer's default optimizer: torch.optim.AdamW, the single-tensor path (foreach=False),
    betas and eps from cfg."""
    return torch.optim.AdamW(
        [{"params": decayed, "weight_decay": cfg.weight_decay},
         {"params": other, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, foreach=False)


ADAMW = Optimizer(make_adamw)  # every fixture's


def train_loop(cfg: RunConfig, decayed: List[torch.Tensor], other: List[torch.Tensor],
               ordered: List[torch.Tensor], micro_loss: Callable, evaluate: Optional[Callable],
               train_tokens: np.ndarray, optimizer: Optimizer = ADAMW) -> dict:
    """The training rules the engine implements, over any model: cfg.steps optimizer steps
    (default AdamW; weight decay cfg.weight_decay on `decayed`, none on `other`), the lr of lr_at
    (optimizer.lr), k = cfg.grad_accum_steps micro-batches per step from `window` (each micro loss
    scaled 1/k), global-norm clipping at cfg.grad_clip over `ordered` (the norm sums in that
    order) before the step. micro_loss(x, y) is the loss of one window; evaluate() the validation
    loss, run after 0, eval_every, 2*eval_every, ... and cfg.steps updates (None: no evaluation).
    Returns per-step loss, lr, pre-clip grad norm, whether it clipped, and the validation
    losses."""
    opt = optimizer.make(cfg, decayed, other)
    rec = {"steps": [], "lrs": [], "grad_norms": [], "clipped": [], "val": []}

    def maybe_eval(done: int):
        if evaluate is None:
            return
        if done == 0 or done == cfg.steps or (cfg.eval_every and done % cfg.eval_every == 0):
            rec["val"].append({"after_steps": done, "loss": evaluate()})

    maybe_eval(0)
    for s in range(cfg.steps):
        lr = optimizer.lr(cfg, s)
        if optimizer.scheduled:
            for g in opt.param_groups:
                g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        k = cfg.grad_accum_steps
        loss_sum = 0.0
        for j in range(k):  # gradient accumulation as HF/DDP do it: each micro loss scaled 1/k
            loss = micro_loss(*window(train_tokens, cfg.batch_size, cfg.seq_len, s * k + j))
            (loss / k).backward()
            loss_sum += float(loss.item())
        if cfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(ordered, cfg.grad_clip)
        else:
            norm = global_grad_norm(ordered)
        opt.step()
        rec["steps"].append(loss_sum / k)
        rec["lrs"].append(lr)
        rec["grad_norms"].append(float(norm.item()))
        rec["clipped"].append(bool(cfg.grad_clip > 0 and norm.item() > cfg.grad_clip))
        maybe_eval(s + 1)
    return rec


def train(cfg: RunConfig, init: Dict[str, torch.Tensor], train_tokens: np.ndarray,
          val_tokens: Optional[np.ndarray], dtype=torch.float32,
          precision: Optional[str] = None) -> dict:
    """Runs cfg.steps AdamW steps from `init` (train_loop); returns per-step loss, lr, pre-clip
    grad norm and the validation losses after 0, eval_every, 2*eval_every, ... and cfg.steps
    updates. `precision` (a PRECISIONS key) defaults to cfg.precision; master weights, gradients
    and AdamW moments are `dtype` in every precision."""
    ms = shape_of(cfg)
    prec = PRECISIONS[precision or cfg.precision]
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in init.items()}
    return train_loop(
        cfg, [p[k] for k in PARAM_NAMES if k in DECAYED], [p[k] for k in PARAM_NAMES if k not in DECAYED],
        [p[k] for k in PARAM_NAMES], lambda x, y: forward(p, ms, x, y, prec)[1],
        None if val_tokens is None else lambda: val_loss(p, ms, val_tokens, cfg, prec), train_tokens)


def batch_check(cfg: RunConfig, init, train_tokens, dtype=torch.float32,
                precision: Optional[str] = None):
    """Step 0's batch through the initial model: x, y, logits, loss, grads (table order), in
    `precision` (default cfg.precision). Logits come back in `dtype` (autocast's are bf16 values,
    widened exactly)."""
    ms = shape_of(cfg)
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in init.items()}
    x, y = window(train_tokens, cfg.batch_size, cfg.seq_len, 0)
    logits, loss = forward(p, ms, x, y, PRECISIONS[precision or cfg.precision])
    loss.backward()
    return (x, y, logits.detach().to(dtype), loss.detach(),
            [p[k].grad.detach() for k in PARAM_NAMES])


def grad_rel_errors(grads: List[torch.Tensor], ref: List[torch.Tensor]) -> Dict[str, float]:
    """Per tensor (checkpoint order): max |g - ref| / max |ref|, in double."""
    return {name: (g.double() - r.double()).abs().max().item() / r.abs().max().item()
            for name, g, r in zip(PARAM_NAMES, grads, ref)}


# ---- file encoders / decoders ----------------------------------------------------------------
def header(*fields: int) -> bytes:
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[: len(fields)] = fields
    return h.tobytes()


def f32(t) -> bytes:
    return np.ascontiguousarray(np.asarray(t, dtype="<f4")).tobytes()


def encode_checkpoint(ms: ModelShape, params: Dict[str, torch.Tensor]) -> bytes:
    out = [header(CHECKPOINT_MAGIC, CHECKPOINT_VERSION, ms.maxT, ms.V, ms.L, ms.NH, ms.C, ms.Vp)]
    for name, shape in ms.param_shapes():
        assert tuple(params[name].shape) == shape, (name, params[name].shape, shape)
        out.append(f32(params[name].numpy()))
    return b"".join(out)


def decode_checkpoint(data: bytes) -> Tuple[ModelShape, Dict[str, torch.Tensor]]:
    h = np.frombuffer(data, dtype="<i4", count=HEADER_INTS)
    if h[0] != CHECKPOINT_MAGIC or h[1] != CHECKPOINT_VERSION:
        raise ValueError(f"not an llm.c fp32 checkpoint v3 (magic {h[0]}, version {h[1]})")
    ms = ModelShape(L=int(h[4]), C=int(h[6]), NH=int(h[5]), V=int(h[3]), Vp=int(h[7]),
                    maxT=int(h[2]))
    flat = np.frombuffer(data, dtype="<f4", offset=4 * HEADER_INTS)
    params, off = {}, 0
    for name, shape in ms.param_shapes():
        n = int(np.prod(shape))
        params[name] = torch.from_numpy(flat[off: off + n].reshape(shape).copy())
        off += n
    if off != len(flat):
        raise ValueError(f"checkpoint has {len(flat)} floats, header implies {off}")
    return ms, params


def encode_tokens(tokens: np.ndarray) -> bytes:
    return header(TOKENS_MAGIC, TOKENS_VERSION, len(tokens)) + tokens.astype("<u2").tobytes()


def decode_tokens(data: bytes) -> np.ndarray:
    h = np.frombuffer(data, dtype="<i4", count=HEADER_INTS)
    if h[0] != TOKENS_MAGIC or h[1] != TOKENS_VERSION:
        raise ValueError(f"not an llm.c token file v1 (magic {h[0]}, version {h[1]})")
    toks = np.frombuffer(data, dtype="<u2", offset=4 * HEADER_INTS)
    if len(toks) != h[2]:
        raise ValueError(f"token file holds {len(toks)} tokens, header says {h[2]}")
    return toks


def encode_debug_state(cfg: RunConfig, x, y, logits, loss, grads) -> bytes:
    B, T, V, Vp = cfg.batch_size, cfg.seq_len, cfg.vocab_size, cfg.padded_vocab
    out = [header(DEBUG_MAGIC, DEBUG_VERSION, B, T, V, Vp),
           x.numpy().astype("<i4").tobytes(), y.numpy().astype("<i4").tobytes(),
           f32(logits.numpy()), f32([loss.item()])]
    out += [f32(g.numpy()) for g in grads]
    return b"".join(out)


def config_yaml(cfg: RunConfig) -> str:
    val = "val.bin" if cfg.val_windows else '""'
    # Only where it is not the trainer's default, so the fp32 fixtures predating the key are
    # unchanged.
    precision = f"  precision: {cfg.precision}\n" if cfg.precision != "fp32" else ""
    return f"""\
# The `{cfg.name}` reference run for the C++ trainer. Generated by tests/reference/gpt2_reference.py
# (do not edit; regenerate). Paths are relative to this directory: the C++ test rewrites them.
model:
  init_from: model.bin
  layers: {cfg.layers}
  channels: {cfg.channels}
  heads: {cfg.heads}
  vocab_size: {cfg.vocab_size}
  max_seq_len: {cfg.max_seq_len}
  seed: {cfg.seed}
data:
  train: train.bin
  val: {val}
  batch_size: {cfg.batch_size}
  seq_len: {cfg.seq_len}
  shuffle: false
optim:
  lr: {cfg.lr!r}
  min_lr: {cfg.min_lr!r}
  schedule: {cfg.schedule}
  warmup_steps: {cfg.warmup_steps}
  beta1: {cfg.beta1!r}
  beta2: {cfg.beta2!r}
  eps: {cfg.eps!r}
  weight_decay: {cfg.weight_decay!r}
  grad_clip: {cfg.grad_clip!r}
train:
  steps: {cfg.steps}
  eval_every: {cfg.eval_every}
  eval_batches: {cfg.eval_batches}
  checkpoint_every: {cfg.checkpoint_every}
  grad_accum_steps: {cfg.grad_accum_steps}
{precision}  out_dir: out
"""


MANIFEST_TEXT = {
    "model.bin": "initial llm.c fp32 checkpoint (magic 20240326 v3); load with model.init_from",
    "train.bin": "llm.c uint16 token file (magic 20240520 v1), training data",
    "val.bin": "llm.c uint16 token file (magic 20240520 v1), validation data",
    "config.yaml": "the same run in the C++ trainer's config format (paths relative here)",
    "losses.json": "per step: loss before the update, lr used, pre-clip grad norm; val losses",
    "debug_state.bin": "step 0 batch through model.bin (magic 20240327 v2): x, y, logits, loss, "
                       "all 16 parameter gradients",
}
# What differs in a bf16 fixture (README.md, "BF16 autocast").
MANIFEST_TEXT_BF16 = dict(
    MANIFEST_TEXT,
    **{"losses.json": "as fp32's, under torch.autocast bf16; step-0 grad errors; emulated_* run",
       "debug_state.bin": "step 0 batch under torch.autocast bf16 (magic 20240327 v2): x, y, "
                          "logits, loss, fp32 grads"})


def config_echo(cfg: RunConfig, train_tokens: np.ndarray,
                val_tokens: Optional[np.ndarray]) -> dict:
    """losses.json's "config". `precision` only where it is not fp32, so the fp32 fixtures
    written before the field existed are unchanged (absent means fp32, the trainer's default)."""
    doc = dict(dataclasses.asdict(cfg), padded_vocab=cfg.padded_vocab,
               train_tokens=int(len(train_tokens)),
               val_tokens=int(len(val_tokens)) if val_tokens is not None else 0)
    if cfg.precision == "fp32":
        del doc["precision"]
    return doc


def bf16_extras(cfg: RunConfig, init, train_tokens: np.ndarray, val_tokens: Optional[np.ndarray],
                grads: List[torch.Tensor]) -> dict:
    """A bf16 fixture's extra losses.json keys: per tensor, how far the step-0 gradients `grads`
    (autocast) are from fp32's (max |d| / max |fp32 grad|), and the same run with every matrix
    product's operands rounded to bf16 and fp32 outputs ("bf16-emulated", the engine's plan), whose
    losses the C++ test can compare against too."""
    g32 = batch_check(cfg, init, train_tokens, precision="fp32")[4]
    gem = batch_check(cfg, init, train_tokens, precision="bf16-emulated")[4]
    rec = train(cfg, init, train_tokens, val_tokens, precision="bf16-emulated")
    return {"grad_rel_err_vs_fp32": grad_rel_errors(grads, g32),
            "emulated_about": PRECISIONS["bf16-emulated"].about,
            "emulated_losses": rec["steps"],
            "emulated_grad_norms": rec["grad_norms"],
            "emulated_clipped": rec["clipped"],
            "emulated_val": rec["val"],
            "emulated_grad_rel_err_vs_fp32": grad_rel_errors(gem, g32)}


def generate(cfg: RunConfig, log=print) -> Dict[str, bytes]:
    """Every file of the fixture directory, in memory."""
    if cfg.precision == "bf16":
        require_fp32_accumulation()
    ms = shape_of(cfg)
    init = init_params(ms, cfg.seed)
    train_tokens, val_tokens = make_tokens(cfg)
    files: Dict[str, bytes] = {"model.bin": encode_checkpoint(ms, init),
                               "train.bin": encode_tokens(train_tokens)}
    if val_tokens is not None:
        files["val.bin"] = encode_tokens(val_tokens)
    files["config.yaml"] = config_yaml(cfg).encode()
    rec = train(cfg, init, train_tokens, val_tokens)
    for s in range(cfg.steps):
        log(f"  {cfg.name} step {s:2d}  loss {rec['steps'][s]:.6f}  lr {rec['lrs'][s]:.6e}  "
            f"grad_norm {rec['grad_norms'][s]:.4f}{'  clipped' if rec['clipped'][s] else ''}")
    for v in rec["val"]:
        log(f"  {cfg.name} val after {v['after_steps']:2d} steps: {v['loss']:.6f}")
    doc = {
        "config": config_echo(cfg, train_tokens, val_tokens),
        "steps": rec["steps"],
        "lrs": rec["lrs"],
        "grad_norms": rec["grad_norms"],
        "clipped": rec["clipped"],
        "val": rec["val"],
    }
    x, y, logits, loss, grads = batch_check(cfg, init, train_tokens)
    manifest = MANIFEST_TEXT
    if cfg.precision == "bf16":
        doc.update(bf16_extras(cfg, init, train_tokens, val_tokens, grads))
        manifest = MANIFEST_TEXT_BF16
    # json writes Python floats with repr: the float32 values round-trip exactly.
    files["losses.json"] = (json.dumps(doc, indent=1) + "\n").encode()
    files["debug_state.bin"] = encode_debug_state(cfg, x, y, logits, loss, grads)
    files["MANIFEST"] = "".join(
        f"{name:16s} {len(files[name]):8d} bytes  {manifest[name]}\n"
        for name in sorted(files) if name in manifest).encode()
    return files


# ---- verification ----------------------------------------------------------------------------
def float_sections(name: str, cfg: RunConfig) -> List[Tuple[str, str, int]]:
    """(label, numpy dtype, count) of each part of a binary file, in order."""
    ms = shape_of(cfg)
    params = [(n, "<f4", int(np.prod(s))) for n, s in ms.param_shapes()]
    head = [("header", "<i4", HEADER_INTS)]
    if name == "model.bin":
        return head + params
    if name == "debug_state.bin":
        BT = cfg.batch_size * cfg.seq_len
        return head + [("x", "<i4", BT), ("y", "<i4", BT), ("logits", "<f4", BT * ms.V),
                       ("loss", "<f4", 1)] + [("grad " + n, d, c) for n, d, c in params]
    return []


@dataclasses.dataclass(frozen=True)
class VerifyRtol:
    """--verify's relative bounds for the files a config computes (debug_state.bin, losses.json;
    README.md, "Checking the fixtures are fresh"). model.bin and the token files involve no
    arithmetic that a CPU could change and are held to FP32_VERIFY.sections."""
    sections: float  # per float section of a binary: max |got - want| <= sections * max |want|
    numbers: float   # per losses.json key: max over its floats of |got - want| / |want|
    keys: Dict[str, float] = dataclasses.field(default_factory=dict)  # keys with their own bound


# On the project's machine every fixture is byte-identical; the bounds are for other CPUs.
# fp32: another summation order moves values by ~1e-7 relative, but a pre-clip grad norm by up to
# 9.2e-6 (the floor, README.md); ATen's AVX512 and scalar kernels moved accum's and odd's by
# 3.4e-6 and 3.6e-6, over the 1e-6 that used to be the bound.
FP32_VERIFY = VerifyRtol(sections=1e-6, numbers=1e-6, keys={"grad_norms": 5e-5})
# bf16: an fp32 difference of one ulp can flip a bf16 rounding (2^-8 relative) and the run carries
# it on. ATen's scalar and AVX512 kernels (ATEN_CPU_CAPABILITY=default, avx512) against its AVX2
# ones moved the debug state by up to 6.0e-3 of a section's max (logits 4.1e-3), losses and val
# losses by 6.4e-5, grad norms by 2.3e-2 (step 17's spike) and the step-0 gradient errors vs fp32
# by 30%; the bounds are ~5x that. A stale fixture (another model, data or config) moves losses by
# percents.
BF16_VERIFY = VerifyRtol(sections=3e-2, numbers=3e-4,
                         keys={"lrs": 1e-6,  # a double formula, no model arithmetic
                               "grad_norms": 0.1, "emulated_grad_norms": 0.1,
                               "grad_rel_err_vs_fp32": 1.0,
                               "emulated_grad_rel_err_vs_fp32": 1.0})
VERIFY_RTOL = {"fp32": FP32_VERIFY, "bf16": BF16_VERIFY}


def _leaves(doc, path: str = ""):
    """(path, value) of every scalar of a JSON document, in order; path "val[1].loss"."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, f"{path}.{k}" if path else k)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, doc


def compare_json(name: str, got: bytes, want: bytes, rtol: VerifyRtol) -> List[str]:
    """Problems found in losses.json: the same entries, config, ints and bools equal, and per
    top-level key the floats within its relative bound."""
    a, b = dict(_leaves(json.loads(got))), dict(_leaves(json.loads(want)))
    if a.keys() != b.keys():
        return [f"{name}: entries {sorted(set(a) ^ set(b))[:5]} are in one file only"]
    bad, worst = [], {}
    for path, v in b.items():
        u, key = a[path], re.split(r"[.\[]", path)[0]
        if isinstance(v, float) and isinstance(u, float) and key != "config":
            worst[key] = max(worst.get(key, 0.0), abs(u - v) / max(abs(v), 1e-30))
        elif u != v:
            bad.append(f"{name}: {path} is {u!r}, expected {v!r}")
    for key, d in worst.items():
        bound = rtol.keys.get(key, rtol.numbers)
        if d > bound:
            bad.append(f"{name}: {key} differ by {d:.2e} relative (bound {bound:g})")
    return bad


def compare_manifest(got: bytes, want: bytes) -> List[str]:
    """MANIFEST lines equal, except losses.json's size: the length of its float reprs follows the
    values, which compare_json bounds."""
    def rows(data: bytes):
        return [line.split(None, 2) for line in data.decode().splitlines()]
    a, b = rows(got), rows(want)
    same = len(a) == len(b) and all(
        u[0] == v[0] and u[2] == v[2] and (u[1] == v[1] or u[0] == "losses.json")
        for u, v in zip(a, b))
    return [] if same else ["MANIFEST: differs beyond losses.json's size"]


def compare_file(name: str, cfg: RunConfig, got: bytes, want: bytes,
                 rtol: VerifyRtol) -> List[str]:
    """Problems found; [] if `got` reproduces `want` (bytes, or within `rtol`: floats within a
    bound of each section's largest magnitude, ints equal; summation order may differ on another
    CPU)."""
    if got == want:
        return []
    if name == "losses.json":
        return compare_json(name, got, want, rtol)
    if name == "MANIFEST":
        return compare_manifest(got, want)
    sections = float_sections(name, cfg)
    if not sections or len(got) != len(want):
        return [f"{name}: differs ({len(got)} vs {len(want)} bytes)"]
    bound = rtol.sections if name == "debug_state.bin" else FP32_VERIFY.sections
    bad, off = [], 0
    for label, dt, count in sections:
        a = np.frombuffer(got, dtype=dt, count=count, offset=off)
        b = np.frombuffer(want, dtype=dt, count=count, offset=off)
        off += count * 4
        if dt == "<i4":
            if not np.array_equal(a, b):
                bad.append(f"{name}: {label} differs")
            continue
        scale = float(np.abs(b).max()) if count else 0.0
        d = float(np.abs(a.astype(np.float64) - b).max()) if count else 0.0
        if d > bound * scale:
            bad.append(f"{name}: {label} max diff {d:.3e} > {bound:g} x max |value| {scale:.3e}")
    return bad


# verify's exit code when the only problem is a fixture this machine cannot compute (ctest's
# conventional SKIP_RETURN_CODE; without that property ctest counts it as a failure).
EXIT_CANNOT_VERIFY = 77


def verify(root: str) -> int:
    t0 = time.perf_counter()
    problems, unverified = [], []
    for cfg in CONFIGS.values():
        t1 = time.perf_counter()
        try:
            files = generate(cfg, log=lambda *_: None)
        except CannotReproduce as e:
            unverified.append(f"{cfg.name}: {e}")
            print(f"{cfg.name}: NOT VERIFIED on this machine")
            continue
        d = os.path.join(root, cfg.name)
        present = sorted(os.listdir(d)) if os.path.isdir(d) else []
        if sorted(files) != present:
            problems.append(f"{cfg.name}: files {present}, expected {sorted(files)}")
        identical = 0
        for name, data in files.items():
            path = os.path.join(d, name)
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                want = f.read()
            identical += want == data
            problems += [f"{cfg.name}/{p}" for p in
                         compare_file(name, cfg, data, want, VERIFY_RTOL[cfg.precision])]
        print(f"{cfg.name}: {identical}/{len(files)} files byte-identical "
              f"({time.perf_counter() - t1:.2f} s)")
    for p in problems:
        print("STALE:", p)
    for u in unverified:
        print("NOT VERIFIED:", u)
    verdict = "FAILED" if problems else "INCOMPLETE" if unverified else "ok"
    print(f"verify: {verdict} in {time.perf_counter() - t0:.2f} s")
    if problems:
        print("HINT: regenerate with /usr/bin/python3 tests/reference/gpt2_reference.py "
              "--out tests/reference/fixtures, and review the diff")
        return 1
    return EXIT_CANNOT_VERIFY if unverified else 0


# ---- independent check against /work/shared/fixtures -----------------------------------------
def check_against(d: str) -> int:
    with open(os.path.join(d, "tiny_init_seed1337.bin"), "rb") as f:
        ms, init = decode_checkpoint(f.read())
    with open(os.path.join(d, "kjv_bytes_200k.bin"), "rb") as f:
        tokens = decode_tokens(f.read())
    with open(os.path.join(d, "tiny_loss_1proc.jsonl")) as f:
        theirs = [json.loads(line)["loss"] for line in f if line.strip()]
    # The run described in that folder's README: tiny's optimizer settings, B=4, T=32.
    cfg = dataclasses.replace(CONFIGS["tiny"], layers=ms.L, channels=ms.C, heads=ms.NH,
                              vocab_size=ms.V, max_seq_len=ms.maxT, steps=len(theirs))
    assert cfg.padded_vocab == ms.Vp
    ours = train(cfg, init, tokens, None)["steps"]
    print(f"model L={ms.L} C={ms.C} NH={ms.NH} V={ms.V} Vp={ms.Vp} maxT={ms.maxT}; "
          f"{len(tokens)} tokens; B={cfg.batch_size} T={cfg.seq_len}")
    print(" step  ours                theirs              rel diff")
    worst = 0.0
    for s, (a, b) in enumerate(zip(ours, theirs)):
        r = abs(a - b) / abs(b)
        worst = max(worst, r)
        print(f" {s:4d}  {a!r:<18}  {b!r:<18}  {r:.2e}")
    ok = worst <= 1e-5
    print(f"max relative difference {worst:.3e} over {len(theirs)} steps: "
          f"{'ok' if ok else 'MISMATCH'} (bound 1e-5)")
    return 0 if ok else 1


# ---- fp32 vs fp64: the rounding floor ----------------------------------------------------------
# The rules README.md recommends to the C++ tests: |a - b| <= rtol * |b| + atol, elementwise.
TOLERANCES = {"logits": (1e-5, 2e-6), "grads": (1e-4, 1e-6)}


def _cmp(a: torch.Tensor, ref: torch.Tensor, kind: str, big: float = 1e-2) -> dict:
    """a against ref: max abs diff, max |ref|, the normwise relative error, the max elementwise
    relative error over elements with |ref| >= big * max|ref|, and `use`: the largest fraction
    of the recommended tolerance budget rtol*|ref| + atol that any element uses (1 = at the
    limit)."""
    a, ref = a.double(), ref.double()
    d = (a - ref).abs()
    m = ref.abs().max().item()
    sel = ref.abs() >= big * m
    rtol, atol = TOLERANCES[kind]
    return {"max_abs": d.max().item(), "max_ref": m,
            "norm_rel": (d.norm() / ref.norm()).item() if m else 0.0,
            "elem_rel": (d[sel] / ref.abs()[sel]).max().item() if m else 0.0,
            "use": (d / (rtol * ref.abs() + atol)).max().item()}


def _line(label: str, c: dict) -> str:
    return (f"  {label:10s} max|d| {c['max_abs']:.2e}  max|ref| {c['max_ref']:.2e}  normwise rel "
            f"{c['norm_rel']:.2e}  elementwise rel (|ref|>=1% max) {c['elem_rel']:.2e}  "
            f"budget used {c['use']:.3f}")


def floor_report() -> None:
    print("budget used = max over elements of |d| / (rtol*|ref| + atol) with the recommended "
          f"tolerances {TOLERANCES}")
    for cfg in CONFIGS.values():
        if cfg.precision != "fp32":  # bf16 against fp32 is --bf16-variants' measurement
            continue
        ms = shape_of(cfg)
        init = init_params(ms, cfg.seed)
        train_tokens, val_tokens = make_tokens(cfg)
        x, y, lg32, l32, g32 = batch_check(cfg, init, train_tokens, torch.float32)
        _, _, lg64, l64, g64 = batch_check(cfg, init, train_tokens, torch.float64)
        print(f"== {cfg.name}: step-0 batch, fp32 torch vs fp64 torch (same fp32 init)")
        print(_line("logits", _cmp(lg32, lg64, "logits")))
        print(f"  loss       rel {abs(l32.item() - l64.item()) / l64.item():.2e}")
        cs = [_cmp(a, b, "grads") for a, b in zip(g32, g64)]
        for name, c in zip(PARAM_NAMES, cs):
            print(_line("d" + name, c))
        print(f"  grads: worst normwise rel {max(c['norm_rel'] for c in cs):.2e}, worst "
              f"elementwise rel (|g|>=1% of the tensor's max) {max(c['elem_rel'] for c in cs):.2e}"
              f", worst abs {max(c['max_abs'] for c in cs):.2e}, worst budget used "
              f"{max(c['use'] for c in cs):.3f}")
        # Another fp32 summation order: 4 one-row batches (as 4 groups compute them), grads
        # averaged. Closer to what the C++ kernels do than fp64 is: a different order, same type.
        p = {k: v.clone().requires_grad_(True) for k, v in init.items()}
        rows = []
        for b in range(cfg.batch_size):
            lg, loss = gpt2_forward(p, ms, x[b:b + 1], y[b:b + 1])
            (loss / cfg.batch_size).backward()
            rows.append(lg.detach())
        lgs = torch.cat(rows)
        c = _cmp(lgs, lg32, "logits")
        print(f"  fp32, {cfg.batch_size} one-row batches vs fp32 full batch: logits max|d| "
              f"{c['max_abs']:.2e} budget {c['use']:.3f}", end="")
        cs = [_cmp(p[k].grad, g32[i], "grads") for i, k in enumerate(PARAM_NAMES)]
        print(f"; grads worst elementwise rel {max(c['elem_rel'] for c in cs):.2e}, worst abs "
              f"{max(c['max_abs'] for c in cs):.2e}, budget {max(c['use'] for c in cs):.3f}")
        r32 = train(cfg, init, train_tokens, val_tokens, torch.float32)
        r64 = train(cfg, init, train_tokens, val_tokens, torch.float64)
        rel = [abs(a - b) / b for a, b in zip(r32["steps"], r64["steps"])]
        nrel = [abs(a - b) / b for a, b in zip(r32["grad_norms"], r64["grad_norms"])]
        print(f"  {cfg.steps}-step losses fp32 vs fp64: max rel {max(rel):.2e} (step "
              f"{int(np.argmax(rel))}); pre-clip grad norms max rel {max(nrel):.2e} (step "
              f"{int(np.argmax(nrel))}); clip decisions equal: {r32['clipped'] == r64['clipped']}")
        if r32["val"]:
            vrel = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(r32["val"], r64["val"]))
            print(f"  val losses fp32 vs fp64: max rel {vrel:.2e}")
        if cfg.grad_clip > 0:
            gap = min(abs(n - cfg.grad_clip) / cfg.grad_clip for n in r32["grad_norms"])
            print(f"  closest pre-clip norm to grad_clip={cfg.grad_clip}: {gap:.1%} away")


# ---- bf16: autocast against the emulations and fp32 -------------------------------------------
# The variants --bf16-variants compares, labelled as in README.md's table.
BF16_VARIANTS = [("a", "bf16"), ("b", "bf16-emulated"), ("c", "bf16-emulated-linear"),
                 ("d", "fp32")]


def _rel(u: List[float], v: List[float]) -> List[float]:
    return [abs(x - y) / abs(y) for x, y in zip(u, v)]


def bf16_variants_report(name: str = "odd") -> None:
    """Trains config `name` in each BF16_VARIANTS precision and prints, per pair, the relative
    differences of the per-step and the val losses, the clip decisions, and each variant's step-0
    gradient error against fp32. Also runs autocast twice, to see whether it is deterministic."""
    cfg = dataclasses.replace(CONFIGS[name], precision="fp32")
    init = init_params(shape_of(cfg), cfg.seed)
    train_tokens, val_tokens = make_tokens(cfg)
    recs, grads = {}, {}
    for label, prec in BF16_VARIANTS:
        recs[label] = train(cfg, init, train_tokens, val_tokens, precision=prec)
        grads[label] = batch_check(cfg, init, train_tokens, precision=prec)[4]
        print(f"({label}) {prec}: {PRECISIONS[prec].about}")
    pairs = [("a", "b"), ("a", "c"), ("b", "c"), ("a", "d"), ("b", "d"), ("c", "d")]
    rel = {(u, v): _rel(recs[u]["steps"], recs[v]["steps"]) for u, v in pairs}
    print("step  " + "".join(f"  loss ({u})  " for u, _ in BF16_VARIANTS)
          + "".join(f"  ({u})-({v})" for u, v in pairs))
    for s in range(cfg.steps):
        print(f"{s:4d}  " + "".join(f"  {recs[u]['steps'][s]:.7f}" for u, _ in BF16_VARIANTS)
              + "".join(f"  {rel[pr][s]:.2e}" for pr in pairs))
    pad = " " * 13 * len(BF16_VARIANTS)
    print("max   " + pad + "".join(f"  {max(rel[pr]):.2e}" for pr in pairs))
    print("argmax" + pad + "".join(f"  {int(np.argmax(rel[pr])):8d}" for pr in pairs))
    for u, v in pairs:
        vrel = _rel([x["loss"] for x in recs[u]["val"]], [x["loss"] for x in recs[v]["val"]])
        nrel = _rel(recs[u]["grad_norms"], recs[v]["grad_norms"])
        print(f"({u})-({v}): val losses max rel {max(vrel):.2e} "
              f"({', '.join(f'{r:.1e}' for r in vrel)}); pre-clip grad norms max rel "
              f"{max(nrel):.2e}; clip decisions equal: {recs[u]['clipped'] == recs[v]['clipped']}")
    for u, prec in BF16_VARIANTS:
        gap = min(abs(n - cfg.grad_clip) / cfg.grad_clip for n in recs[u]["grad_norms"])
        print(f"({u}) closest pre-clip norm to grad_clip={cfg.grad_clip}: {gap:.1%} away; "
              f"clipped in steps {[s for s, c in enumerate(recs[u]['clipped']) if c]}")
    print("step-0 gradients, max |g - g_ref| / max |g_ref| per tensor:")
    cols = [("a", "d"), ("b", "d"), ("c", "d"), ("a", "b")]
    errs = {pr: grad_rel_errors(grads[pr[0]], grads[pr[1]]) for pr in cols}
    print("  tensor    " + "".join(f"  ({u})-({v}) " for u, v in cols))
    for n in PARAM_NAMES:
        print(f"  {n:9s} " + "".join(f"  {errs[pr][n]:.2e}" for pr in cols))
    print("  worst     " + "".join(f"  {max(errs[pr].values()):.2e}" for pr in cols))
    again = train(cfg, init, train_tokens, val_tokens, precision="bf16")
    same = json.dumps(again) == json.dumps(recs["a"])
    print(f"autocast run twice: {'identical' if same else 'DIFFERENT'} losses, norms and val")


# ---- main ------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write fixtures to OUT/<config>/")
    ap.add_argument("--verify", metavar="DIR", help="check DIR/<config>/ is reproduced")
    ap.add_argument("--check-against", metavar="DIR",
                    help="compare with an independent run (tiny_init_seed1337.bin, "
                         "kjv_bytes_200k.bin, tiny_loss_1proc.jsonl in DIR)")
    ap.add_argument("--floor", action="store_true", help="report fp32 vs fp64 differences")
    ap.add_argument("--bf16-variants", action="store_true",
                    help="compare autocast bf16, two bf16 emulations and fp32 on `odd`")
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS),
                    help="only these configs with --out (default all)")
    args = ap.parse_args(argv)
    if not (args.out or args.verify or args.check_against or args.floor or args.bf16_variants):
        ap.error("nothing to do: give --out, --verify, --check-against, --floor or "
                 "--bf16-variants")
    codes = []
    if args.out:
        for name in args.config or sorted(CONFIGS):
            cfg = CONFIGS[name]
            print(f"{name}: generating")
            try:
                files = generate(cfg)
            except CannotReproduce as e:  # the committed files stay as they are
                print(f"{name}: NOT WRITTEN: {e}")
                codes.append(1)
                continue
            d = os.path.join(args.out, name)
            os.makedirs(d, exist_ok=True)
            for old in os.listdir(d):  # a file the config no longer makes must not linger
                os.remove(os.path.join(d, old))
            for fname, data in files.items():
                with open(os.path.join(d, fname), "wb") as f:
                    f.write(data)
            print(f"{name}: {len(files)} files, {sum(map(len, files.values()))} bytes in {d}")
    if args.verify:
        codes.append(verify(args.verify))
    if args.check_against:
        codes.append(check_against(args.check_against))
    if args.floor:
        floor_report()
    if args.bf16_variants:
        bf16_variants_report()
    return 1 if 1 in codes else max(codes, default=0)  # a failure outranks "could not verify"


if __name__ == "__main__":
    sys.exit(main())
