"""BERT WordPiece tokenizers and their reference ids and offsets for tests/wordpiece_test.cc.

    python make_wordpiece.py <out_dir> <docs.json> <ref.json>

Writes a vocab.txt made here from the documents of docs.json (a JSON array of strings; nothing
is downloaded) and saves it with transformers' BertTokenizerFast (save_pretrained: vocab.txt,
tokenizer.json, tokenizer_config.json) as

  uncased         do_lower_case True (strip_accents null: accents go with lower case)
  cased           do_lower_case False
  lower_accents   do_lower_case True, strip_accents False (İ becomes i + U+0307)
  vocab_only      the vocab.txt alone (read as BertTokenizerFast reads it: uncased)
  json_only       cased's tokenizer.json alone (the `tokenizers` library's reading: no config)

The vocabulary holds the five special tokens, every character the documents have (normalized
either way) as a word start and as a "##" continuation except one in seven (so words holding one
are [UNK]), the first two characters of every word, "##" pairs of every other word's characters
and a fifth of the words whole: most words split into several pieces.

ref.json gets {"versions": {...}, "tokenizers": {name: {"plain": [[ids]...], "offsets":
[[[begin, end]...]...], "special": [[ids]...], "decoded": [text...]}}}: for each document,
BertTokenizerFast.from_pretrained(dir)(doc, add_special_tokens=False / True,
return_offsets_mapping=True) (json_only: tokenizers.Tokenizer.from_file), offsets in characters
as the libraries give them, and the `tokenizers` decode of the plain ids (skip_special_tokens
False).
"""
import json
import os
import shutil
import sys
import zlib

import tokenizers
import transformers
from tokenizers import normalizers, pre_tokenizers

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def words_of(docs):
    pre = pre_tokenizers.BertPreTokenizer()
    out = []
    for lower, strip in [(True, None), (False, False), (True, False)]:
        norm = normalizers.BertNormalizer(lowercase=lower, strip_accents=strip)
        for doc in docs:
            out.extend(w for w, _ in pre.pre_tokenize_str(norm.normalize_str(doc)))
    return out


def make_vocab(docs):
    vocab = list(SPECIALS)
    seen = set(vocab)

    def add(token):
        if token not in seen:
            seen.add(token)
            vocab.append(token)

    words = words_of(docs)
    chars = sorted({c for w in words for c in w})
    for c in chars:
        if ord(c) % 7 != 3:
            add(c)
            add("##" + c)
    for w in words:
        h = zlib.crc32(w.encode("utf-8"))
        if len(w) > 3:
            add(w[:2])
        if h % 2 == 0:
            for i in range(1, len(w) - 1, 2):
                add("##" + w[i:i + 2])
        if h % 5 == 0 and len(w) < 40:
            add(w)
    return vocab


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, docs_path, ref_path = sys.argv[1:]
    with open(docs_path, encoding="utf-8") as f:
        docs = json.load(f)
    vocab_path = os.path.join(out_dir, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in make_vocab(docs)))
    variants = {"uncased": dict(do_lower_case=True),
                "cased": dict(do_lower_case=False),
                "lower_accents": dict(do_lower_case=True, strip_accents=False)}
    for name, kwargs in variants.items():
        transformers.BertTokenizerFast(vocab_file=vocab_path, **kwargs).save_pretrained(
            os.path.join(out_dir, name))
    os.makedirs(os.path.join(out_dir, "vocab_only"), exist_ok=True)
    shutil.copy(vocab_path, os.path.join(out_dir, "vocab_only", "vocab.txt"))
    os.makedirs(os.path.join(out_dir, "json_only"), exist_ok=True)
    shutil.copy(os.path.join(out_dir, "cased", "tokenizer.json"),
                os.path.join(out_dir, "json_only", "tokenizer.json"))

    result = {"versions": {"tokenizers": tokenizers.__version__,
                           "transformers": transformers.__version__}, "tokenizers": {}}
    lib = tokenizers.Tokenizer.from_file(os.path.join(out_dir, "json_only", "tokenizer.json"))
    for name in list(variants) + ["vocab_only", "json_only"]:
        d = os.path.join(out_dir, name)
        if name == "json_only":
            plain = lib.encode_batch(docs, add_special_tokens=False)
            ids = [e.ids for e in plain]
            offsets = [e.offsets for e in plain]
            special = [e.ids for e in lib.encode_batch(docs, add_special_tokens=True)]
            decoded = lib.decode_batch(ids, skip_special_tokens=False)
        else:
            fast = transformers.BertTokenizerFast.from_pretrained(d)
            enc = fast(docs, add_special_tokens=False, return_offsets_mapping=True)
            ids, offsets = enc["input_ids"], enc["offset_mapping"]
            special = fast(docs, add_special_tokens=True)["input_ids"]
            decoded = fast.backend_tokenizer.decode_batch(ids, skip_special_tokens=False)
        result["tokenizers"][name] = {"dir": d, "plain": ids,
                                      "offsets": [[list(o) for o in doc] for doc in offsets],
                                      "special": special, "decoded": decoded}
    with open(ref_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
