#!/usr/bin/env python3
"""`cputrain-numa classify` against transformers, peft, scikit-learn and SciPy (CTest).

Run with the peers' environment (scripts/peers-env.sh). Nothing is downloaded: the data and the
tokenizers are tests/data/make_classify_models.py's (a BERT WordPiece vocabulary; a byte-level
BPE tokenizer.json with a Llama 3-style template), the models are made here with transformers'
own init (hidden 64, 2 layers, 4 heads, intermediate 128, 64 positions, dropout 0, attn
"eager"), seeded, every 1-D tensor perturbed so that a wrong mapping shows. Modes:

  features     `classify features` against the fast tokenizers (tokenizer(a, b, truncation=True,
               max_length=T)): every row's input_ids and token_type_ids, single sentences and
               pairs, at T = 12 (longest_first truncation at work) and 64, WordPiece and BPE; the
               labels against pandas.read_csv / json typing and run_glue.py's sorted label list.
  grads        engine_logits on BertForSequenceClassification, DistilBertForSequenceClassification
               and LlamaForSequenceClassification (padded rows of different lengths): logits
               within 1e-5 of transformers', the loss and every gradient within GRADS_TOL of
               float64 autograd — single-label, regression and multi-label each.
  train-CASE   `classify train` for 20 steps against a transformers + torch loop doing the
               Trainer's step (AdamW groups, linear schedule with warmup, clipping 1.0), on the
               tokenizer's features in classify train's order with each batch padded to its
               longest row (DataCollatorWithPadding): losses within 1e-5, grad norms within 1e-4;
               the --output_dir loads in AutoModelForSequenceClassification with no missing or
               unexpected key and gives engine_logits' logits on it (1e-5); eval_results.json's
               metrics equal scikit-learn's / SciPy's on the loop model's predictions.
               CASE: bert (SST-2 style, single-label), bert-regression (STS-B), bert-multilabel
               (topics, lists of labels), distilbert (MRPC pairs), llama (SST-2 style, the last
               token's score), bert-bf16 (against autocast: losses 3e-3, norms 5e-2 of max(norm,
               1); 77 where the engine refuses bf16: no AVX512_BF16 or AMX, or the kernel
               CPUTRAIN_BF16_KERNEL forces cannot run here).
  metrics      classify_metrics (our metrics.h) against scikit-learn and SciPy on random
               predictions: accuracy, F1 binary / macro / micro, Matthews, Pearson, Spearman
               (ties), MSE, subset accuracy: within 1e-12.
  peft-KIND    `classify train --lora_r 4` (KIND bert or llama): the adapter PEFT's
               PeftModel.from_pretrained loads over AutoModelForSequenceClassification (no missing
               or unexpected key; the head in modules_to_save) gives engine_logits --adapter's
               logits within 1e-5.

Exit 0 when every check holds, 1 otherwise, 77 for a skipped mode.
"""
import argparse
import csv
import json
import math
import os
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bf16_gate  # noqa: E402

if __name__ == "__main__":
    bf16_gate.skip_unless_bf16()  # a bf16 mode this CPU cannot run: skip before torch loads
sys.path.insert(0, os.path.join(HERE, "..", "data"))
import transformers_parity as tp  # noqa: E402  (torch, transformers, one thread, offline)
from bert_parity import epoch_permutation  # noqa: E402
import make_classify_models as maker  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import (AutoModelForSequenceClassification, BertConfig,  # noqa: E402
                          BertForSequenceClassification, DistilBertConfig,
                          DistilBertForSequenceClassification, LlamaConfig,
                          LlamaForSequenceClassification, PreTrainedTokenizerFast,
                          BertTokenizerFast, get_linear_schedule_with_warmup)

GRADS_TOL = 1e-5
LOGITS_TOL = 1e-5
C, L, NH, F, MAXT = 64, 2, 4, 128, 64

