#!/usr/bin/env python3
"""The SQuAD reference for tests/squad_test.cc: what Hugging Face's run_qa.py / utils_qa.py and
the official evaluate-v1.1.py / evaluate-v2.0.py make of small crafted inputs, written out for
the C++ side to match. Our own code, following those scripts step by step, on transformers'
BertTokenizerFast (the fast tokenizer run_qa.py requires).

Usage: squad_reference.py OUT_DIR
Writes into OUT_DIR:
  tokenizer/                 BertTokenizerFast.save_pretrained of a small uncased vocabulary
  v1.json, v2.json           SQuAD v1.1 / v2.0 files; v1.jsonl, v2.jsonl: the same as Hugging
                             Face datasets records (v2.jsonl is also given as v2_list.json)
  features_{v1,v2}_{train,validation}.jsonl   run_qa.py's features (T=48, doc_stride=16)
  logits_{v1,v2}.f32         random float32 start then end logits, (features, T) each
  post_{v1,v2}_{a,b}/        utils_qa.py's predictions.json, nbest_predictions.json,
                             null_odds.json (v2) for two option sets (post_options.json)
  metrics.json               normalize_answer, EM and F1 (v1.1 and v2.0) of crafted pairs, and
                             the scripts' outputs for crafted predictions (metric_preds_*.json)
"""
import collections
import json
import os
import re
import string
import sys

import numpy as np
from transformers import BertTokenizerFast

T = 48
STRIDE = 16

# ---------------------------------------------------------------------------------- vocabulary
WORDS = """the a an of in on at to is was and or for with by from as it its this that what who
when where which how why did does do river seine flows through paris capital france city north
sea mouth normandy valley long km miles kilometres years year old cafe muller zurich served creme
brulee angstrom students famous people festival festivals every hosts beijing china lights
question answer window edge stride token tokens context first last middle one two three four
five six seven eight nine ten hundred thousand name called known main largest river's""".split()
CJK = "北京是中国的首都东西南北上海城市"


def write_vocab(path):
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += sorted(set(WORDS))
    toks += list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]
    toks += list(string.digits) + ["##" + c for c in string.digits]
    toks += list(string.punctuation) + ["##s", "##ing", "##ed", "##er", "##ly"]
    toks += list(CJK) + ["。"]
    seen, out = set(), []
    for t in toks:
        if t not in seen:
            seen.add(t)
            out.append(t)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


# ---------------------------------------------------------------------------------- data
LONG = ("The river Seine flows through Paris, the capital of France, and reaches the sea in "
        "Normandy after 777 km. Every year thousands of people walk along its valley; the "
        "largest city on the river is Paris, which was called Lutetia two thousand years ago. "
        "From the north, the river's mouth at Le Havre is known as the main port of the Seine.")
ACCENTS = ("Café Müller in Zürich served crème brûlée to Ångström's students in 1923, and the "
           "café is still famous: Zoë and Ñandú ate there every Tuesday.")
CJK_TEXT = ("北京是中国的首都。 The city 北京 hosts 🎉 festivals every year 😀 and 上海 is "
            "the largest city of 中国 by people.")


def spans(context, words_max=3):
    """Every span of 1..words_max whitespace-separated words: answers at every position, so
    some start or end at window edges, some cross them, one starts in a window's last token."""
    words = [(m.start(), m.group()) for m in re.finditer(r"\S+", context)]
    out = []
    for i in range(len(words)):
        for k in range(1, words_max + 1):
            if i + k > len(words):
                break
            s = words[i][0]
            e = words[i + k - 1][0] + len(words[i + k - 1][1])
            out.append((s, context[s:e]))
    return out


def make_examples(v2):
    """Records in the Hugging Face layout: (title, context, [(id, question, texts, starts)])."""
    paragraphs = []
    n = 0
    for title, ctx, step, qform in (("Seine", LONG, 3, "what is at {}?"),
                                    ("Cafe", ACCENTS, 2, "  \u00a0\u3000who or what is at {}?"),
                                    ("Beijing", CJK_TEXT, 1, "\twhat is at {}?")):
        qas = []
        for j, (s, text) in enumerate(spans(ctx)[::step]):
            n += 1
            texts, starts = [text], [s]
            if j % 7 == 3:  # several gold answers: the span, a shorter one inside, a repeat
                inner = text.split()[0]
                texts = [text, inner, text]
                starts = [s, s, s]
            question = qform.format(j)
            if j % 11 == 5:  # a question long enough to leave 20-token windows
                question = "which of the words in the long context " + "is it " * 7 + "?"
            qas.append((f"{title.lower()}-{j}", question, texts, starts))
        if v2:
            for j in range(3):
                qas.append((f"{title.lower()}-none-{j}", f"what is not in the text {j}?", [], []))
        paragraphs.append((title, ctx, qas))
    # One answer whose text differs from the context at answer_start (counted, not refused).
    title, ctx, qas = paragraphs[0]
    qid, q, texts, starts = qas[0]
    qas[0] = (qid, q, ["Xhe"], [0])
    return paragraphs


