"""Small classification models, tokenizers and data for tests/classify_test.cc and
tests/reference/classify_parity.py, made here by transformers and tokenizers (nothing is
downloaded).

    python make_classify_models.py <out_dir> [--dropout P]

Writes into out_dir:
  wordpiece/   a BERT WordPiece tokenizer (BertTokenizerFast.save_pretrained of a small uncased
               vocabulary covering the data's words)
  bpe/         a byte-level BPE tokenizer.json trained on the data (tokenizers' BpeTrainer),
               with a Llama 3-style template (<s> before each text), <pad> and </s>
  bert/        BertModel (hidden 64, 2 layers, 4 heads, intermediate 128, 64 positions, with its
               pooler): a pretrained body without a classifier, as bert-base-uncased is
  distilbert/  DistilBertModel of the same size
  llama/       LlamaForCausalLM (hidden 64, 2 layers, 4 heads, 2 KV heads), its config's
               pad_token_id the tokenizer's <pad>
  bert3/       BertForSequenceClassification with 3 labels (refused for 2-label data)
  data/        sst2_{train,dev}.csv and sst2_test.csv (no label column), mrpc_{train,dev}.jsonl
               (pairs), stsb_{train,dev}.csv (float labels: a regression), topics_{train,dev}.jsonl
               (a list of labels each: multi-label), sent_{train,dev}.csv (string labels in a
               "category" column), mnli_{train,dev_matched,dev_mismatched}.csv
Every model's dropout is --dropout (default 0.1); the data are seeded: the same files each run.
"""
import argparse
import csv
import json
import os
import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (BertConfig, BertForSequenceClassification, BertModel,
                          BertTokenizerFast, DistilBertConfig, DistilBertModel, LlamaConfig,
                          LlamaForCausalLM, PreTrainedTokenizerFast)

C, L, NH, F, MAXT = 64, 2, 4, 128, 64
GOOD = ["good", "great", "fine", "nice", "happy", "bright", "calm", "warm"]
BAD = ["bad", "poor", "sad", "dull", "cold", "dark", "rude", "weak"]
TOPICS = {"sports": ["ball", "goal", "team", "match"], "music": ["song", "band", "tune", "drum"],
          "food": ["bread", "soup", "cake", "rice"]}
FILLER = ["the", "a", "day", "was", "very", "quite", "movie", "story", "and", "it", "we", "saw",
          "this", "that", "is", "of", "to", "in", "with", "for", "old", "new", "city", "road"]
WORDS = GOOD + BAD + FILLER + [w for ws in TOPICS.values() for w in ws]


def sentence(rng, extra=(), lo=3, hi=14):
    words = [rng.choice(FILLER) for _ in range(rng.randint(lo, hi))] + list(extra)
    rng.shuffle(words)
    return " ".join(words)