# Each training case: model family, data file stem, the flags naming its columns, problem.
CASES = {
    "bert": ("bert", "sst2", ".csv", [], "single_label_classification"),
    "bert-regression": ("bert", "stsb", ".csv", ["--task_name", "stsb"], "regression"),
    "bert-multilabel": ("bert", "topics", ".jsonl", ["--text_column_names", "text"],
                        "multi_label_classification"),
    "distilbert": ("distilbert", "mrpc", ".jsonl", ["--task_name", "mrpc"],
                   "single_label_classification"),
    "llama": ("llama", "sst2", ".csv", [], "single_label_classification"),
}


def setup(tmp):
    """The maker's data and tokenizers, in tmp."""
    import random
    data = os.path.join(tmp, "data")
    maker.make_data(data, random.Random(20261127))
    wp = maker.make_wordpiece(os.path.join(tmp, "wordpiece"))
    bpe = maker.make_bpe(os.path.join(tmp, "bpe"), data)
    return data, wp, bpe


# ---- the data as run_glue.py / run_classification.py read it ---------------------------------
def read_rows(path):
    """The file's rows as datasets gives them: pandas.read_csv for CSV, json for JSON Lines."""
    if path.endswith(".csv"):
        import pandas as pd
        df = pd.read_csv(path)
        return [{k: (None if (isinstance(v, float) and math.isnan(v)) else
                     (v.item() if hasattr(v, "item") else v)) for k, v in r.items()}
                for r in df.to_dict("records")]
    return [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]


def texts_of(rows, stem, case_flags):
    if "--text_column_names" in case_flags:
        col = case_flags[case_flags.index("--text_column_names") + 1]
        return [(r[col], None) for r in rows]
    if stem in ("mrpc", "stsb"):
        return [(r["sentence1"], r["sentence2"]) for r in rows]
    if stem == "mnli":
        return [(r["premise"], r["hypothesis"]) for r in rows]
    return [(r["sentence"], None) for r in rows]


def labels_of(rows, problem):
    """run_glue.py's label list (sorted distinct values) and each row's target."""
    if problem == "regression":
        return None, [float(r["label"]) for r in rows]
    if problem == "multi_label_classification":
        names = sorted({x for r in rows for x in r["label"]})
        return names, [[1.0 if n in r["label"] else 0.0 for n in names] for r in rows]
    names = sorted({r["label"] for r in rows})
    return names, [names.index(r["label"]) for r in rows]


def features(tok, pairs, T):
    out = []
    for a, b in pairs:
        e = tok(a, b, truncation=True, max_length=T)
        out.append((e["input_ids"], e.get("token_type_ids", [0] * len(e["input_ids"]))))
    return out


def check_features(cli, tmp, checks):
    data, wp, bpe = setup(tmp)
    for stem, ext, flags in (("sst2", ".csv", []), ("mrpc", ".jsonl", ["--task_name", "mrpc"]),
                             ("stsb", ".csv", ["--task_name", "stsb"]),
                             ("mnli", ".csv", ["--task_name", "mnli"]),
                             ("topics", ".jsonl", ["--text_column_names", "text"]),
                             ("sent", ".csv", ["--text_column_names", "text",
                                               "--label_column_name", "category"])):
        split = "train"
        path = os.path.join(data, f"{stem}_{split}{ext}")
        rows = read_rows(path)
        if stem == "sent":
            rows = [dict(r, label=r["category"]) for r in rows]
        pairs = texts_of(rows, stem, flags)
        problem = ("regression" if stem == "stsb" else
                   "multi_label_classification" if stem == "topics" else
                   "single_label_classification")
        names, targets = labels_of(rows, problem)
        if stem == "mnli":  # GLUE's ClassLabel order, not sorted
            names = ["entailment", "neutral", "contradiction"]
            targets = [names.index(r["label"]) for r in rows]
        for tok_name, tok in (("wordpiece", wp), ("bpe", bpe)):
            for T in (12, 64):
                dump = os.path.join(tmp, f"{stem}-{tok_name}-{T}.jsonl")
                tp.run([cli, "classify", "features", "--tokenizer_name",
                        os.path.join(tmp, tok_name), "--train_file", path, "--max_seq_length",
                        str(T), "--dump", dump] + flags)
                ours = [json.loads(x) for x in open(dump)]
                theirs = features(tok, pairs, T)
                bad = [i for i, (o, (ids, types)) in enumerate(zip(ours, theirs))
                       if o["input_ids"] != ids or (tok_name == "wordpiece"
                                                    and o["token_type_ids"] != types)]
                checks.expect(len(ours) == len(theirs) and not bad,
                              f"features {stem} {tok_name} T={T}: {len(ours)} rows equal to the "
                              f"fast tokenizer's" + (f" (first differing row {bad[0]})" if bad
                                                     else ""))
                got = [o["label"] for o in ours]
                want = [[float(x) for x in t] if isinstance(t, list) else
                        (float(t) if problem == "regression" else t) for t in targets]
                if problem == "regression":  # float32 targets, as run_glue.py casts them
                    same = np.array_equal(np.array([g[0] for g in got], np.float32),
                                          np.array(want, np.float32))
                else:
                    same = got == want
                checks.expect(same, f"features {stem} {tok_name} T={T}: labels as run_glue.py's "
                              f"label list ({names if names else 'regression'}) maps them")