def squad_json(paragraphs, v2):
    data = []
    for title, ctx, qas in paragraphs:
        out_qas = []
        for qid, q, texts, starts in qas:
            qa = {"id": qid, "question": q,
                  "answers": [{"text": t, "answer_start": s} for t, s in zip(texts, starts)]}
            if v2:
                qa["is_impossible"] = not texts
            out_qas.append(qa)
        data.append({"title": title, "paragraphs": [{"context": ctx, "qas": out_qas}]})
    return {"version": "v2.0" if v2 else "1.1", "data": data}


def hf_records(paragraphs):
    return [{"id": qid, "title": title, "context": ctx, "question": q,
             "answers": {"text": texts, "answer_start": starts}}
            for title, ctx, qas in paragraphs for qid, q, texts, starts in qas]


# ---------------------------------------------------------------------------------- run_qa.py
def features(tok, records, train):
    """prepare_train_features / prepare_validation_features, question first, padded."""
    questions = [r["question"].lstrip() for r in records]
    enc = tok(questions, [r["context"] for r in records], truncation="only_second",
              max_length=T, stride=STRIDE, return_overflowing_tokens=True,
              return_offsets_mapping=True, padding="max_length")
    out = []
    for i in range(len(enc["input_ids"])):
        r = records[enc["overflow_to_sample_mapping"][i]]
        ids, offsets, seq = enc["input_ids"][i], enc["offset_mapping"][i], enc.sequence_ids(i)
        f = {"input_ids": ids, "token_type_ids": enc["token_type_ids"][i],
             "attention_mask": enc["attention_mask"][i]}
        if train:
            cls = ids.index(tok.cls_token_id)
            if not r["answers"]["answer_start"]:
                f["start_positions"] = f["end_positions"] = cls
            else:
                start_char = r["answers"]["answer_start"][0]
                end_char = start_char + len(r["answers"]["text"][0])
                a = 0
                while seq[a] != 1:
                    a += 1
                b = len(ids) - 1
                while seq[b] != 1:
                    b -= 1
                if offsets[a][0] <= start_char and offsets[b][1] >= end_char:
                    while a < len(offsets) and offsets[a][0] <= start_char:
                        a += 1
                    while offsets[b][1] >= end_char:
                        b -= 1
                    f["start_positions"], f["end_positions"] = a - 1, b + 1
                else:
                    f["start_positions"] = f["end_positions"] = cls
        else:
            f["offset_mapping"] = [list(o) if seq[k] == 1 else None for k, o in enumerate(offsets)]
            f["example_id"] = r["id"]
        out.append(f)
    return out


# ---------------------------------------------------------------------------------- utils_qa.py
def postprocess(records, feats, start_all, end_all, v2, n_best, max_len, threshold):
    by_example = collections.defaultdict(list)
    index = {r["id"]: i for i, r in enumerate(records)}
    for i, f in enumerate(feats):
        by_example[index[f["example_id"]]].append(i)
    preds, nbest_all, odds = {}, {}, {}
    for e, r in enumerate(records):
        null = None
        cands = []
        for fi in by_example[e]:
            sl, el, om = start_all[fi], end_all[fi], feats[fi]["offset_mapping"]
            score0 = sl[0] + el[0]
            if null is None or null["score"] > score0:
                null = {"offsets": (0, 0), "score": score0, "start_logit": sl[0], "end_logit": el[0]}
            tops = np.argsort(sl)[-1:-n_best - 1:-1].tolist()
            tope = np.argsort(el)[-1:-n_best - 1:-1].tolist()
            for s in tops:
                for t in tope:
                    if s >= len(om) or t >= len(om) or om[s] is None or om[t] is None:
                        continue
                    if t < s or t - s + 1 > max_len:
                        continue
                    cands.append({"offsets": (om[s][0], om[t][1]), "score": sl[s] + el[t],
                                  "start_logit": sl[s], "end_logit": el[t]})
        if v2:
            cands.append(null)
            null_score = null["score"]
        best = sorted(cands, key=lambda c: c["score"], reverse=True)[:n_best]
        if v2 and all(c["offsets"] != (0, 0) for c in best):
            best.append(null)
        for c in best:
            o = c.pop("offsets")
            c["text"] = r["context"][o[0]:o[1]]
        if not best or (len(best) == 1 and best[0]["text"] == ""):
            best.insert(0, {"text": "empty", "start_logit": 0.0, "end_logit": 0.0, "score": 0.0})
        scores = np.array([c.pop("score") for c in best])
        probs = np.exp(scores - np.max(scores))
        probs = probs / probs.sum()
        for p, c in zip(probs, best):
            c["probability"] = p
        if not v2:
            preds[r["id"]] = best[0]["text"]
        else:
            k = 0
            while best[k]["text"] == "":
                k += 1
            diff = null_score - best[k]["start_logit"] - best[k]["end_logit"]
            odds[r["id"]] = float(diff)
            preds[r["id"]] = "" if diff > threshold else best[k]["text"]
        nbest_all[r["id"]] = [{k: float(v) if isinstance(v, np.floating) else v
                               for k, v in c.items()} for c in best]
    return preds, nbest_all, odds


