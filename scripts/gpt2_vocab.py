#!/usr/bin/env python3
"""GPT-2's byte-level BPE vocabulary from a tiktoken ranks file, as encoder.json + vocab.bpe.

    python3 scripts/gpt2_vocab.py GPT2_TIKTOKEN OUT_DIR

GPT2_TIKTOKEN is `whisper/assets/gpt2.tiktoken` from the PyPI source distribution of
openai-whisper (scripts/install-deps.sh --gpt2-vocab downloads it with pip and checks its
SHA-256): one line per token, "<base64 of the token's bytes> <rank>", ranks 0..50255. For GPT-2 the
rank is the token id (the single bytes first, in the order of GPT-2's bytes_to_unicode table, then
one token per merge in merge order), and <|endoftext|> is id 50256.

Writes OUT_DIR/encoder.json ({"<spelling>": id}, tokens spelled with bytes_to_unicode's
characters, as OpenAI's encoder.json and Hugging Face's vocab.json) and OUT_DIR/vocab.bpe
("#version: 0.2", then one merge "left right" per line in rank order, as vocab.bpe and
merges.txt). Each merge is recovered from the ranks: the token of rank r is what byte-pair
merging of its own bytes, allowed only ranks below r, ends with as two parts. The script checks
that this gives a merge for every token, in a vocabulary of exactly 50257 ids, and writes
atomically (a temporary name, then rename). Python's standard library only.
"""
import base64
import json
import os
import sys

N_RANKS = 50256  # ids 0..50255 are BPE tokens, 50256 is <|endoftext|>
EOT = "<|endoftext|>"


def bytes_to_unicode():
    """GPT-2's printable spelling of each byte (encoder.py's table)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def fail(msg):
    print(f"gpt2_vocab: {msg}", file=sys.stderr)
    sys.exit(2)


def read_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2:
                fail(f"{path} line {lineno}: expected '<base64> <rank>' (a tiktoken ranks file)")
            try:
                token, rank = base64.b64decode(fields[0], validate=True), int(fields[1])
            except ValueError:
                fail(f"{path} line {lineno}: bad base64 or rank")
            if token in ranks:
                fail(f"{path} line {lineno}: token repeated")
            ranks[token] = rank
    if sorted(ranks.values()) != list(range(N_RANKS)):
        fail(f"{path}: ranks are not exactly 0..{N_RANKS - 1} (is this GPT-2's gpt2.tiktoken?)")
    return ranks


def merge_parts(ranks, token, max_rank):
    """Byte-pair merging of `token`'s bytes using only ranks < max_rank (tiktoken's rule: merge
    the adjacent pair whose concatenation has the lowest rank, until none is allowed)."""
    parts = [bytes([b]) for b in token]
    while True:
        best, best_rank = None, max_rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best, best_rank = i, r
        if best is None:
            return parts
        parts[best:best + 2] = [parts[best] + parts[best + 1]]


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, out = sys.argv[1], sys.argv[2]
    ranks = read_ranks(src)
    spell = bytes_to_unicode()
    by_rank = sorted(ranks, key=ranks.get)
    for b in range(256):  # single bytes first, in bytes_to_unicode's order
        if len(by_rank[b]) != 1:
            fail(f"{src}: rank {b} is not a single byte")
    if [t[0] for t in by_rank[:256]] != list(spell):
        fail(f"{src}: the single bytes are not in GPT-2's bytes_to_unicode order")
    merges = []
    for r in range(256, N_RANKS):
        parts = merge_parts(ranks, by_rank[r], r)
        if len(parts) != 2:
            fail(f"{src}: rank {r} is not one merge of two lower-ranked tokens")
        merges.append(parts)

    def text(token):
        return "".join(spell[b] for b in token)

    encoder = {text(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])}
    encoder[EOT] = N_RANKS
    if len(encoder) != N_RANKS + 1:
        fail(f"{src}: two tokens share a spelling")
    os.makedirs(out, exist_ok=True)
    for name, body in (("encoder.json", json.dumps(encoder, ensure_ascii=False)),
                       ("vocab.bpe", "#version: 0.2\n" +
                        "".join(f"{text(a)} {text(b)}\n" for a, b in merges))):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(body)
        os.replace(tmp, os.path.join(out, name))
    print(f"gpt2_vocab: wrote {out}/encoder.json ({len(encoder)} tokens) and "
          f"{out}/vocab.bpe ({len(merges)} merges)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
