"""Reference GPT-2 token ids for tests/tokenizer_test.cc, from OpenAI's tiktoken (PyPI): the
encoder the C++ one must match id for id.

    python encode_tiktoken.py <gpt2.tiktoken> <in.json> <out.json>

gpt2.tiktoken is GPT-2's ranks file (scripts/install-deps.sh --gpt2-vocab puts it in
third_party/gpt2/); tiktoken calls it r50k_base and pins its SHA-256, which is checked here, so
nothing is fetched. The pre-tokenization pattern is tiktoken's own for GPT-2 (r50k_pat_str).
in.json is an array of strings (documents); out.json gets {"ids": [[...], ...], "unicode": V}
with one array of ids per document (encode_ordinary: "<|endoftext|>" in a document is text) and
the Unicode version of Python's unicodedata (for the failure note; tiktoken's regex engine has
its own tables).
"""
import json
import sys
import unicodedata

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext import openai_public

R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    ranks_path, inp, out = sys.argv[1:]
    enc = tiktoken.Encoding(
        name="gpt2",
        pat_str=openai_public.r50k_pat_str,
        mergeable_ranks=load_tiktoken_bpe(ranks_path, expected_hash=R50K_SHA256),
        special_tokens={"<|endoftext|>": 50256},
        explicit_n_vocab=50257,
    )
    with open(inp, encoding="utf-8") as f:
        docs = json.load(f)
    ids = enc.encode_ordinary_batch(docs, num_threads=1)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"unicode": unicodedata.unidata_version, "tiktoken": tiktoken.__version__,
                   "ids": ids}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
