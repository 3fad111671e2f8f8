"""Hugging Face tokenizer.json files and their reference ids for tests/tokenizer_hf_test.cc.

    python make_hf_tokenizers.py <out_dir> <gpt2_dir> <docs.json> <ids.json>

Trains small BPE models with the `tokenizers` library (PyPI, the peers' environment) on the
documents of docs.json (a JSON array of strings) and writes one directory per pipeline under
out_dir, each holding a tokenizer.json set up as the named model family ships it (the
structure of the real files; the vocabularies are small and made here, nothing is downloaded):

  llama3          Split(Llama 3's regex, Isolated) + ByteLevel(no prefix space, no regex);
                  ignore_merges; post-processor ByteLevel + TemplateProcessing("<|begin_of_text|>
                  $A"); a few whole words in the vocabulary with no merges that make them, so
                  ignore_merges decides their ids; <mask> (lstrip) and <|r|> (rstrip)
  qwen2           normalizer NFC; Split(Qwen2's regex) + ByteLevel; post-processor ByteLevel;
                  merges written as [a, b] pairs (the newer tokenizer.json form)
  smollm2         Digits(individual_digits) + ByteLevel(use_regex); merges written as "a b"
                  strings (the older form); tokenizer_config.json names <|endoftext|> as bos
                  and eos
  gpt2            GPT-2's own vocabulary (gpt2_dir's encoder.json + vocab.bpe) as tokenizer.json
  gpt2_prefix     the same with ByteLevel(add_prefix_space=True)
  llama2          SentencePiece-style BPE as Llama 2 / TinyLlama: normalizer Prepend("▁") +
                  Replace(" ", "▁"), no pre-tokenizer, byte_fallback with <0x00>..<0xFF>,
                  unk <unk>, fuse_unk; decoder Replace + ByteFallback + Fuse + Strip;
                  TemplateProcessing("<s> $A"); an alphabet limited to 120 characters, so rarer
                  ones fall back to bytes
  llama2_eos      llama2 with tokenizer_config.json add_bos_token + add_eos_token (reference:
                  transformers' LlamaTokenizerFast, which rebuilds the template from them)
  llama2_cross    llama2 with a token across a word start ("e▁t", merged first), which keeps
                  the encoder from splitting the text into words
  metaspace       llama2's model with the Metaspace pre-tokenizer form (prepend_scheme first,
                  split false) and a Metaspace decoder, as newer Mistral conversions
  metaspace_split Metaspace(prepend_scheme always, split true), no unk (unknown characters
                  without byte tokens are dropped, as HF does)
  big             smollm2's pipeline with 70,000 filler tokens before its vocabulary, so ids
                  exceed 65,535; tokenizer_config.json adds bos <|im_start|> and eos <|im_end|>
  qwen3           qwen2's pipeline with Qwen3's added tokens: <|im_start|>, <|im_end|> (special)
                  and <think>, </think>, <tool_call> (not special, so decoded as text)
  gemma3          Gemma's SentencePiece-style BPE (transformers' GemmaConverter): normalizer
                  Replace(" ", "▁") and no pre-tokenizer (no prefix space), byte_fallback with
                  <0x00>..<0xFF>, <pad> <eos> <bos> <unk> as ids 0-3, runs of "▁" as tokens (so
                  merges cross word starts), <start_of_turn> / <end_of_turn>; decoder Replace +
                  ByteFallback + Fuse; TemplateProcessing("<bos> $A")
  phi3            Phi-3's: Llama 2's pipeline with its added tokens after the vocabulary
                  (<|endoftext|>, and <|assistant|>, <|user|>, <|end|> ... with rstrip), and
                  tokenizer_config.json add_bos_token false (its "special" ids from
                  LlamaTokenizerFast, which then adds nothing)

ids.json gets {"versions": {...}, "tokenizers": {name: {"plain": [[ids]...], "special":
[[ids]...], "decoded": [text...]}}}: encode(doc, add_special_tokens=False / True) for every
document and decode(plain ids, skip_special_tokens=False). Where tokenizer_config.json sets
add_bos_token or add_eos_token, "special" comes from transformers' LlamaTokenizerFast, which
rebuilds the post-processor's template from them.
"""
import json
import os
import sys

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
CHAT_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SP_SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = ["<0x%02X>" % b for b in range(256)]


def byte_chars():
    """The character that spells each byte in byte-level vocabularies (GPT-2's table): printable
    Latin-1 bytes are themselves, the other 68 are U+0100.. in byte order."""
    chars, extra = [], 0
    for b in range(256):
        if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE:
            chars.append(chr(b))
        else:
            chars.append(chr(0x100 + extra))
            extra += 1
    return chars


