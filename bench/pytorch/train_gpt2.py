#!/usr/bin/python3
"""The same training step in PyTorch, for `cputrain-numa bench train --pytorch`.

GPT-2 (the default): a nanoGPT-style model (nn.Linear, pre-LayerNorm blocks, causal attention
with a mask, GELU tanh, LM head tied to wte over the real vocabulary), the same shapes and
arithmetic as cputrain-numa's step, from --layers/--channels/--heads/--vocab.
Llama (or any causal LM transformers makes from a config): --hf-config '{"model_type": "llama",
...}' (the JSON of a transformers config, or a path to a file holding it) builds
AutoModelForCausalLM.from_config at its random init, fp32, attention --attn (sdpa, the fast
one, by default; eager where sdpa is refused); --layers/--channels/--heads/--vocab may then be
left out, and where given must agree with the config.
Both compute the loss the same way: the logits of all T positions, then F.cross_entropy against
the next tokens (no labels= shift inside the model). Trained with torch.optim.AdamW (weight decay
0.1 on the 2-D tensors) and clipping at 1.0 on random tokens, fp32, or, with --autocast bf16,
under torch.autocast("cpu", dtype=torch.bfloat16), the recipe of IPEX/PyTorch CPU guides (what
`train.precision: bf16` is compared with). Prints one JSON object:
{"tokens_per_s", "step_ms": [...], "forward_ms", "backward_ms", "optimizer_ms", "setup", "blas",
 "autocast", "config", "torch", "ipex", "warmup", "warmup_ms": [...], "peak_rss_bytes"}
(the three parts are medians over the timed steps, of rank 0 under DDP, where backward includes
the gradient allreduce that DDP overlaps with it; peak_rss_bytes is the process's own peak
resident set, VmHWM (not ru_maxrss, which includes the peak of the process that started it),
under DDP the sum of the P processes' (an upper bound of their peak together: the peaks may not
coincide), and never counts torch.compile's compiler worker processes), plus, with --hf-config,
"model_type", "attn_implementation" (the one that ran) and "params" (parameter count), or, when
the configuration cannot run here (torch.compile fails, IPEX does not import), {"skipped": "why"}
and exit status 3.
Question answering: an --hf-config whose model_type is "bert" or "distilbert" builds
AutoModelForQuestionAnswering.from_config (BertForQuestionAnswering, DistilBertForQuestionAnswering)
and trains it as Hugging Face's Trainer does run_qa.py's job, one step being forward, backward,
clip_grad_norm_(1.0), the optimizer's step and zero_grad (the Trainer's own loop, without its
data loader and callbacks): in training mode (dropout on, as the config says), the loss the
model computes from start_positions / end_positions, and the Trainer's default optimizer with
torch 2.8 (transformers 4.55's "adamw_torch_fused": torch.optim.AdamW(fused=True), lr 3e-5,
betas (0.9, 0.999), eps 1e-8, weight decay 0 in its two groups). Each step's batch is B rows of
T positions padded as run_qa.py pads them (pad_to_max_length): --qa-lengths gives the real
tokens of W*B rows (micro-batch p takes rows [(p mod W) B, (p mod W + 1) B), and under DDP
rank r its B/P share of them); random ids in [0, V) there, pad id 0 after, attention_mask 1 on
the real tokens, token types 0 for the first third and the padding, 1 after (BERT only), an
answer span inside the context. With IPEX: ipex.optimize(model, optimizer=opt, dtype=...,
level="O1"), as the Trainer calls it under --use_ipex.
Sequence classification: --cls-lengths (with an --hf-config of a *ForSequenceClassification: its
id2label, pad_token_id) builds AutoModelForSequenceClassification.from_config and trains it as the
Trainer does run_glue.py's job (the same step and optimizer as question answering's above, lr
2e-5): W*B rows of the given real lengths, random ids in [0, V) other than the padding token,
each batch padded to its longest row with pad_token_id (run_glue.py's DataCollatorWithPadding),
attention_mask 1 on the real tokens, token types 0, random labels.
LoRA (--lora-r R, with --hf-config): the model is wrapped as PEFT wraps it for a LoRA fine-tune,
get_peft_model(model, LoraConfig(r=R, lora_alpha=--lora-alpha (default 2R), target_modules=
--lora-targets (default: PEFT's own for the model type), lora_dropout=0, modules_to_save=
--lora-save, task_type=CAUSAL_LM, or QUESTION_ANS for the encoders)): the base is frozen and the
optimizer (the same one, same groups) gets the trainable parameters only; DDP then syncs only
their gradients. --base-dtype bf16 loads the base in torch.bfloat16 (PEFT's
autocast_adapter_dtype keeps the adapters, and the modules to save, in fp32), the usual LoRA
recipe; it runs in any configuration, with or without --autocast. The JSON adds "lora" (r,
lora_alpha, target_modules and modules_to_save as PEFT resolved them), "base_dtype",
"trainable_params" (PEFT's count), "peft" (its version) and "params" (the base model's, before
the adapters).
`train_gpt2.py --probe` alone prints {"torch": version, "blas": ..., "peft": version or ""} and
exits (the bench's first look at a Python).

Modes:
  --threads N            one process with N intra-op threads
  --ddp P                P processes of one thread each, torch.distributed gloo, DDP
Configurations (--config, one process only):
  eager                  plain PyTorch
  compile                torch.compile(model), the default inductor backend (it compiles C++
                         with the system's compiler during the first steps: at least one warm-up
                         step absorbs it, and warmup_ms shows what it cost)
  ipex                   intel_extension_for_pytorch: model, opt = ipex.optimize(model,
                         optimizer=opt[, dtype=torch.bfloat16 with --autocast bf16])
Thread counts must be set before torch is imported (OpenBLAS reads OMP_NUM_THREADS /
OPENBLAS_NUM_THREADS at load, and ignores torch.set_num_threads); this script sets them from its
arguments before the import. With Debian's python3-torch 1.x, which OpenBLAS build torch loads
(pthread or OpenMP) is chosen by the caller with LD_LIBRARY_PATH; PyPI's torch 2.x (the peers'
venv, scripts/peers-env.sh) carries MKL and oneDNN and needs no such choice.
"""
import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time