# ---- the models -------------------------------------------------------------------------------
def make_model(family, labels, problem, vocab, pad, seed=20261127):
    torch.manual_seed(seed)
    common = dict(num_labels=labels, problem_type=problem)
    if family == "bert":
        m = BertForSequenceClassification(BertConfig(
            vocab_size=vocab, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
            num_attention_heads=NH, max_position_embeddings=MAXT, type_vocab_size=2,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=pad,
            attn_implementation="eager", **common))
    elif family == "distilbert":
        m = DistilBertForSequenceClassification(DistilBertConfig(
            vocab_size=vocab, dim=C, hidden_dim=F, n_layers=L, n_heads=NH,
            max_position_embeddings=MAXT, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0, pad_token_id=pad, attn_implementation="eager", **common))
    elif family == "llama":
        m = LlamaForSequenceClassification(LlamaConfig(
            vocab_size=vocab, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
            num_attention_heads=NH, num_key_value_heads=2, max_position_embeddings=MAXT,
            pad_token_id=pad, attn_implementation="eager", **common))
    else:
        m = decoder_classifier(family, vocab, pad, common)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for _, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
        head = m.classifier if family in ("bert", "distilbert") else m.score
        head.weight.mul_(5.0)  # widen the new head's small init so the logits spread
    return m.eval()


# The newer decoder families' classifiers (transformers' GenericForSequenceClassification: the
# last real token's state through score), each with its quirks on: Qwen2's q/k/v biases, Qwen3's
# q/k norms and head_dim != C / NH, Mistral's window shorter than the rows, Phi-3's fused
# projections.
NEW_DECODERS = ("qwen2", "qwen3", "mistral", "phi3")


def decoder_classifier(family, vocab, pad, common):
    import transformers
    cls = {"qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral", "phi3": "Phi3"}[family]
    kw = dict(vocab_size=vocab, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
              num_attention_heads=NH, num_key_value_heads=2, max_position_embeddings=MAXT,
              pad_token_id=pad, attn_implementation="eager", **common)
    if family == "qwen3":
        kw["head_dim"] = 32
    if family == "mistral":
        kw["sliding_window"] = 24  # shorter than the longest row, longer than its padding
    if family == "phi3":
        kw.update(rope_scaling=None, original_max_position_embeddings=MAXT, bos_token_id=None,
                  eos_token_id=None, sliding_window=None)
    config = getattr(transformers, cls + "Config")(**kw)
    return getattr(transformers, cls + "ForSequenceClassification")(config)


def hf_batch(family, rows, pad):
    """A list of (ids, types) padded to the longest (right, pad id), as DataCollatorWithPadding."""
    T = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), T), pad, dtype=torch.long)
    types = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for b, (i, t) in enumerate(rows):
        ids[b, :len(i)] = torch.tensor(i)
        types[b, :len(t)] = torch.tensor(t)
        mask[b, :len(i)] = 1
    kw = dict(input_ids=ids, attention_mask=mask)
    if family == "bert":
        kw["token_type_ids"] = types
    return kw


