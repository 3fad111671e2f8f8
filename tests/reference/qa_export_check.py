#!/usr/bin/env python3
"""`qa train`'s output_dir in transformers, for tests/qa_train_test.cc (peers' environment).

    qa_export_check.py SQUAD_V1_JSON EXAMPLES OUTPUT_DIR...

Each OUTPUT_DIR is a finished `cputrain-numa qa train --do_eval` run, predicting the first
EXAMPLES examples of SQUAD_V1_JSON at --max_seq_length 48 --doc_stride 16 (squad_reference.py's
T and STRIDE). Checks, for each:
  1. AutoModelForQuestionAnswering.from_pretrained(OUTPUT_DIR) loads with no missing, unexpected
     or mismatched keys, and AutoTokenizer.from_pretrained(OUTPUT_DIR) is a fast WordPiece one;
  2. run_qa.py's validation features (squad_reference.features with that tokenizer), the model's
     start and end logits (eval mode: no dropout) and utils_qa.py's post-processing
     (squad_reference.postprocess) give OUTPUT_DIR/predictions.json exactly, and every n-best
     entry of OUTPUT_DIR/nbest_predictions.json the same text with its start and end logit
     within 1e-5 (absolute, logits of order 1): the engine's logits at every n-best position.
Exit 0 when all hold, 1 with the first difference otherwise.
"""
import json
import os
import runpy
import sys

import numpy as np
import torch
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

TOL = 1e-5


def check(sq, out, squad_path, n):
    model, info = AutoModelForQuestionAnswering.from_pretrained(out, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"loading {out}: {bad}")
    tok = AutoTokenizer.from_pretrained(out)
    if not tok.is_fast or type(tok).__name__ not in ("BertTokenizerFast", "DistilBertTokenizerFast"):
        sys.exit(f"the tokenizer of {out} is {type(tok).__name__}")
    with open(squad_path, encoding="utf-8") as f:
        squad = json.load(f)
    records = [{"id": qa["id"], "title": a["title"], "context": p["context"],
                "question": qa["question"],
                "answers": {"text": [x["text"] for x in qa["answers"]],
                            "answer_start": [x["answer_start"] for x in qa["answers"]]}}
               for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]][:n]
    feats = sq["features"](tok, records, False)
    model.eval()
    with torch.no_grad():
        inputs = {k: torch.tensor([f[k] for f in feats])
                  for k in ("input_ids", "token_type_ids", "attention_mask")}
        if model.config.model_type == "distilbert":  # no token types
            del inputs["token_type_ids"]
        o = model(**inputs)
    start, end = o.start_logits.numpy().astype(np.float32), o.end_logits.numpy().astype(np.float32)
    preds, nbest, _ = sq["postprocess"](records, feats, start, end, False, 20, 30, 0.0)
    with open(os.path.join(out, "predictions.json"), encoding="utf-8") as f:
        ours = json.load(f)
    with open(os.path.join(out, "nbest_predictions.json"), encoding="utf-8") as f:
        ours_nbest = json.load(f)
    if ours != preds:
        diff = [(k, ours.get(k), v) for k, v in preds.items() if ours.get(k) != v]
        sys.exit(f"predictions.json differs from transformers' ({len(diff)}): {diff[:3]}")
    worst, compared = 0.0, 0
    for qid, want in nbest.items():
        got = ours_nbest[qid]
        if [c["text"] for c in got] != [c["text"] for c in want]:
            sys.exit(f"{qid}: n-best texts {[c['text'] for c in got]} vs {[c['text'] for c in want]}")
        for a, b in zip(got, want):
            for k in ("start_logit", "end_logit"):
                worst = max(worst, abs(a[k] - b[k]))
                compared += 1
    if worst > TOL:
        sys.exit(f"n-best logits {worst:.3g} apart (bound {TOL})")
    print(f"{out}: loads in transformers; {len(preds)} predictions equal; {compared} n-best "
          f"logits within {worst:.3g}")


def main():
    squad_path, n = sys.argv[1], int(sys.argv[2])
    sq = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "squad_reference.py"))
    for out in sys.argv[3:]:
        check(sq, out, squad_path, n)


main()