# ---------------------------------------------------------------------------------- official metrics
def normalize_answer(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1_v1(pred, gold):
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    if same == 0:
        return 0
    precision, recall = 1.0 * same / len(p), 1.0 * same / len(g)
    return (2 * precision * recall) / (precision + recall)


def tokens_v2(s):
    return normalize_answer(s).split() if s else []


def f1_v2(pred, gold):
    g, p = tokens_v2(gold), tokens_v2(pred)
    same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if not g or not p:
        return int(g == p)
    if same == 0:
        return 0
    precision, recall = 1.0 * same / len(p), 1.0 * same / len(g)
    return (2 * precision * recall) / (precision + recall)


def evaluate_v1(squad, preds):
    em = f1 = total = 0
    for art in squad["data"]:
        for par in art["paragraphs"]:
            for qa in par["qas"]:
                total += 1
                if qa["id"] not in preds:
                    continue
                golds = [a["text"] for a in qa["answers"]]
                em += max(normalize_answer(preds[qa["id"]]) == normalize_answer(g) for g in golds)
                f1 += max(f1_v1(preds[qa["id"]], g) for g in golds)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def evaluate_v2(squad, preds, na_probs=None, thresh=1.0):
    has_ans = collections.OrderedDict()
    exact_raw, f1_raw = collections.OrderedDict(), collections.OrderedDict()
    for art in squad["data"]:
        for par in art["paragraphs"]:
            for qa in par["qas"]:
                qid = qa["id"]
                has_ans[qid] = bool(qa["answers"])
                golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
                exact_raw[qid] = max(int(normalize_answer(g) == normalize_answer(preds[qid]))
                                     for g in golds)
                f1_raw[qid] = max(f1_v2(preds[qid], g) for g in golds)
    probs = na_probs if na_probs is not None else {k: 0.0 for k in preds}

    def threshold(raw):
        return collections.OrderedDict(
            (q, float(not has_ans[q]) if probs[q] > thresh else s) for q, s in raw.items())

    ex_t, f1_t = threshold(exact_raw), threshold(f1_raw)

    def block(keys):
        return (100.0 * sum(ex_t[k] for k in keys) / len(keys),
                100.0 * sum(f1_t[k] for k in keys) / len(keys), len(keys))

    out = collections.OrderedDict()
    out["exact"], out["f1"], out["total"] = block(list(ex_t))
    for name, want in (("HasAns", True), ("NoAns", False)):
        keys = [k for k, v in has_ans.items() if v == want]
        if keys:
            e, f, n = block(keys)
            out[f"{name}_exact"], out[f"{name}_f1"], out[f"{name}_total"] = e, f, n
    if na_probs is not None:
        for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
            cur = best = sum(1 for v in has_ans.values() if not v)
            best_t = 0.0
            for q in sorted(na_probs, key=lambda k: na_probs[k]):
                if q not in raw:
                    continue
                cur += raw[q] if has_ans[q] else (-1 if preds[q] else 0)
                if cur > best:
                    best, best_t = cur, na_probs[q]
            out[f"best_{name}"] = 100.0 * best / len(raw)
            out[f"best_{name}_thresh"] = best_t
    return out


METRIC_STRINGS = [
    "The Eiffel Tower", "eiffel tower", "  an apple a day ", "the-end", "The end.",
    "Αθήνα ΟΔΟΣ", "ΟΔΟΣ.", "İstanbul", "ẞtraße", "ǅemal", "the\u00a0answer\u3000is", "a_b the_c",
    "théâtre the café", "“quoted” — dash", "a1 an2 the3 a", "", "   ", "!!!", "a an the",
    "北京 the 中国", "x\u2028y\u0085z", "Ⅻ the Ⅻ", "aé the", "the² a",
]


def metric_cases(out_dir, v1_squad, v2_squad):
    pairs = [(p, g) for p in METRIC_STRINGS for g in METRIC_STRINGS[::3]]
    cases = {
        "normalize": [[s, normalize_answer(s)] for s in METRIC_STRINGS],
        "pairs": [[p, g, normalize_answer(p) == normalize_answer(g), f1_v1(p, g), f1_v2(p, g)]
                  for p, g in pairs],
    }
    # Crafted predictions: every gold answer, a variant (case, articles, punctuation), wrong
    # ones, empty ones, and missing ones (v1.1 scores them 0).
    rng = np.random.default_rng(7)
    for name, squad, v2 in (("v1", v1_squad, False), ("v2", v2_squad, True)):
        preds, na = {}, {}
        for art in squad["data"]:
            for par in art["paragraphs"]:
                for qa in par["qas"]:
                    golds = [a["text"] for a in qa["answers"]]
                    k = int(rng.integers(0, 6))
                    if not v2 and k == 5:
                        continue
                    g = golds[-1] if golds else "nothing"
                    preds[qa["id"]] = [g, "The " + g.upper() + "!", g.split()[0], "",
                                       "wrong words here", g + " and more"][k]
                    na[qa["id"]] = float(np.round(rng.random(), 2))
        with open(os.path.join(out_dir, f"metric_preds_{name}.json"), "w") as f:
            json.dump(preds, f)
        if v2:
            with open(os.path.join(out_dir, f"metric_na_{name}.json"), "w") as f:
                json.dump(na, f)
            cases[name] = evaluate_v2(squad, preds)
            cases[name + "_na"] = evaluate_v2(squad, preds, na)
            cases[name + "_na_thresh"] = evaluate_v2(squad, preds, na, 0.5)
        else:
            cases[name] = evaluate_v1(squad, preds)
    with open(os.path.join(out_dir, "metrics.json"), "w") as f:
        json.dump(cases, f, indent=1)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    vocab = os.path.join(out, "vocab.txt")
    write_vocab(vocab)
    tok = BertTokenizerFast(vocab_file=vocab, do_lower_case=True)
    tok.save_pretrained(os.path.join(out, "tokenizer"))
    post_options = {"a": dict(n_best=20, max_len=30, threshold=0.0),
                    "b": dict(n_best=3, max_len=4, threshold=0.5)}
    with open(os.path.join(out, "post_options.json"), "w") as f:
        json.dump(post_options, f)
    squads = {}
    for name, v2 in (("v1", False), ("v2", True)):
        paragraphs = make_examples(v2)
        squad = squad_json(paragraphs, v2)
        squads[name] = squad
        records = hf_records(paragraphs)
        with open(os.path.join(out, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(squad, f, ensure_ascii=False)
        with open(os.path.join(out, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=(name == "v1")) + "\n")
        with open(os.path.join(out, f"{name}_list.json"), "w", encoding="utf-8") as f:
            json.dump({"data": records} if v2 else records, f)
        for train in (True, False):
            feats = features(tok, records, train)
            path = os.path.join(out, f"features_{name}_{'train' if train else 'validation'}.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                for ft in feats:
                    f.write(json.dumps(ft, ensure_ascii=False) + "\n")
        rng = np.random.default_rng(1234 if v2 else 4321)
        start = rng.standard_normal((len(feats), T)).astype(np.float32) * 3
        end = rng.standard_normal((len(feats), T)).astype(np.float32) * 3
        with open(os.path.join(out, f"logits_{name}.f32"), "wb") as f:
            f.write(start.tobytes() + end.tobytes())
        for key, o in post_options.items():
            preds, nbest, odds = postprocess(records, feats, start, end, v2, o["n_best"],
                                             o["max_len"], o["threshold"])
            d = os.path.join(out, f"post_{name}_{key}")
            os.makedirs(d, exist_ok=True)
            for fname, obj in (("predictions.json", preds), ("nbest_predictions.json", nbest),
                               ("null_odds.json", odds)):
                if fname == "null_odds.json" and not v2:
                    continue
                with open(os.path.join(d, fname), "w") as f:
                    f.write(json.dumps(obj, indent=4) + "\n")
    metric_cases(out, squads["v1"], squads["v2"])


# Its functions are also used by tests/reference/qa_export_check.py (runpy).
if __name__ == "__main__":
    main()