def labels_tensor(problem, targets):
    if problem == "single_label_classification":
        return torch.tensor(targets, dtype=torch.long)
    return torch.tensor(targets, dtype=torch.float32)


def engine_ids(path, family, rows, targets, problem):
    """engine_logits' IDS file for a classifier (engine_logits.cc)."""
    B, T = len(rows), max(len(i) for i, _ in rows)
    idx = np.zeros((B, T), np.float32)
    types = np.zeros((B, T), np.float32)
    lengths = np.zeros((B, 1), np.float32)
    for b, (i, t) in enumerate(rows):
        idx[b, :len(i)] = i
        idx[b, len(i):] = PAD[family]
        if family == "bert":  # DistilBERT and Llama have no token types
            types[b, :len(t)] = t
        lengths[b, 0] = len(i)
    d = {"idx": idx, "types": types, "lengths": lengths}
    if targets is not None:
        if problem == "single_label_classification":
            d["labels"] = np.array(targets, np.float32).reshape(B, 1)
        else:
            d["values"] = np.array(targets, np.float32).reshape(B, -1)
    save_file(d, path)


PAD = {}


# ---- grads --------------------------------------------------------------------------------------
def check_grads(engine_logits, tmp, checks):
    data, wp, bpe = setup(tmp)
    PAD.update(bert=wp.pad_token_id, distilbert=wp.pad_token_id, llama=bpe.pad_token_id)
    PAD.update({f: bpe.pad_token_id for f in NEW_DECODERS})
    rows = read_rows(os.path.join(data, "mrpc_train.jsonl"))[:4]
    for family in ("bert", "distilbert", "llama") + NEW_DECODERS:
        tok = wp if family in ("bert", "distilbert") else bpe
        feats = features(tok, [(r["sentence1"], r["sentence2"]) for r in rows], 48)
        problems = (("single_label_classification", 3), ("regression", 1),
                    ("multi_label_classification", 4))
        for problem, K in problems if family not in NEW_DECODERS else problems[:1]:
            rng = np.random.default_rng(7)
            targets = ([int(x) for x in rng.integers(0, K, len(rows))]
                       if problem == "single_label_classification" else
                       [[float(x)] for x in rng.normal(2, 1, len(rows))] if K == 1 else
                       rng.integers(0, 2, (len(rows), K)).astype(float).tolist())
            what = f"grads {family} {problem}"
            m = make_model(family, K, problem, len(tok), PAD[family])
            d = os.path.join(tmp, f"{family}-{problem}")
            m.save_pretrained(d, safe_serialization=True)
            ids = os.path.join(tmp, "ids.st")
            engine_ids(ids, family, feats, targets, problem)
            out, grads = os.path.join(tmp, "logits.st"), os.path.join(tmp, "grads.st")
            tp.run([engine_logits, d, ids, out, grads])
            kw = hf_batch(family, feats, PAD[family])
            with torch.no_grad():
                theirs = m(**kw).logits.numpy()
            diff = tp.rel_diff(load_file(out)["logits"], theirs)
            checks.expect(diff <= LOGITS_TOL, f"{what}: logits within {LOGITS_TOL:g} (rel "
                          f"{diff:.3e})")
            m64 = m.to(torch.float64)
            lab = labels_tensor(problem, [t[0] if K == 1 and isinstance(t, list) else t
                                          for t in targets])
            if lab.dtype == torch.float32:
                lab = lab.to(torch.float64)
            loss = m64(**kw, labels=lab).loss
            loss.backward()
            ours = load_file(grads)
            got, want = float(ours.pop("loss")[0]), float(loss.detach())
            dl = abs(got - want) / abs(want)
            checks.expect(dl <= GRADS_TOL, f"{what}: loss {got:.6g} vs {want:.6g} (rel {dl:.3e})")
            compare_grads(m64, family, ours, checks, what)