BYTE_CHARS = byte_chars()


def train_byte_level(docs, pre, specials, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(docs, trainer)
    return tok


def save(tok_or_json, out_dir, name, config=None):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    if isinstance(tok_or_json, dict):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tok_or_json, f, ensure_ascii=False)
    else:
        tok_or_json.save(path)
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
    return d


def make_all(out_dir, gpt2_dir, docs):
    dirs = {}
    # Llama 3.
    tok = train_byte_level(docs, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]),
        LLAMA3_SPECIALS, 1200)
    # Added tokens that take the whitespace beside them (RoBERTa's <mask> is lstrip).
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True),
                            AddedToken("<|r|>", rstrip=True, special=True)])
    bot = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bot)])])
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    vocab = j["model"]["vocab"]
    for word in [" Punctuation", " contractions", " case", "Mixed", " Привет"]:
        spelled = "".join(BYTE_CHARS[b] for b in word.encode("utf-8"))
        if spelled not in vocab:
            vocab[spelled] = 1 + max(vocab.values())
    # Added tokens outside the vocabulary come after it (HF gives them those ids on load).
    next_id = 1 + max(vocab.values())
    for a in j["added_tokens"]:
        if a["content"] not in vocab:
            a["id"] = next_id
            next_id += 1
    dirs["llama3"] = save(j, out_dir, "llama3")

    # Qwen2, merges as pairs.
    tok = train_byte_level(docs, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]),
        CHAT_SPECIALS, 1000)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.normalizer = normalizers.NFC()
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m
                            for m in j["model"]["merges"]]
    dirs["qwen2"] = save(j, out_dir, "qwen2")

    # SmolLM2.
    smol = train_byte_level(docs, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
        CHAT_SPECIALS, 900)
    smol.post_processor = processors.ByteLevel(trim_offsets=False)
    j = json.loads(smol.to_str())
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                            for m in j["model"]["merges"]]
    dirs["smollm2"] = save(j, out_dir, "smollm2",
                           {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})

    # Over 65,536 ids: fillers first, smollm2's tokens after them.
    j = json.loads(smol.to_str())
    shift = 70000
    vocab = {f"<filler_{i}>": i for i in range(shift)}
    vocab.update({k: v + shift for k, v in j["model"]["vocab"].items()})
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] += shift
    dirs["big"] = save(j, out_dir, "big", {
        "add_bos_token": True, "add_eos_token": True,
        "bos_token": {"__type": "AddedToken", "content": "<|im_start|>", "lstrip": False,
                      "normalized": False, "rstrip": False, "single_word": False, "special": True},
        "eos_token": "<|im_end|>", "unk_token": None, "tokenizer_class": "LlamaTokenizer"})

    # GPT-2's vocabulary.
    gpt2 = Tokenizer(models.BPE.from_file(os.path.join(gpt2_dir, "encoder.json"),
                                          os.path.join(gpt2_dir, "vocab.bpe")))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    gpt2.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    dirs["gpt2"] = save(gpt2, out_dir, "gpt2")
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    dirs["gpt2_prefix"] = save(gpt2, out_dir, "gpt2_prefix")

    # Llama 2: trained on Metaspace words (as SentencePiece trains within words), then set up
    # as Llama 2's tokenizer.json has it.
    sp = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    sp.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=1100, special_tokens=SP_SPECIALS + BYTE_TOKENS,
                                  limit_alphabet=120, show_progress=False)
    sp.train_from_iterator(docs, trainer)
    base = json.loads(sp.to_str())
    # The byte tokens are vocabulary entries, not added tokens (as in Llama 2's file).
    base["added_tokens"] = [a for a in base["added_tokens"] if a["content"] in SP_SPECIALS]
    sp_ids = {t: base["model"]["vocab"][t] for t in SP_SPECIALS}
    j = json.loads(json.dumps(base))
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [sp_ids["<s>"]], "tokens": ["<s>"]}}}
    dirs["llama2"] = save(j, out_dir, "llama2")
    dirs["llama2_eos"] = save(j, out_dir, "llama2_eos", {
        "add_bos_token": True, "add_eos_token": True, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer", "legacy": True})

    # A token across a word start ("e▁t", merged first): words can no longer be encoded apart.
    j = json.loads(json.dumps(j))
    j["model"]["vocab"]["e▁t"] = 1 + max(j["model"]["vocab"].values())
    j["model"]["merges"].insert(0, ["e", "▁t"])
    dirs["llama2_cross"] = save(j, out_dir, "llama2_cross")

    j = json.loads(json.dumps(base))
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    j["post_processor"] = None
    dirs["metaspace"] = save(j, out_dir, "metaspace")

    j = json.loads(json.dumps(base))
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                          "split": True}
    j["model"]["unk_token"] = None
    j["model"]["byte_fallback"] = False
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {t: {"id": t, "ids": [sp_ids[t]], "tokens": [t]} for t in ["<s>", "</s>"]}}
    dirs["metaspace_split"] = save(j, out_dir, "metaspace_split")

    # Qwen3: Qwen2's pipeline; its think and tool tokens are added but not special.
    j = json.loads(open(os.path.join(dirs["qwen2"], "tokenizer.json"), encoding="utf-8").read())
    next_id = 1 + max(max(j["model"]["vocab"].values()), max(a["id"] for a in j["added_tokens"]))
    for content in ["<think>", "</think>", "<tool_call>"]:
        j["added_tokens"].append({"id": next_id, "content": content, "single_word": False,
                                  "lstrip": False, "rstrip": False, "normalized": False,
                                  "special": False})
        next_id += 1
    dirs["qwen3"] = save(j, out_dir, "qwen3")

    dirs["gemma3"] = save(gemma3(docs), out_dir, "gemma3")

    # Phi-3: Llama 2's file with Phi-3's added tokens after the vocabulary; its
    # tokenizer_config.json turns the template's <s> off.
    j = json.loads(json.dumps(dirs_json(dirs["llama2"])))
    next_id = 1 + max(j["model"]["vocab"].values())
    for content, rstrip in [("<|endoftext|>", False), ("<|assistant|>", True),
                            ("<|system|>", True), ("<|end|>", True), ("<|user|>", True)]:
        j["added_tokens"].append({"id": next_id, "content": content, "single_word": False,
                                  "lstrip": False, "rstrip": rstrip, "normalized": False,
                                  "special": True})
        next_id += 1
    dirs["phi3"] = save(j, out_dir, "phi3", {
        "add_bos_token": False, "add_eos_token": False, "bos_token": "<s>",
        "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": "<unk>",
        "tokenizer_class": "LlamaTokenizer", "legacy": False})
    return dirs


