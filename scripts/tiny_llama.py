#!/usr/bin/env python3
"""A small random-init Llama (or Qwen3), as a Hugging Face directory, for docs/fine-tuning.md.

    scripts/peers-env.sh --install          # once: PyPI's torch, transformers, tokenizers
    $(scripts/peers-env.sh) scripts/tiny_llama.py OUT_DIR CORPUS.txt [--layers 4 --hidden 128]
    $(scripts/peers-env.sh) scripts/tiny_llama.py --family qwen3 OUT_DIR CORPUS.txt

--family qwen3 makes a Qwen3ForCausalLM instead (its head_dim 64, twice hidden / heads; q/k
norms; the head tied) with Qwen's tokenizer pipeline (NFC, Split on Qwen2's regex + ByteLevel,
<|endoftext|> <|im_start|> <|im_end|>, nothing added around a text, <|endoftext|> as eos:
tests/data/make_hf_tokenizers.py's qwen2).

Nothing is downloaded. OUT_DIR gets what a hub Llama 3 directory holds, made here:
  tokenizer.json + tokenizer_config.json  a byte-level BPE trained on CORPUS with the `tokenizers`
      library, set up as Llama 3 ships it (Split on Llama 3's regex + ByteLevel, ignore_merges,
      <|begin_of_text|> added before each text, <|end_of_text|> as eos; the pipeline of
      tests/data/make_hf_tokenizers.py's llama3, without its test-only extras)
  config.json + model.safetensors  LlamaForCausalLM(LlamaConfig(...)) with transformers' own
      random init (seeded), grouped-query attention, the head tied to the embedding, vocabulary =
      the tokenizer's, saved with save_pretrained(safe_serialization=True)
Prints one line saying what it wrote.
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:
    import torch
    from tokenizers import Regex, pre_tokenizers, processors
    from tokenizers import normalizers
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
    from make_hf_tokenizers import CHAT_SPECIALS, LLAMA3, LLAMA3_SPECIALS, QWEN2, train_byte_level
except ImportError as e:
    sys.exit(f"tiny_llama.py: {sys.executable} cannot import {e.name or e}: run it with the "
             f"peers' Python: $(scripts/peers-env.sh) scripts/tiny_llama.py ... "
             f"(install it with: bash scripts/peers-env.sh --install)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("corpus", help="UTF-8 text the tokenizer is trained on (one document a line)")
    ap.add_argument("--vocab", type=int, default=4096, help="tokenizer vocabulary")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=352)
    ap.add_argument("--max-positions", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--family", choices=["llama", "qwen3"], default="llama")
    a = ap.parse_args()

    with open(a.corpus, encoding="utf-8") as f:
        docs = [line for line in f.read().split("\n") if line.strip()]
    if a.family == "qwen3":
        return qwen3(a, docs)
    tok = train_byte_level(docs, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]),
        LLAMA3_SPECIALS, a.vocab)
    bos, eos = LLAMA3_SPECIALS[0], LLAMA3_SPECIALS[1]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                      special_tokens=[(bos, tok.token_to_id(bos))])])
    save_tokenizer(a, tok, {"bos_token": bos, "eos_token": eos, "add_bos_token": True,
                            "add_eos_token": False})
    torch.manual_seed(a.seed)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=a.hidden,
                         intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                         num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                         max_position_embeddings=a.max_positions, rms_norm_eps=1e-5,
                         rope_theta=10000.0, tie_word_embeddings=True,
                         bos_token_id=tok.token_to_id(bos), eos_token_id=tok.token_to_id(eos),
                         torch_dtype="float32")
    return save_model(a, LlamaForCausalLM(config), tok, docs, "")


def save_tokenizer(a, tok, config: dict) -> None:
    """tokenizer.json, and tokenizer_config.json holding `config` and the model's length."""
    import json
    os.makedirs(a.out_dir, exist_ok=True)
    tok.save(os.path.join(a.out_dir, "tokenizer.json"))
    with open(os.path.join(a.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(dict(config, model_max_length=a.max_positions,
                       tokenizer_class="PreTrainedTokenizerFast"), f, indent=2)


def save_model(a, model, tok, docs, extra: str) -> int:
    """save_pretrained, and the line saying what was written."""
    model.save_pretrained(a.out_dir, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.out_dir}: {type(model).__name__}, {params:,} parameters (L={a.layers} "
          f"C={a.hidden} NH={a.heads} NKV={a.kv_heads}{extra} F={a.intermediate} "
          f"V={tok.get_vocab_size()}), tokenizer.json trained on {len(docs):,} lines")
    return 0


def qwen3(a, docs) -> int:
    tok = train_byte_level(docs, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]),
        CHAT_SPECIALS, a.vocab)
    tok.normalizer = normalizers.NFC()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    eos = CHAT_SPECIALS[0]
    save_tokenizer(a, tok, {"bos_token": None, "eos_token": eos, "pad_token": eos})
    torch.manual_seed(a.seed)
    head_dim = 2 * a.hidden // a.heads
    config = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=a.hidden,
                         intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                         num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                         head_dim=head_dim, max_position_embeddings=a.max_positions,
                         rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                         eos_token_id=tok.token_to_id(eos), torch_dtype="float32")
    return save_model(a, Qwen3ForCausalLM(config), tok, docs, f" head_dim={head_dim}")


if __name__ == "__main__":
    sys.exit(main())
