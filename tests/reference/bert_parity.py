#!/usr/bin/env python3
"""Our BERT and DistilBERT question-answering models against transformers' (CTest).

Run with the peers' environment (scripts/peers-env.sh). Nothing is downloaded: each mode makes a
small model with transformers' own init (BertConfig / DistilBertConfig: vocab 300, hidden 64,
intermediate 160, 2 layers, 4 heads, max_position_embeddings 64, attn_implementation "eager",
dropout 0, fp32), seeded, every 1-D tensor (LayerNorm weights, biases) perturbed so a wrong
mapping shows, saves it with save_pretrained(safe_serialization=True), and checks:

  1. import   engine_logits on (B=3, T=48) rows of different unpadded lengths (the attention
              mask a prefix of ones, as run_qa.py's padded features), random token types: start
              and end logits against transformers' within 1e-5 (rel_diff), padded positions
              included (the loss's softmax runs over them);
  2. grads    the loss (mean over rows of (CE(start) + CE(end)) / 2, BertForQuestionAnswering's)
              and every parameter's gradient against transformers' autograd in float64, within
              GRADS_TOL per tensor; a label at T (ignored) in one row.

Modes: bert (BertForQuestionAnswering; one row's end label at T, ignored: the reference divides
by all rows as ours does), bert-no-ignore (every label inside: transformers' own loss),
bert-old-names (the same weights without the "bert." prefix, LayerNorm under TF-era names
gamma/beta, and pretraining heads (cls.*) that must be dropped), distilbert
(DistilBertForQuestionAnswering).

Exit 0 when every check holds, 1 otherwise.
"""
import argparse
import copy
import os
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bf16_gate  # noqa: E402

if __name__ == "__main__":
    bf16_gate.skip_unless_bf16()  # a bf16 mode this CPU cannot run: skip before torch loads
import transformers_parity as tp  # noqa: E402  (torch, transformers, one thread, offline)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import (BertConfig, BertForQuestionAnswering,  # noqa: E402
                          DistilBertConfig, DistilBertForQuestionAnswering)

GRADS_TOL = 1e-5
LOGITS_TOL = 1e-5
V, C, F, L, NH, MAXT = 300, 64, 160, 2, 4, 64
B, T = 3, 48


def make_model(kind: str, seed: int = 20261125):
    torch.manual_seed(seed)
    if kind.startswith("bert"):
        cfg = BertConfig(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                         num_attention_heads=NH, max_position_embeddings=MAXT, type_vocab_size=2,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         attn_implementation="eager")
        model = BertForQuestionAnswering(cfg)
    else:
        cfg = DistilBertConfig(vocab_size=V, dim=C, hidden_dim=F, n_layers=L, n_heads=NH,
                               max_position_embeddings=MAXT, dropout=0.0, attention_dropout=0.0,
                               qa_dropout=0.0, attn_implementation="eager")
        model = DistilBertForQuestionAnswering(cfg)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
        # The qa head's init is small; widen it so the logits are not all near 0.
        model.qa_outputs.weight.mul_(5.0)
    return model.eval()


def inputs(seed: int, no_ignore: bool = False):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, V, size=(B, T))
    types = rng.integers(0, 2, size=(B, T))
    lengths = np.array([T, T - 17, 9])
    for b in range(B):  # padding as the tokenizer writes it: [PAD] = 0, type 0
        idx[b, lengths[b]:] = 0
        types[b, lengths[b]:] = 0
    starts = rng.integers(0, T, size=B)
    ends = rng.integers(0, T, size=B)
    if not no_ignore:
        ends[1] = T  # ignored, as BertForQuestionAnswering clamps an outside label to T
    return idx, types, lengths, starts, ends


def hf_forward(model, kind, idx, types, lengths, starts=None, ends=None):
    mask = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        mask[b, :lengths[b]] = 1
    kw = dict(input_ids=torch.from_numpy(idx), attention_mask=mask)
    if kind.startswith("bert"):
        kw["token_type_ids"] = torch.from_numpy(types)
    if starts is not None:
        kw["start_positions"] = torch.from_numpy(starts)
        kw["end_positions"] = torch.from_numpy(ends)
    return model(**kw)


def save_inputs(path, idx, types, lengths, starts, ends):
    """engine_logits' IDS file for a span head (engine_logits.cc): ids, types, lengths, labels."""
    save_file({"idx": idx.astype(np.float32), "types": types.astype(np.float32),
               "lengths": lengths.reshape(B, 1).astype(np.float32),
               "starts": starts.reshape(B, 1).astype(np.float32),
               "ends": ends.reshape(B, 1).astype(np.float32)}, path)