def write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def make_data(d, rng):
    os.makedirs(d, exist_ok=True)

    def sst(n):
        rows = []
        for _ in range(n):
            g, b = rng.randint(0, 3), rng.randint(0, 3)
            text = sentence(rng, [rng.choice(GOOD) for _ in range(g)] +
                            [rng.choice(BAD) for _ in range(b)])
            if rng.random() < 0.2:
                text = text.replace(" ", ", ", 1)  # a comma: the CSV field is quoted
            rows.append([text, 1 if g > b else 0])
        return rows
    write_csv(f"{d}/sst2_train.csv", ["sentence", "label"], sst(96))
    write_csv(f"{d}/sst2_dev.csv", ["sentence", "label"], sst(40))
    write_csv(f"{d}/sst2_test.csv", ["sentence"], [[r[0]] for r in sst(24)])

    def pairs(n):
        rows = []
        for i in range(n):
            a = sentence(rng, lo=4, hi=30)
            shared = rng.random() < 0.5
            b = " ".join(a.split()[:4]) + " " + sentence(rng) if shared else sentence(rng)
            rows.append({"sentence1": a, "sentence2": b, "label": int(shared), "idx": i})
        return rows
    write_jsonl(f"{d}/mrpc_train.jsonl", pairs(80))
    write_jsonl(f"{d}/mrpc_dev.jsonl", pairs(32))

    def sts(n):
        rows = []
        for _ in range(n):
            a = sentence(rng)
            k = rng.randint(0, 5)
            b = " ".join(a.split()[:k]) + " " + sentence(rng)
            rows.append([a, b, round(k + rng.random() * 0.5, 3)])
        return rows
    write_csv(f"{d}/stsb_train.csv", ["sentence1", "sentence2", "label"], sts(80))
    write_csv(f"{d}/stsb_dev.csv", ["sentence1", "sentence2", "label"], sts(32))

    def topics(n):
        rows = []
        for _ in range(n):
            on = sorted(t for t in TOPICS if rng.random() < 0.4) or ["food"]
            text = sentence(rng, [rng.choice(TOPICS[t]) for t in on])
            rows.append({"text": text, "label": on})
        return rows
    write_jsonl(f"{d}/topics_train.jsonl", topics(80))
    write_jsonl(f"{d}/topics_dev.jsonl", topics(32))

    def sent(n):
        rows = []
        for _ in range(n):
            g, b = rng.randint(0, 2), rng.randint(0, 2)
            text = sentence(rng, [rng.choice(GOOD) for _ in range(g)] +
                            [rng.choice(BAD) for _ in range(b)])
            rows.append([rng.randint(0, 999), text, "pos" if g > b else "neg" if b > g else "neu"])
        return rows
    write_csv(f"{d}/sent_train.csv", ["id", "text", "category"], sent(90))
    write_csv(f"{d}/sent_dev.csv", ["id", "text", "category"], sent(30))

    def nli(n):
        names = ["entailment", "neutral", "contradiction"]
        rows = []
        for _ in range(n):
            p = sentence(rng)
            k = rng.randint(0, 2)
            h = (" ".join(p.split()[:3]) if k == 0 else sentence(rng) if k == 1
                 else "not " + " ".join(p.split()[:3]))
            rows.append([p, h, names[k]])
        return rows
    for split, n in (("train", 72), ("dev_matched", 24), ("dev_mismatched", 20)):
        write_csv(f"{d}/mnli_{split}.csv", ["premise", "hypothesis", "label"], nli(n))


def make_wordpiece(d):
    os.makedirs(d, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", ".", "not"] + sorted(set(WORDS))
    vocab += ["##s", "##ed", "##ing"] + [c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab = list(dict.fromkeys(vocab))  # "a" is a word and a letter: once
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(os.path.join(d, "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(d)
    return tok


def make_bpe(d, data_dir):
    os.makedirs(d, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    files = [os.path.join(data_dir, f) for f in sorted(os.listdir(data_dir))]
    tok.train(files, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    fast.save_pretrained(d)
    return fast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dropout", type=float, default=0.1)
    a = ap.parse_args()
    p = a.dropout
    rng = random.Random(20261127)
    make_data(os.path.join(a.out, "data"), rng)
    wp = make_wordpiece(os.path.join(a.out, "wordpiece"))
    bpe = make_bpe(os.path.join(a.out, "bpe"), os.path.join(a.out, "data"))
    torch.manual_seed(20261127)
    bert_cfg = dict(vocab_size=len(wp), hidden_size=C, num_hidden_layers=L, num_attention_heads=NH,
                    intermediate_size=F, max_position_embeddings=MAXT, type_vocab_size=2,
                    hidden_dropout_prob=p, attention_probs_dropout_prob=p)
    models_ = {
        "bert": BertModel(BertConfig(**bert_cfg)),
        "distilbert": DistilBertModel(DistilBertConfig(
            vocab_size=len(wp), dim=C, n_layers=L, n_heads=NH, hidden_dim=F,
            max_position_embeddings=MAXT, dropout=p, attention_dropout=p, seq_classif_dropout=p)),
        "bert3": BertForSequenceClassification(BertConfig(num_labels=3, **bert_cfg)),
        "llama": LlamaForCausalLM(LlamaConfig(
            vocab_size=len(bpe), hidden_size=C, intermediate_size=F, num_hidden_layers=L,
            num_attention_heads=NH, num_key_value_heads=2, max_position_embeddings=MAXT,
            pad_token_id=bpe.pad_token_id, bos_token_id=bpe.bos_token_id,
            eos_token_id=bpe.eos_token_id)),
    }
    for name, model in models_.items():
        d = os.path.join(a.out, name)
        model.save_pretrained(d, safe_serialization=True)
        (bpe if name == "llama" else wp).save_pretrained(d)


if __name__ == "__main__":
    main()
