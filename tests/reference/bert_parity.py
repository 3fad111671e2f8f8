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
    save_file({"idx": idx.astype(np.float32), "types": types.astype(np.float32),
               "lengths": lengths.reshape(B, 1).astype(np.float32),
               "starts": starts.reshape(B, 1).astype(np.float32),
               "ends": ends.reshape(B, 1).astype(np.float32)}, ids)
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
    res = hf_forward(m64, kind, idx, types, lengths)
    # BertForQuestionAnswering's loss, (CE(start) + CE(end)) / 2 with a label outside [0, T)
    # ignored; ours divides by the rows of the batch, ignored ones included (transformers by the
    # rows not ignored: the same whenever no label is ignored, as with run_qa.py's features).
    ce = torch.nn.CrossEntropyLoss(ignore_index=T, reduction="sum")
    s_t, e_t = torch.from_numpy(starts).clamp(0, T), torch.from_numpy(ends).clamp(0, T)
    loss_t = 0.5 * (ce(res.start_logits, s_t) + ce(res.end_logits, e_t)) / B
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


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["bert", "bert-no-ignore", "bert-old-names", "distilbert"])
    ap.add_argument("--engine-logits", required=True)
    args = ap.parse_args(argv)
    checks = tp.Checks()
    with tempfile.TemporaryDirectory() as tmp:
        check(args.engine_logits, args.mode, tmp, checks)
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