def qa_loss(model, kind, idx, types, lengths, starts, ends):
    """BertForQuestionAnswering's loss, (CE(start) + CE(end)) / 2 with a label outside [0, T)
    ignored; ours divides by the rows of the batch, ignored ones included (transformers by the
    rows not ignored: the same whenever no label is ignored, as with run_qa.py's features)."""
    res = hf_forward(model, kind, idx, types, lengths)
    ce = torch.nn.CrossEntropyLoss(ignore_index=T, reduction="sum")
    s_t, e_t = torch.from_numpy(starts).clamp(0, T), torch.from_numpy(ends).clamp(0, T)
    return 0.5 * (ce(res.start_logits, s_t) + ce(res.end_logits, e_t)) / B


def our_names(model, kind):
    """transformers' parameter names as ToHfTensors names our gradients (no body prefix)."""
    prefix = "bert." if kind.startswith("bert") else "distilbert."
    out = {}
    for n, _ in model.named_parameters():
        out[n] = n[len(prefix):] if n.startswith(prefix) else n
    return out


def check(engine_logits, kind, tmp, checks):
    model = make_model(kind)
    d = os.path.join(tmp, kind)
    if kind == "bert-old-names":
        # The body as a BertModel save names it (no "bert." prefix), LayerNorm under its TF-era
        # names gamma/beta, and a pretraining checkpoint's heads beside it (dropped with a note).
        model.save_pretrained(d, safe_serialization=True)
        t = load_file(os.path.join(d, "model.safetensors"))
        renamed = {}
        for n, a in t.items():
            n = n[len("bert."):] if n.startswith("bert.") else n
            n = n.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                         "LayerNorm.beta")
            renamed[n] = a
        renamed["cls.predictions.bias"] = np.zeros(V, np.float32)
        renamed["cls.seq_relationship.weight"] = np.zeros((2, C), np.float32)
        save_file(renamed, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    else:
        model.save_pretrained(d, safe_serialization=True)
    idx, types, lengths, starts, ends = inputs(7, no_ignore=kind.endswith("no-ignore"))
    if kind.startswith("distil"):
        types[:] = 0  # DistilBERT has no token types
    ids = os.path.join(tmp, f"{kind}-ids.safetensors")
    save_inputs(ids, idx, types, lengths, starts, ends)
    out, grads = os.path.join(tmp, f"{kind}-logits.st"), os.path.join(tmp, f"{kind}-grads.st")
    tp.run([engine_logits, d, ids, out, grads])
    ours = load_file(grads)
    logits = load_file(out)["logits"]
    with torch.no_grad():
        r = hf_forward(model, kind, idx, types, lengths)
    theirs = np.stack([r.start_logits.numpy(), r.end_logits.numpy()], axis=-1)
    diff = tp.rel_diff(logits, theirs)
    checks.expect(diff <= LOGITS_TOL, f"{kind}: start/end logits within {LOGITS_TOL:g} of "
                  f"transformers' (rel {diff:.3e})")
    m64 = copy.deepcopy(model).to(torch.float64)
    loss_t = qa_loss(m64, kind, idx, types, lengths, starts, ends)
    if ends.max() < T:  # no label ignored: transformers' own loss is this one
        ref = hf_forward(m64, kind, idx, types, lengths, starts, ends).loss
        checks.expect(abs(float(ref.detach()) - float(loss_t.detach())) <= 1e-12 * abs(float(ref.detach())),
                      f"{kind}: the reference loss is BertForQuestionAnswering's")
    loss_t.backward()
    loss = float(loss_t.item())
    got = float(ours.pop("loss")[0])
    dl = abs(got - loss) / abs(loss)
    checks.expect(dl <= GRADS_TOL, f"{kind}: loss {got!r} vs transformers {loss!r} "
                  f"(relative {dl:.3e})")
    names = our_names(m64, kind)
    off, worst = [], (0.0, "")
    # Some gradients are 0 in exact arithmetic (a softmax ignores a shift shared by all its
    # inputs: the key biases, the qa head's bias, the last LayerNorm's bias through it):
    # transformers' float64 ones are ~1e-17, ours fp32 rounding noise; those must be below
    # ZERO_TOL in norm instead (sums of O(1) fp32 terms).
    ZERO_TOL = 1e-6
    for n, p in m64.named_parameters():
        ours_n = names[n]
        if ours_n not in ours:
            off.append(f"{n}: no gradient named {ours_n}")
            continue
        g, rr = ours[ours_n].astype(np.float64), p.grad.numpy()
        if g.shape != rr.shape:
            off.append(f"{n}: shape {list(g.shape)} vs {list(rr.shape)}")
            continue
        if np.linalg.norm(rr) < 1e-12:
            if np.linalg.norm(g) > ZERO_TOL:
                off.append(f"{n}: 0 in exact arithmetic, ours has norm {np.linalg.norm(g):.3e}")
            continue
        d_ = float(np.linalg.norm(g - rr) / np.linalg.norm(rr))
        worst = max(worst, (d_, n))
        if d_ > GRADS_TOL:
            off.append(f"{n}: relative {d_:.3e} (|grad| {np.linalg.norm(rr):.3e})")
    print(f"  {kind}: {len(names)} gradients, worst {worst[1]} at {worst[0]:.3e}")
    checks.expect(not off, f"{kind}: every gradient within {GRADS_TOL:g}" +
                  ("" if not off else ": " + "; ".join(off)))


# ---- training: qa train against a transformers + torch loop -----------------------------------
MASK64 = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def epoch_permutation(n, seed, e):
    """train::EpochPermutation (src/train/batches.cc): SplitMix64 Fisher-Yates with Lemire's
    unbiased bounded draws, the order qa train reads its features in (task/task_rows.h)."""
    _, first = splitmix64(seed)
    state = first ^ ((e * 0xD1342543DE82EF95 + 0x632BE59BD9B4E019) & MASK64)
    out = list(range(n))
    for i in range(n, 1, -1):
        threshold = ((1 << 64) - i) % i
        while True:
            state, r = splitmix64(state)
            m = r * i
            if (m & MASK64) >= threshold:
                j = m >> 64
                break
        out[i - 1], out[j] = out[j], out[i - 1]
    return out


def train_check(cli, kind, tmp, checks, steps=20, batch=8, lr=3e-4, wd=0.01, warmup=0.1,
                seed=42, bf16=False):
    """qa train for `steps` updates against transformers' model trained by a loop doing what
    HF's Trainer does per step (forward in train mode, dropout 0 here; loss.backward();
    clip_grad_norm_ 1.0; torch.optim.AdamW with the Trainer's parameter groups: weight decay on
    everything but biases and LayerNorm weights; get_linear_schedule_with_warmup), on run_qa.py's
    features made by transformers' fast tokenizer (squad_reference.py), in the order qa train
    reads them (epoch_permutation): per-step losses within LOSS_TOL, pre-clip grad norms within
    NORM_TOL, learning rates within 1e-12; then the exported directory loads in
    AutoModelForQuestionAnswering with no missing or unexpected key and its weights are the
    loop's within WEIGHTS_TOL."""
    import json
    import math
    from transformers import AutoModelForQuestionAnswering, get_linear_schedule_with_warmup
    ref = os.path.join(tmp, "squad")
    tp.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         "squad_reference.py"), ref])
    tok_dir = os.path.join(ref, "tokenizer")
    vocab = len(open(os.path.join(tok_dir, "vocab.txt"), encoding="utf-8").read().splitlines())
    global V
    V = vocab
    model = make_model(kind)
    d = os.path.join(tmp, kind + "-train")
    model.save_pretrained(d, safe_serialization=True)
    feats = [json.loads(line) for line in open(os.path.join(ref, "features_v1_train.jsonl"))]
    n = len(feats)
    out = os.path.join(tmp, kind + "-out")
    cmd = [cli, "qa", "train", "--model_name_or_path", d, "--tokenizer_name", tok_dir,
           "--train_file", os.path.join(ref, "v1.json"), "--max_seq_length", "48",
           "--doc_stride", "16", "--per_device_train_batch_size", str(batch),
           "--learning_rate", str(lr), "--weight_decay", str(wd), "--warmup_ratio", str(warmup),
           "--max_steps", str(steps), "--seed", str(seed), "--output_dir", out,
           "--progress", "quiet", "--set", "placement.groups=1"]
    if bf16:
        cmd.append("--bf16")
    tp.run(cmd)
    ours = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))
            if '"loss"' in line]
    checks.expect(len(ours) == steps, f"{kind}: qa train logged {len(ours)} steps of {steps}")

    torch.manual_seed(0)
    m = model.train()
    decay = [p for nm, p in m.named_parameters() if not (nm.endswith("bias") or "LayerNorm" in nm
                                                        or "layer_norm" in nm)]
    no_decay = [p for nm, p in m.named_parameters() if nm.endswith("bias") or "LayerNorm" in nm
                or "layer_norm" in nm]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr,
                            betas=(0.9, 0.999), eps=1e-8)
    warm = math.ceil(steps * warmup)
    sched = get_linear_schedule_with_warmup(opt, warm, steps)
    perms = {}
    worst_loss = worst_norm = worst_lr = 0.0
    for s in range(steps):
        rows = []
        for r in range(batch):
            i = s * batch + r
            e = i // n
            if e not in perms:
                perms[e] = epoch_permutation(n, seed, e)
            rows.append(feats[perms[e][i % n]])
        batch_t = {k: torch.tensor([f[k] for f in rows]) for k in
                   ("input_ids", "attention_mask", "start_positions", "end_positions")}
        if kind.startswith("bert"):
            batch_t["token_type_ids"] = torch.tensor([f["token_type_ids"] for f in rows])
        lr_now = sched.get_last_lr()[0]
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = m(**batch_t).loss
        else:
            loss = m(**batch_t).loss
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0))
        opt.step()
        sched.step()
        opt.zero_grad()
        o = ours[s] if s < len(ours) else {"loss": float("nan"), "grad_norm": float("nan"),
                                           "lr": float("nan")}
        lv = float(loss.detach())
        worst_loss = max(worst_loss, abs(o["loss"] - lv) / abs(lv))
        worst_norm = max(worst_norm, abs(o["grad_norm"] - norm) / norm)
        worst_lr = max(worst_lr, abs(o["lr"] - lr_now))
    loss_tol, norm_tol = (2e-3, 5e-2) if bf16 else (1e-5, 1e-4)
    checks.expect(worst_loss <= loss_tol, f"{kind}{' bf16' if bf16 else ''}: {steps} step "
                  f"losses within {loss_tol:g} of the transformers loop (worst {worst_loss:.3e})")
    checks.expect(worst_norm <= norm_tol, f"{kind}: pre-clip gradient norms within {norm_tol:g} "
                  f"(worst {worst_norm:.3e})")
    checks.expect(worst_lr <= 1e-12, f"{kind}: learning rates = get_linear_schedule_with_warmup's"
                  f" (worst {worst_lr:.3e})")
    import logging
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_warning()
    loaded, info = AutoModelForQuestionAnswering.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    checks.expect(not bad, f"{kind}: the output_dir loads with AutoModelForQuestionAnswering, "
                  f"no missing/unexpected/mismatched key ({bad})")
    if not bf16:
        # Tensors whose gradient is 0 in exact arithmetic (a softmax ignores a shift shared by
        # its inputs: the key biases, the qa head's bias, the last block's output LayerNorm bias)
        # get rounding noise on both sides, which AdamW's division by sqrt(v) turns into steps of
        # up to lr each way: those are held to 2 * steps * lr absolute, the rest to WEIGHTS_TOL
        # of each tensor's largest value.
        last = f"layer.{L - 1}."
        noise = ("key.bias", "k_lin.bias", "qa_outputs.bias", last + "output.LayerNorm.bias",
                 last + "output_layer_norm.bias")
        theirs = dict(m.named_parameters())
        worst, off = (0.0, ""), []
        for nm, p in loaded.named_parameters():
            a, b = p.detach().numpy(), theirs[nm].detach().numpy()
            d_abs = float(np.max(np.abs(a - b)))
            if nm.endswith(noise):
                if d_abs > 2 * steps * lr:
                    off.append(f"{nm}: {d_abs:.3e} absolute")
                continue
            worst = max(worst, (d_abs / max(float(np.max(np.abs(b))), 1e-30), nm))
        checks.expect(worst[0] <= 1e-3 and not off, f"{kind}: trained weights within 1e-3 of the "
                      f"loop's (worst {worst[1]} {worst[0]:.3e}) {off}")
    del logging


def main(argv=None):
    global GRADS_TOL
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["bert", "bert-no-ignore", "bert-old-names", "distilbert",
                                     "train-bert", "train-distilbert", "train-bert-bf16"])
    ap.add_argument("--engine-logits")
    ap.add_argument("--cli")
    ap.add_argument("--grads-tol", type=float, default=GRADS_TOL,
                    help="per-tensor gradient bound (a sanitizer build's code rounds differently)")
    args = ap.parse_args(argv)
    GRADS_TOL = args.grads_tol
    checks = tp.Checks()
    with tempfile.TemporaryDirectory() as tmp:
        if args.mode.startswith("train-"):
            kind = args.mode[len("train-"):]
            bf16 = kind.endswith("-bf16")
            if bf16:
                kind = kind[:-len("-bf16")]
                if tp.refuses_bf16(args.cli, "qa train"):
                    return 77
            train_check(args.cli, kind, tmp, checks, bf16=bf16)
        else:
            check(args.engine_logits, args.mode, tmp, checks)
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