def our_name(family, n):
    prefix = {"bert": "bert.", "distilbert": "distilbert."}.get(family, "")
    return n[len(prefix):] if prefix and n.startswith(prefix) else n


def compare_grads(m64, family, ours, checks, what):
    off, worst = [], (0.0, "")
    for n, p in m64.named_parameters():
        on = our_name(family, n)
        if on not in ours:
            off.append(f"{n}: no gradient {on}")
            continue
        g, r = ours[on].astype(np.float64), p.grad.numpy()
        if g.shape != r.shape:
            off.append(f"{n}: shape {list(g.shape)} vs {list(r.shape)}")
            continue
        if np.linalg.norm(r) < 1e-12:
            if np.linalg.norm(g) > 1e-6:
                off.append(f"{n}: 0 in exact arithmetic, ours {np.linalg.norm(g):.3e}")
            continue
        dd = float(np.linalg.norm(g - r) / np.linalg.norm(r))
        worst = max(worst, (dd, n))
        if dd > GRADS_TOL:
            off.append(f"{n}: rel {dd:.3e}")
    checks.expect(not off, f"{what}: every gradient within {GRADS_TOL:g} (worst {worst[1]} "
                  f"{worst[0]:.3e})" + ("" if not off else ": " + "; ".join(off[:6])))


# ---- train --------------------------------------------------------------------------------------
def sk_metrics(problem, logits, targets, names):
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef, mean_squared_error
    out = {}
    if problem == "regression":
        p = np.squeeze(logits)
        out["pearson"] = float(pearsonr(p, targets)[0])
        out["spearmanr"] = float(spearmanr(p, targets)[0])
    elif problem == "multi_label_classification":
        p = (logits > 0).astype(int)
        out["f1"] = float(f1_score(np.array(targets).astype(int), p, average="micro"))
    else:
        p = np.argmax(logits, axis=1)
        out["accuracy"] = float(accuracy_score(targets, p))
        if len(names) == 2:
            out["f1"] = float(f1_score(targets, p))
            out["matthews_correlation"] = float(matthews_corrcoef(targets, p))
    return out