def dirs_json(d):
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        return json.load(f)


def gemma3(docs):
    """Gemma's tokenizer.json as transformers' GemmaConverter writes it, over a vocabulary
    trained here: SentencePiece-style BPE within words, then runs of "▁" merged as tokens (Gemma's
    vocabulary has them), no prefix space."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    sp = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    sp.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=1100, special_tokens=specials + BYTE_TOKENS,
                                  limit_alphabet=120, show_progress=False)
    sp.train_from_iterator(docs, trainer)
    j = json.loads(sp.to_str())
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in specials]
    vocab = j["model"]["vocab"]
    for run in ["▁▁", "▁▁▁▁"]:  # merged from the two halves, first of all merges
        vocab[run] = 1 + max(vocab.values())
        j["model"]["merges"].insert(0, [run[:len(run) // 2], run[len(run) // 2:]])
    if "▁" not in vocab:
        vocab["▁"] = 1 + max(vocab.values())
    next_id = 1 + max(vocab.values())
    for content in ["<start_of_turn>", "<end_of_turn>"]:
        j["added_tokens"].append({"id": next_id, "content": content, "single_word": False,
                                  "lstrip": False, "rstrip": False, "normalized": False,
                                  "special": True})
        next_id += 1
    j["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    bos = vocab["<bos>"]
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<bos>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<bos>": {"id": "<bos>", "ids": [bos], "tokens": ["<bos>"]}}}
    return j


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, gpt2_dir, docs_path, ids_path = sys.argv[1:]
    with open(docs_path, encoding="utf-8") as f:
        docs = json.load(f)
    dirs = make_all(out_dir, gpt2_dir, docs)
    result = {"versions": {"tokenizers": tokenizers.__version__}, "tokenizers": {}}
    for name, d in dirs.items():
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        plain = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
        config_path = os.path.join(d, "tokenizer_config.json")
        config = json.load(open(config_path)) if os.path.exists(config_path) else {}
        if "add_bos_token" in config or "add_eos_token" in config:
            # transformers' LlamaTokenizerFast rebuilds the template from these flags.
            import transformers
            fast = transformers.LlamaTokenizerFast.from_pretrained(d)
            special = [fast(doc, add_special_tokens=True)["input_ids"] for doc in docs]
            result["versions"]["transformers"] = transformers.__version__
        else:
            special = [e.ids for e in tok.encode_batch(docs, add_special_tokens=True)]
        decoded = tok.decode_batch(plain, skip_special_tokens=False)
        result["tokenizers"][name] = {"dir": d, "plain": plain, "special": special,
                                      "decoded": decoded}
    with open(ids_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