# --hf-config's keys that --layers/--channels/--heads/--vocab name, where both are given.
SHAPE_KEYS = {"layers": "num_hidden_layers", "channels": "hidden_size",
              "heads": "num_attention_heads", "vocab": "vocab_size"}
# DistilBERT and GPT-2 (transformers' GPT2LMHeadModel: LoRA rows, where PEFT needs its module
# names) name them their own way.
DISTILBERT_KEYS = {"layers": "n_layers", "channels": "dim", "heads": "n_heads", "vocab": "vocab_size"}
GPT2_KEYS = {"layers": "n_layer", "channels": "n_embd", "heads": "n_head", "vocab": "vocab_size"}
# The model types trained for question answering (the rest: causal LMs).
QA_TYPES = ("bert", "distilbert")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int)
    p.add_argument("--channels", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--hf-config", metavar="JSON",
                   help="a transformers config as JSON ('{\"model_type\": \"llama\", ...}') or "
                        "a file holding it: train AutoModelForCausalLM.from_config(it) instead of "
                        "the GPT-2")
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                   help="with --hf-config: transformers' attn_implementation (sdpa falls back to "
                        "eager where the model refuses it)")
    p.add_argument("--qa-lengths", metavar="N,N,...",
                   help="question answering (model_type bert/distilbert): the real tokens of each "
                        "row of the batches, W*B of them (default: 60-100%% of T at random)")
    p.add_argument("--cls-lengths", metavar="N,N,...",
                   help="sequence classification (an --hf-config *ForSequenceClassification): the "
                        "real tokens of each row of the batches, W*B of them; each batch is "
                        "padded to its longest")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="global batch (sequences per step)")
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
    p.add_argument("--config", choices=["eager", "compile", "ipex"], default="eager",
                   help="eager, torch.compile (inductor), or ipex.optimize")
    p.add_argument("--lora-r", type=int, metavar="R",
                   help="with --hf-config: a LoRA fine-tune of rank R over the frozen base (PEFT)")
    p.add_argument("--lora-alpha", type=float, help="PEFT's lora_alpha (default 2R)")
    p.add_argument("--lora-targets", metavar="NAME,NAME",
                   help="PEFT's target_modules (default: PEFT's own for the model type)")
    p.add_argument("--lora-save", metavar="NAME,NAME", help="PEFT's modules_to_save")
    p.add_argument("--base-dtype", choices=["fp32", "bf16"], default="fp32",
                   help="with --lora-r: the frozen base's dtype (bf16: torch.bfloat16 weights)")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="with --hf-config: transformers' gradient_checkpointing_enable "
                        "(use_reentrant=False), as the Trainer's --gradient_checkpointing")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--threads", type=int)
    mode.add_argument("--ddp", type=int)
    args = p.parse_args()
    if args.hf_config is None:
        missing = [f"--{k}" for k in SHAPE_KEYS if getattr(args, k) is None]
        if missing:
            p.error(f"{', '.join(missing)} required (or --hf-config)")
        if args.gradient_checkpointing:
            p.error("--gradient-checkpointing needs an --hf-config (transformers' model)")
    else:
        text = args.hf_config
        if not text.lstrip().startswith("{"):
            with open(text) as f:
                text = f.read()
        try:
            args.hf_config = json.loads(text)
        except ValueError as e:
            p.error(f"--hf-config is not JSON: {e}")
        if not isinstance(args.hf_config, dict) or "model_type" not in args.hf_config:
            p.error("--hf-config needs a JSON object with a \"model_type\" (e.g. \"llama\")")
        keys = {"distilbert": DISTILBERT_KEYS, "gpt2": GPT2_KEYS}.get(args.hf_config["model_type"], SHAPE_KEYS)
        for k, key in keys.items():
            given, want = getattr(args, k), args.hf_config.get(key)
            if given is not None and given != want:
                p.error(f"--{k.replace('_', '-')} {given} disagrees with --hf-config's {key} {want}")
            setattr(args, k, want)  # --vocab is the range of the random tokens
    if args.ddp and args.config != "eager":
        p.error("--config compile/ipex runs with --threads only")
    args.qa = bool(args.hf_config) and args.hf_config.get("model_type") in QA_TYPES
    if args.qa_lengths is not None:
        try:
            args.qa_lengths = [int(x) for x in args.qa_lengths.split(",")]
        except ValueError:
            p.error("--qa-lengths takes integers separated by commas")
        if not args.qa:
            p.error("--qa-lengths needs an --hf-config of model_type bert or distilbert")
        if len(args.qa_lengths) % args.batch or not all(8 <= n <= args.seq_len for n in args.qa_lengths):
            p.error(f"--qa-lengths: a multiple of --batch ({args.batch}) lengths in [8, --seq-len]")
    args.cls = args.cls_lengths is not None
    if args.cls:
        try:
            args.cls_lengths = [int(x) for x in args.cls_lengths.split(",")]
        except ValueError:
            p.error("--cls-lengths takes integers separated by commas")
        if args.hf_config is None:
            p.error("--cls-lengths needs an --hf-config (a *ForSequenceClassification's)")
        if len(args.cls_lengths) % args.batch or not all(1 <= n <= args.seq_len for n in args.cls_lengths):
            p.error(f"--cls-lengths: a multiple of --batch ({args.batch}) lengths in [1, --seq-len]")
        args.qa = False
    if args.lora_r is not None:
        if args.hf_config is None:
            p.error("--lora-r needs --hf-config (PEFT names the modules of transformers' models)")
        if not 1 <= args.lora_r <= 4096:
            p.error(f"--lora-r {args.lora_r}: a rank in [1, 4096]")
        if args.lora_alpha is None:
            args.lora_alpha = 2.0 * args.lora_r
        if not args.lora_alpha > 0:
            p.error(f"--lora-alpha {args.lora_alpha}: must be > 0")
        for k in ("lora_targets", "lora_save"):
            v = getattr(args, k)
            setattr(args, k, [n.strip() for n in v.split(",") if n.strip()] if v else None)
    elif any(v is not None for v in (args.lora_alpha, args.lora_targets, args.lora_save)):
        p.error("--lora-alpha/--lora-targets/--lora-save need --lora-r")
    if args.base_dtype == "bf16" and args.lora_r is None:
        p.error("--base-dtype bf16 needs --lora-r (a frozen base)")
    if args.config != "eager":
        args.warmup = max(args.warmup, 1)  # compilation / first-touch repacking stays untimed
    return args


