#!/usr/bin/env python3
"""A tiny BERT and a small SQuAD-format task, made locally, for docs/question-answering.md's
walk-through (nothing is downloaded; run with the peers' environment: scripts/peers-env.sh).

Usage: tiny_bert.py OUT_DIR [--layers 2] [--hidden 128]
Writes:
  OUT_DIR/bert/        BertForPreTraining (random init) + BertTokenizerFast (uncased WordPiece
                       vocab.txt built from the data's words): a "pretrained" checkpoint whose
                       pretraining heads qa train drops and whose qa head it initializes, as
                       with bert-base-uncased
  OUT_DIR/train.json   SQuAD v1.1 JSON: templated paragraphs about made-up places, 3 questions
                       each (answers: a name, a year, a number), distractor sentences so that
                       contexts run past one 128-token window
  OUT_DIR/dev.json     the same templates over other names and values
"""
import argparse
import json
import os
import random

from transformers import BertConfig, BertForPreTraining, BertTokenizerFast

SYLLABLES = "ka lo mi ra te su vo ne pa ri zu ma".split()
FILLER = ["the weather there is often mild in spring .",
          "many visitors come to see the old market .",
          "a small museum shows maps and coins .",
          "the local school teaches music and science .",
          "people say the bread there is very good ."]


def name(rng, n=2):
    return "".join(rng.choice(SYLLABLES) for _ in range(n))


def paragraph(rng, idx):
    town, river, founder = name(rng, 3), name(rng, 2), name(rng, 2)
    year, people = str(rng.randint(1100, 1999)), str(rng.randint(2, 90) * 1000)
    facts = [f"{town} is a town on the {river} river .",
             f"it was founded by {founder} in {year} .",
             f"today about {people} people live in {town} ."]
    body = facts[:]
    for _ in range(rng.randint(2, 8)):
        body.insert(rng.randint(0, len(body)), rng.choice(FILLER))
    context = " ".join(body)
    qas = []
    for q, a in [(f"who founded {town} ?", founder), (f"when was {town} founded ?", year),
                 (f"how many people live in {town} ?", people)]:
        # the answer's occurrence inside its fact sentence
        start = context.index(a, context.index(town if a != founder else "founded by"))
        qas.append({"id": f"{idx}-{len(qas)}", "question": q,
                    "answers": [{"text": a, "answer_start": start}]})
    return {"context": context, "qas": qas}


def squad(rng, n, first):
    return {"version": "1.1", "data": [{"title": "towns", "paragraphs":
                                        [paragraph(rng, first + i) for i in range(n)]}]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--train", type=int, default=1200, help="paragraphs (3 questions each)")
    ap.add_argument("--dev", type=int, default=100)
    a = ap.parse_args()
    rng = random.Random(1234)
    train, dev = squad(rng, a.train, 0), squad(rng, a.dev, a.train)
    os.makedirs(a.out, exist_ok=True)
    for nm, d in (("train.json", train), ("dev.json", dev)):
        with open(os.path.join(a.out, nm), "w") as f:
            json.dump(d, f)
    # WordPiece vocabulary: specials, the template words, the syllables (as words and ## pieces),
    # digits (as words and ## pieces) and punctuation.
    words = set(" ".join(FILLER + ["is a town on the river it was founded by in today about "
                                   "people live who when how many ? ."]).split())
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words)
    vocab += SYLLABLES + ["##" + s for s in SYLLABLES] + list("0123456789")
    vocab += ["##" + d for d in "0123456789"]
    bert = os.path.join(a.out, "bert")
    os.makedirs(bert, exist_ok=True)
    with open(os.path.join(bert, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(os.path.join(bert, "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(bert)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=a.hidden, num_hidden_layers=a.layers,
                     num_attention_heads=4, intermediate_size=4 * a.hidden,
                     max_position_embeddings=256)
    BertForPreTraining(cfg).save_pretrained(bert, safe_serialization=True)
    print(f"{bert}: BertForPreTraining L={a.layers} C={a.hidden} V={len(vocab)}; "
          f"{a.train * 3} train and {a.dev * 3} dev questions in {a.out}")


if __name__ == "__main__":
    main()