def check_train(cli, engine_logits, case, tmp, checks, steps=20, batch=8, lr=3e-4, wd=0.01,
                warmup=0.1, seed=42, bf16=False):
    family, stem, ext, flags, problem = CASES[case]
    data, wp, bpe = setup(tmp)
    tok = bpe if family == "llama" else wp
    PAD.update(bert=wp.pad_token_id, distilbert=wp.pad_token_id, llama=bpe.pad_token_id)
    train_path = os.path.join(data, f"{stem}_train{ext}")
    dev_path = os.path.join(data, f"{stem}_dev{ext}")
    rows, dev = read_rows(train_path), read_rows(dev_path)
    names, targets = labels_of(rows, problem)
    _, dev_targets = labels_of(dev, problem)
    if names is not None and problem == "single_label_classification":
        dev_targets = [names.index(r["label"]) for r in dev]
    K = 1 if names is None else len(names)
    model = make_model(family, K, problem, len(tok), PAD[family])
    start = os.path.join(tmp, "start")
    model.save_pretrained(start, safe_serialization=True)
    tok.save_pretrained(start)
    out = os.path.join(tmp, "out")
    T = 64
    cmd = [cli, "classify", "train", "--model_name_or_path", start, "--train_file", train_path,
           "--validation_file", dev_path, "--do_eval", "--max_seq_length", str(T),
           "--per_device_train_batch_size", str(batch), "--learning_rate", str(lr),
           "--weight_decay", str(wd), "--warmup_ratio", str(warmup), "--max_steps", str(steps),
           "--seed", str(seed), "--output_dir", out, "--progress", "quiet",
           "--set", "placement.groups=1"] + flags + (["--bf16"] if bf16 else [])
    tp.run(cmd)
    ours = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in x]
    checks.expect(len(ours) == steps, f"{case}: classify train logged {len(ours)} of {steps}")

    feats = features(tok, texts_of(rows, stem, flags), T)
    m = model.train()
    nd = ("bias", "LayerNorm", "layer_norm", "norm.weight", "layernorm")
    decay = [p for n, p in m.named_parameters() if not any(k in n for k in nd)]
    no_decay = [p for n, p in m.named_parameters() if any(k in n for k in nd)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr,
                            betas=(0.9, 0.999), eps=1e-8)
    sched = get_linear_schedule_with_warmup(opt, math.ceil(steps * warmup), steps)
    n, perms = len(feats), {}
    worst_loss = worst_norm = 0.0
    for s in range(steps):
        idx = []
        for r in range(batch):
            i = s * batch + r
            perms.setdefault(i // n, epoch_permutation(n, seed, i // n))
            idx.append(perms[i // n][i % n])
        kw = hf_batch(family, [feats[i] for i in idx], PAD[family])
        lab = labels_tensor(problem, [targets[i] for i in idx])
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = m(**kw, labels=lab).loss
        else:
            loss = m(**kw, labels=lab).loss
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0))
        opt.step()
        sched.step()
        opt.zero_grad()
        o = ours[s] if s < len(ours) else {"loss": float("nan"), "grad_norm": float("nan")}
        lv = float(loss.detach())
        worst_loss = max(worst_loss, abs(o["loss"] - lv) / abs(lv))
        if os.environ.get("CLASSIFY_PARITY_VERBOSE"):
            print(f"  step {s + 1}: loss {lv:.8g} ours {o['loss']:.8g} rel "
                  f"{abs(o['loss'] - lv) / abs(lv):.2e}, norm {norm:.6g} ours {o['grad_norm']:.6g}")
        # bf16: relative to the norm or 1, whichever is larger (a small norm near a minimum moves by
        # more than its size between two bf16 roundings)
        worst_norm = max(worst_norm,
                         abs(o["grad_norm"] - norm) / (max(norm, 1.0) if bf16 else norm))
    loss_tol, norm_tol = (3e-3, 5e-2) if bf16 else (1e-5, 1e-4)
    checks.expect(worst_loss <= loss_tol, f"{case}{' bf16' if bf16 else ''}: {steps} step losses "
                  f"within {loss_tol:g} of the transformers loop (worst {worst_loss:.3e})")
    checks.expect(worst_norm <= norm_tol, f"{case}: pre-clip gradient norms within {norm_tol:g} "
                  f"(worst {worst_norm:.3e})")
    if bf16:
        return
    check_export(engine_logits, case, out, family, tok, dev, stem, flags, dev_targets, problem,
                 names, checks)


def check_export(engine_logits, case, out, family, tok, dev, stem, flags, dev_targets, problem,
                 names, checks):
    """The output_dir in transformers: loads whole, our logits, and our eval metrics equal
    scikit-learn's / SciPy's of its predictions."""
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_warning()
    loaded, info = AutoModelForSequenceClassification.from_pretrained(out,
                                                                      output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    checks.expect(not bad, f"{case}: the output_dir loads in AutoModelForSequenceClassification "
                  f"({type(loaded).__name__}) with no missing/unexpected key ({bad})")
    if names is not None:
        # run_glue.py's label list: the sorted values, or with --task_name the GLUE dataset's
        # ClassLabel names (the files hold their indices).
        glue = {"mrpc": ["not_equivalent", "equivalent"]}.get(
            flags[flags.index("--task_name") + 1] if "--task_name" in flags else "")
        want = {str(i): n for i, n in enumerate(glue or names)}
        got = {str(k): v for k, v in loaded.config.id2label.items()}
        checks.expect(got == want, f"{case}: config.json's id2label is run_glue.py's label list "
                      f"({got})")
    feats = features(tok, texts_of(dev, stem, flags), 64)
    ids = os.path.join(out, "..", "dev-ids.st")
    engine_ids(ids, family, feats, None, problem)
    lo = os.path.join(out, "..", "dev-logits.st")
    tp.run([engine_logits, out, ids, lo])
    ours = load_file(lo)["logits"]
    with torch.no_grad():
        theirs = loaded.eval()(**hf_batch(family, feats, PAD[family])).logits.numpy()
    diff = tp.rel_diff(ours, theirs)
    checks.expect(diff <= LOGITS_TOL, f"{case}: the exported model's logits in transformers "
                  f"within {LOGITS_TOL:g} of the engine's (rel {diff:.3e})")
    res = json.load(open(os.path.join(out, "eval_results.json")))
    ref = sk_metrics(problem, theirs, dev_targets, names or [])
    off = []
    for k, v in ref.items():
        key = "eval_" + k
        if key not in res:
            continue
        # Decisions (argmax, logit > 0) are the same; correlations and errors of real-valued
        # predictions move with the logits' last digits (engine vs transformers, 1e-6 relative,
        # on a barely trained model's nearly constant outputs): 1e-3 there. The metric code itself
        # is held to 1e-12 on identical predictions by the `metrics` mode.
        tol = 1e-3 if k in ("pearson", "spearmanr", "mse") else 1e-12
        if abs(res[key] - v) > tol:
            off.append(f"{k}: ours {res[key]!r}, sklearn/scipy {v!r}")
    keys = [k for k in ref if "eval_" + k in res]
    checks.expect(keys and not off, f"{case}: eval_results.json's {keys} equal scikit-learn's / "
                  f"SciPy's on transformers' predictions of the exported model" +
                  ("" if not off else ": " + "; ".join(off)))


# ---- metrics ------------------------------------------------------------------------------------
def check_metrics(metrics_bin, tmp, checks):
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef, mean_squared_error
    rng = np.random.default_rng(11)
    cases = []
    for K, n in ((2, 50), (3, 61), (5, 200), (2, 7)):
        r = rng.integers(0, K, n)
        p = np.where(rng.random(n) < 0.6, r, rng.integers(0, K, n))
        cases.append(("labels", K, p.tolist(), r.tolist()))
    cases.append(("labels", 2, [0] * 9, [1] * 9))  # undefined F1 and Matthews: 0
    for n in (40, 9):
        y = np.round(rng.normal(2.5, 1, n), 1)  # rounded: ties for Spearman's ranks
        x = (y + rng.normal(0, 0.5, n)).astype(np.float32)
        cases.append(("regression", 1, x.tolist(), y.tolist()))
    r = rng.integers(0, 2, (30, 4))
    p = np.where(rng.random((30, 4)) < 0.7, r, 1 - r)
    cases.append(("multilabel", 4, p.tolist(), r.tolist()))
    path, out = os.path.join(tmp, "cases.json"), os.path.join(tmp, "ours.json")
    json.dump([{"kind": k, "K": K, "p": p, "r": r} for k, K, p, r in cases], open(path, "w"))
    tp.run([metrics_bin, path, out])
    ours = json.load(open(out))
    worst, off = 0.0, []
    for (kind, K, p, r), got in zip(cases, ours):
        if kind == "labels":
            want = {"accuracy": accuracy_score(r, p), "matthews_correlation": matthews_corrcoef(r, p),
                    "f1": f1_score(r, p) if K == 2 else f1_score(r, p, average="macro")}
        elif kind == "regression":
            want = {"pearson": pearsonr(p, r)[0], "spearmanr": spearmanr(p, r)[0],
                    "mse": mean_squared_error(r, p)}
        else:
            want = {"accuracy": accuracy_score(np.array(r), np.array(p)),
                    "f1": f1_score(np.array(r), np.array(p), average="micro")}
        for k, v in want.items():
            d = abs(got[k] - float(v))
            worst = max(worst, d)
            if d > 1e-12:
                off.append(f"{kind} K={K} {k}: ours {got[k]!r}, theirs {float(v)!r}")
    checks.expect(not off, f"metrics: {len(cases)} cases equal scikit-learn's / SciPy's within "
                  f"1e-12 (worst {worst:.1e})" + ("" if not off else ": " + "; ".join(off)))


# ---- peft ---------------------------------------------------------------------------------------
def check_peft(cli, engine_logits, family, tmp, checks):
    from peft import PeftModel
    data, wp, bpe = setup(tmp)
    tok = bpe if family == "llama" else wp
    PAD.update(bert=wp.pad_token_id, llama=bpe.pad_token_id)
    train = os.path.join(data, "sst2_train.csv")
    base = make_model(family, 2, "single_label_classification", len(tok), PAD[family])
    # The base as a pretrained body: its classifier stays out (PEFT's task model gets a new one);
    # a Llama body as the LlamaForCausalLM a hub checkpoint is.
    start = os.path.join(tmp, "base")
    if family == "bert":
        base.bert.save_pretrained(start, safe_serialization=True)
    else:
        from transformers import LlamaForCausalLM
        lm = LlamaForCausalLM(base.config)
        lm.model.load_state_dict(base.model.state_dict())
        lm.save_pretrained(start, safe_serialization=True)
    tok.save_pretrained(start)
    out = os.path.join(tmp, "out")
    tp.run([cli, "classify", "train", "--model_name_or_path", start, "--train_file", train,
            "--max_seq_length", "64", "--per_device_train_batch_size", "8", "--max_steps", "6",
            "--learning_rate", "5e-3", "--lora_r", "4", "--lora_alpha", "8", "--output_dir", out,
            "--progress", "quiet", "--set", "placement.groups=1"])
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = AutoModelForSequenceClassification.from_pretrained(
            start, num_labels=2, pad_token_id=PAD[family])
        pm = PeftModel.from_pretrained(hf, out)
    cfg = json.load(open(os.path.join(out, "adapter_config.json")))
    checks.expect(cfg.get("task_type") == "SEQ_CLS",
                  f"peft {family}: adapter_config.json's task_type is SEQ_CLS ({cfg.get('task_type')})")
    saved = [k for k in load_file(os.path.join(out, "adapter_model.safetensors"))
             if "classifier" in k or "score" in k]
    checks.expect(bool(saved), f"peft {family}: the head is saved with the adapter ({saved})")
    rows = read_rows(os.path.join(data, "sst2_dev.csv"))[:12]
    feats = features(tok, [(r["sentence"], None) for r in rows], 64)
    ids = os.path.join(tmp, "ids.st")
    engine_ids(ids, family, feats, None, "single_label_classification")
    lo = os.path.join(tmp, "logits.st")
    tp.run([engine_logits, "--adapter", out, "--head", "classify:2", start, ids, lo])
    with torch.no_grad():
        theirs = pm.eval()(**hf_batch(family, feats, PAD[family])).logits.numpy()
    diff = tp.rel_diff(load_file(lo)["logits"], theirs)
    checks.expect(diff <= LOGITS_TOL, f"peft {family}: PeftModel's logits within {LOGITS_TOL:g} "
                  f"of the engine's with the adapter (rel {diff:.3e})")


def main(argv=None):
    global GRADS_TOL
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["features", "grads", "metrics", "peft-bert", "peft-llama"] +
                    [f"train-{c}" for c in CASES] + ["train-bert-bf16"])
    ap.add_argument("--cli")
    ap.add_argument("--engine-logits")
    ap.add_argument("--metrics")
    ap.add_argument("--grads-tol", type=float, default=1e-5)
    a = ap.parse_args(argv)
    GRADS_TOL = a.grads_tol
    checks = tp.Checks()
    with tempfile.TemporaryDirectory() as tmp:
        if a.mode == "features":
            check_features(a.cli, tmp, checks)
        elif a.mode == "grads":
            check_grads(a.engine_logits, tmp, checks)
        elif a.mode == "metrics":
            check_metrics(a.metrics, tmp, checks)
        elif a.mode.startswith("peft-"):
            check_peft(a.cli, a.engine_logits, a.mode[5:], tmp, checks)
        else:
            case = a.mode[len("train-"):]
            bf16 = case.endswith("-bf16")
            if bf16:
                case = case[:-5]
                if tp.refuses_bf16(a.cli, "classify train"):
                    return 77
            check_train(a.cli, a.engine_logits, case, tmp, checks, bf16=bf16)
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