class Skip(Exception):
    """This configuration cannot run here; the message says why."""


def why(e):
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def build(args, torch):
    nn, F = torch.nn, torch.nn.functional
    C, NH, L, V, T = args.channels, args.heads, args.layers, args.vocab, args.seq_len
    Vp = (V + 127) // 128 * 128

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, 4 * C)
            self.fcproj = nn.Linear(4 * C, C)
            # A plain attribute, not a buffer: gloo cannot broadcast bool buffers (DDP init).
            self.mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)

        def forward(self, x):
            B = x.size(0)
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(B, T, NH, C // NH).transpose(1, 2)
            k = k.view(B, T, NH, C // NH).transpose(1, 2)
            v = v.view(B, T, NH, C // NH).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
            att = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.randn(Vp, C) * 0.02)
            self.wpe = nn.Parameter(torch.randn(T, C) * 0.02)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte[idx] + self.wpe[: idx.size(1)]
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte[:V].t()
            return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))

    return GPT()


def from_config(args, torch, auto_class):
    """auto_class.from_config(args.hf_config) at its random init, fp32 (torch.bfloat16 with
    --base-dtype bf16), with attention args.attn (sdpa falls back to eager where the model, or
    this transformers, refuses it). Returns the config, the model and the attention
    implementation that ran."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the config is given
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    keys = dict(args.hf_config)
    config = transformers.AutoConfig.for_model(keys.pop("model_type"), **keys)
    dtype = torch.bfloat16 if args.base_dtype == "bf16" else torch.float32
    for attn in dict.fromkeys([args.attn, "eager"]):
        try:
            return config, auto_class.from_config(config, attn_implementation=attn,
                                                  torch_dtype=dtype), attn
        except (ValueError, ImportError):
            if attn == "eager":
                raise
    raise AssertionError("unreachable")


def adapt(args, model, info, task_type):
    """With --lora-r: model wrapped by PEFT for a LoRA fine-tune (the base frozen, the adapters
    and modules to save fp32 whatever the base's dtype: autocast_adapter_dtype), and info
    completed with what PEFT resolved; else model as it is."""
    if args.lora_r is None:
        return model
    import peft
    cfg = peft.LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                          target_modules=args.lora_targets, modules_to_save=args.lora_save,
                          task_type=task_type)
    model = peft.get_peft_model(model, cfg, autocast_adapter_dtype=True)
    resolved = model.peft_config["default"]
    info.update({"trainable_params": model.get_nb_trainable_parameters()[0],
                 "base_dtype": args.base_dtype, "peft": peft.__version__,
                 "lora": {"r": resolved.r, "lora_alpha": resolved.lora_alpha,
                          "target_modules": sorted(resolved.target_modules),
                          "modules_to_save": sorted(resolved.modules_to_save or [])}})
    return model


def build_hf(args, torch):
    """AutoModelForCausalLM.from_config(args.hf_config) at transformers' random init, fp32, with
    attention args.attn (sdpa falls back to eager where the model refuses it), wrapped so that
    forward(idx, targets) is the loss as build()'s GPT computes it: the logits of every position,
    then F.cross_entropy. Returns the module and what the JSON reports about it."""
    import transformers
    F = torch.nn.functional
    config, lm, attn = from_config(args, torch, transformers.AutoModelForCausalLM)
    V = config.vocab_size
    info = {"model_type": config.model_type, "attn_implementation": attn,
            "params": sum(p.numel() for p in lm.parameters())}
    lm = adapt(args, lm, info, "CAUSAL_LM")

    class CausalLMLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, idx, targets):
            logits = self.lm(input_ids=idx, use_cache=False).logits
            return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))

    return CausalLMLoss(), info


def build_qa(args, torch):
    """AutoModelForQuestionAnswering.from_config(args.hf_config) at its random init, fp32, with
    attention args.attn (sdpa falls back to eager where refused), in training mode, wrapped so
    that forward(input_ids, token_type_ids, attention_mask, starts, ends) is the loss the model
    computes (the mean of the start and end cross-entropies). Returns the module and what the JSON
    reports about it."""
    import transformers
    config, qa, attn = from_config(args, torch, transformers.AutoModelForQuestionAnswering)
    types = config.model_type == "bert"  # DistilBERT takes no token_type_ids
    info = {"model_type": config.model_type, "attn_implementation": attn,
            "architecture": type(qa).__name__, "params": sum(p.numel() for p in qa.parameters())}
    qa = adapt(args, qa, info, "QUESTION_ANS")

    class SpanLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qa = qa

        def forward(self, ids, token_types, mask, starts, ends):
            extra = {"token_type_ids": token_types} if types else {}
            return self.qa(input_ids=ids, attention_mask=mask, start_positions=starts,
                           end_positions=ends, **extra).loss

    return SpanLoss(), info


def build_cls(args, torch):
    """AutoModelForSequenceClassification.from_config(args.hf_config) (its labels and
    pad_token_id) at its random init, fp32, wrapped so that forward(input_ids, token_type_ids,
    attention_mask, labels) is the loss the model computes. Returns the module and the JSON's
    info."""
    import transformers
    config, cls, attn = from_config(args, torch, transformers.AutoModelForSequenceClassification)
    types = config.model_type == "bert"
    info = {"model_type": config.model_type, "attn_implementation": attn,
            "architecture": type(cls).__name__, "params": sum(p.numel() for p in cls.parameters())}
    cls = adapt(args, cls, info, "SEQ_CLS")

    class ClassifierLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cls = cls

        def forward(self, ids, token_types, mask, labels):
            extra = {"token_type_ids": token_types} if types else {}
            return self.cls(input_ids=ids, attention_mask=mask, labels=labels, **extra).loss

    return ClassifierLoss(), info


def cls_batches(args, torch, rank, world):
    """The W micro-batches of this rank: each batch padded to its longest row (of the whole
    global batch, as ours) with pad_token_id, random ids other than it, random labels."""
    B, P = args.batch, world
    pad = args.hf_config.get("pad_token_id") or 0
    labels = max(len(args.hf_config.get("id2label", {})), 2)
    g = torch.Generator().manual_seed(1234)
    out = []
    for w in range(len(args.cls_lengths) // B):
        batch = args.cls_lengths[w * B:(w + 1) * B]
        T = max(batch)
        rows = batch[rank * (B // P):(rank + 1) * (B // P)]
        ids = torch.full((len(rows), T), pad, dtype=torch.long)
        mask = torch.zeros(len(rows), T, dtype=torch.long)
        for r, n in enumerate(rows):
            x = torch.randint(0, args.vocab, (n,), generator=g)
            x[x == pad] = (pad + 1) % args.vocab
            ids[r, :n] = x
            mask[r, :n] = 1
        out.append((ids, torch.zeros_like(ids), mask,
                    torch.randint(0, labels, (len(rows),), generator=g)))
    return out


def qa_batches(args, torch, rank, world):
    """The W micro-batches of this rank: rows padded as run_qa.py pads them (see the module
    docstring), from --qa-lengths (else W=4 batches of lengths drawn from 60-100% of T)."""
    B, T, P = args.batch, args.seq_len, world
    g = torch.Generator().manual_seed(1234)
    lengths = args.qa_lengths or torch.randint((6 * T + 9) // 10, T + 1, (4 * B,), generator=g).tolist()
    out = []
    for w in range(len(lengths) // B):
        rows = lengths[w * B + rank * (B // P): w * B + (rank + 1) * (B // P)]
        ids = torch.zeros(len(rows), T, dtype=torch.long)
        types = torch.zeros(len(rows), T, dtype=torch.long)
        mask = torch.zeros(len(rows), T, dtype=torch.long)
        starts = torch.zeros(len(rows), dtype=torch.long)
        ends = torch.zeros(len(rows), dtype=torch.long)
        for r, n in enumerate(rows):
            ids[r, :n] = torch.randint(0, args.vocab, (n,), generator=g)
            context = max(1, n // 3)
            types[r, context:n] = 1
            mask[r, :n] = 1
            starts[r] = torch.randint(context, n, (1,), generator=g)
            ends[r] = torch.randint(int(starts[r]), min(int(starts[r]) + 30, n), (1,), generator=g)
        out.append((ids, types, mask, starts, ends))
    return out


def peak_rss_bytes():
    """This process's own peak resident set size: VmHWM of /proc/self/status. Not ru_maxrss:
    the kernel carries the spawning process's peak over into it at exec (a bench that trained
    20 GB before starting this script would show here as 20 GB); ru_maxrss where there is no
    /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run(args, rank=0, world=1, init_file=None):
    threads = args.threads if args.threads else 1
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    import torch  # after the thread variables

    torch.set_num_threads(threads)
    torch.manual_seed(1234 + rank)
    if args.qa:
        model, info = build_qa(args, torch)
    elif args.cls:
        model, info = build_cls(args, torch)
    else:
        model, info = build_hf(args, torch) if args.hf_config else (build(args, torch), {})
    if args.gradient_checkpointing:
        # On the transformers model inside the loss wrapper (and PEFT's, which passes it on);
        # non-reentrant: no input that requires grad is needed under a frozen base.
        hf = next((m for m in model.modules() if hasattr(m, "gradient_checkpointing_enable")), None)
        if hf is None:
            sys.exit("--gradient-checkpointing: no transformers model in the module")
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        info["gradient_checkpointing"] = True
    model.train()  # dropout on where the model has it (the encoders' configs)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    if args.qa or args.cls:
        # The Trainer's: weight decay (0 by default) on all but biases and LayerNorm weights,
        # torch.optim.AdamW(fused=True) ("adamw_torch_fused", transformers 4.55's default on
        # torch >= 2.8), run_qa.py's README's learning rate (run_glue.py's: 2e-5; the same cost).
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        nodecay = [p for n, p in named if n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n]
        ids = {id(p) for p in nodecay}
        decay = [p for n, p in named if id(p) not in ids]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.0},
                                 {"params": nodecay, "weight_decay": 0.0}],
                                lr=3e-5, betas=(0.9, 0.999), eps=1e-8, fused=True)
        batches = (cls_batches if args.cls else qa_batches)(args, torch, rank, world)
    else:
        trainable = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapters
        decay = [p for p in trainable if p.dim() >= 2]
        rest = [p for p in trainable if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    bf16 = args.autocast == "bf16"
    if args.config == "ipex":
        try:
            import intel_extension_for_pytorch as ipex
        except BaseException as e:  # noqa: BLE001 - any failure (a mismatched IPEX exits): not here
            raise Skip(f"intel_extension_for_pytorch does not import: {why(e)}") from e
        try:
            model.train()
            model, opt = ipex.optimize(model, optimizer=opt, dtype=torch.bfloat16 if bf16 else torch.float32,
                                       level="O1")
        except Exception as e:  # noqa: BLE001
            raise Skip(f"ipex.optimize failed: {why(e)}") from e
    elif args.config == "compile":
        model = torch.compile(model)
    B = args.batch // world
    g = torch.Generator().manual_seed(rank)
    times, parts, warm = [], [], []
    for step in range(args.warmup + args.steps):
        if args.qa or args.cls:
            batch = batches[step % len(batches)]
        else:
            idx = torch.randint(0, args.vocab, (B, args.seq_len + 1), generator=g)
            batch = (idx[:, :-1], idx[:, 1:])
        if world > 1:
            torch.distributed.barrier()
        t0 = time.perf_counter()
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(*batch)
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss.backward()
        except Exception as e:  # noqa: BLE001
            if args.config == "compile" and step == 0:  # compilation happens here
                raise Skip(f"torch.compile failed: {why(e)}") from e
            raise
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        t3 = time.perf_counter()
        if world > 1:
            torch.distributed.barrier()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
            parts.append((t1 - t0, t2 - t1, t3 - t2))
        else:
            warm.append(time.perf_counter() - t0)
    if world > 1:
        torch.distributed.destroy_process_group()
    return {"times": times, "parts": parts, "warm": warm, "info": info,
            "peak_rss_bytes": peak_rss_bytes()}


def versions():
    import torch
    ipex = ""
    if "intel_extension_for_pytorch" in sys.modules:
        ipex = sys.modules["intel_extension_for_pytorch"].__version__
    blas = "MKL" if torch.backends.mkl.is_available() else "no MKL"
    if torch.backends.mkldnn.is_available():
        blas += ", oneDNN"
    return torch.__version__, ipex, blas


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def ddp_worker(rank, args, init_file, out):
    out.put((rank, run(args, rank, args.ddp, init_file)))


def main():
    if sys.argv[1:] == ["--probe"]:  # what the bench prints and records about this Python
        torch_version, _, blas = versions()
        import importlib.metadata
        try:
            peft_version = importlib.metadata.version("peft")
        except importlib.metadata.PackageNotFoundError:
            peft_version = ""
        print(json.dumps({"torch": torch_version, "blas": blas, "peft": peft_version}))
        return 0
    args = parse()
    if args.ddp:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        init_file = tempfile.mktemp(prefix="cputrain-gloo-")
        procs = [ctx.Process(target=ddp_worker, args=(r, args, init_file, q)) for r in range(args.ddp)]
        for p in procs:
            p.start()
        results = dict(q.get() for _ in procs)
        for p in procs:
            p.join()
        if os.path.exists(init_file):
            os.unlink(init_file)
        result = dict(results[0], peak_rss_bytes=sum(r["peak_rss_bytes"] for r in results.values()))
        setup = f"gloo DDP, {args.ddp} processes x 1 thread"
    else:
        try:
            result = run(args)
        except Skip as e:
            print(json.dumps({"skipped": str(e), "config": args.config, "autocast": args.autocast}))
            return 3
        setup = f"1 process x {args.threads} threads, {args.config}"
    times, parts, warm = result["times"], result["parts"], result["warm"]
    torch_version, ipex_version, blas = versions()
    print(json.dumps({"tokens_per_s": args.batch * args.seq_len / median(times),
                      "step_ms": [t * 1e3 for t in times],
                      "forward_ms": median([p[0] for p in parts]) * 1e3,
                      "backward_ms": median([p[1] for p in parts]) * 1e3,
                      "optimizer_ms": median([p[2] for p in parts]) * 1e3,
                      "warmup": args.warmup, "warmup_ms": [t * 1e3 for t in warm],
                      "setup": setup, "blas": os.environ.get("LD_LIBRARY_PATH", "") or blas,
                      "autocast": args.autocast, "config": args.config,
                      "torch": torch_version, "ipex": ipex_version,
                      "peak_rss_bytes": result["peak_rss_bytes"], **result["info"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
