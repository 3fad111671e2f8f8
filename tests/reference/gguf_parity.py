#!/usr/bin/env python3
"""`cputrain-numa export --format gguf` against llama.cpp itself (CTest, tests/reference).

Run with the peers' environment (scripts/peers-env.sh: torch, transformers, peft) and llama.cpp's
(scripts/llama-cpp-env.sh: llama-cpp-python built from its PyPI source distribution, whose
vendored llama.cpp sources also give convert_hf_to_gguf.py and gguf-py, the `gguf` package).
Nothing is downloaded: every model and tokenizer is made here, random-init, by transformers and
the `tokenizers` library (tests/data/make_hf_tokenizers.py's pipelines).

Per mode, for a model transformers saved (HF_DIR, its tokenizer beside it):
  1. convert  our `export --format gguf --outtype T` of HF_DIR, and llama.cpp's own
              convert_hf_to_gguf.py of our `export --format hf` of it (the tokenizer files
              copied in), both read back with gguf-py's GGUFReader: the same tensors (names,
              shapes, ggml types, bytes: F32, F16, BF16 and Q8_0 bit for bit; rope_freqs within
              1e-6, LLAMA3_FACTORS_TOL says why) and the same keys with the same values, except
              the ones KEY_DIFFERENCES lists (naming keys convert derives from the directory's
              name, and where we deliberately write more or better: docs/gguf.md). T = f32, f16,
              bf16, q8_0 (GPT-2: f32, q8_0; Case.outtypes says why).
  2. logits   llama.cpp (llama-cpp-python, one thread) loads our F32 file and its logits for
              (T = 24) token ids equal the engine's (engine_logits, from HF_DIR) within 1e-4
              (rel_diff, transformers_parity.py), and the other types' files load.
  3. greedy   the prompt's ids from llama.cpp's tokenizer equal the engine's (`cputrain-numa
              tokenize --special`); llama.cpp's greedy continuation (argmax, 12 tokens) equals the
              engine's (argmax of engine_logits over the growing sequence), and its text equals
              `cputrain-numa generate --temperature 0` on the same prompt.

Modes: gpt2 (GPT-2's own vocabulary, so convert's pre-tokenizer hash knows it: "gpt-2"),
llama-spm (GQA, untied, attention biases, an intermediate size of 80: Q8_0 falls back to F16 on
ffn_down; a SentencePiece-style tokenizer with a chat template), llama-bpe-lora (MQA, tied,
Llama 3 rope scaling: rope_freqs; a Llama 3-style byte-level tokenizer; a PEFT adapter merged:
`export --adapter --merge`, against convert of `export --format hf --adapter --merge`), and
tokenizers (llama.cpp's tokenization of the corpus under each pipeline we export — GPT-2's
regex, Llama 3's, Qwen2's and Qwen3's (its added tokens), SmolLM2's digits, SentencePiece with
Prepend or Metaspace, Gemma 3's (no prefix space, runs of "▁"), Phi-3's (added tokens after the
vocabulary) — equals ours and transformers', line by line, special tokens in the text included;
Qwen2's and Qwen3's on the corpus in NFC, as llama.cpp does not apply their NFC normalizer:
docs/gguf.md); and a mode per family
of issue 34 under llama.cpp's architecture for it — qwen2, qwen3, mistral (llama.cpp's "llama"),
gemma3 (its logits against transformers with ggml's fp16 GELU: check_logits), phi3 — F32 and
Q8_0.

convert_hf_to_gguf.py names a byte-level pre-tokenizer by hashing a real model's tokenization of
a fixed text; a vocabulary made here has no known hash, so for llama-bpe-lora the test tells
convert the name (llama-bpe) and proves the name right through llama.cpp's tokenization instead.

Exit 0 when every check holds, 1 otherwise (and when an environment is missing: the message
names the fix).
"""
import os
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
import transformers_parity as tp  # noqa: E402  (torch, transformers; one thread; no hub)


def _llama_cpp_site() -> str:
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "llama-cpp-env.sh")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: llama.cpp's environment is missing: {r.stderr.strip()}")
    return r.stdout.strip()


SITE = _llama_cpp_site()
CONVERT_DIR = os.path.join(os.path.dirname(SITE), "llama.cpp")
sys.path.insert(0, SITE)
sys.path.insert(0, CONVERT_DIR)
sys.path.insert(0, os.path.join(CONVERT_DIR, "gguf-py"))

import argparse  # noqa: E402
import ctypes  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import unicodedata  # noqa: E402
from typing import Dict, List, Optional  # noqa: E402

import gguf  # noqa: E402
import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, Gemma3ForCausalLM,  # noqa: E402
                          Gemma3TextConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, Phi3Config,
                          Phi3ForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

LOGITS_TOL = 1e-4  # llama.cpp's F32 logits against the engine's (the bound)
# llama.cpp's logits against transformers running ggml's fp16 GELU table (ggml_gelu below), for
# a MLP whose GELU llama.cpp computes so (Gemma's GeGLU): the table's inputs are rounded to fp16,
# and an input a few ulps from a rounding boundary in one computation rounds the other way in
# the other, one fp16 ulp of that GELU apart (measured: 2.7e-4 on the gemma3 mode; 1.7e-3
# between llama.cpp's and the engine's or transformers' exact GELU).
GGML_GELU_TOL = 1e-3
# rope_freqs.weight: convert computes Llama 3's factors with torch's fp32 pow, we with libm's;
# the last bit may differ.
LLAMA3_FACTORS_TOL = 1e-6
OUTTYPES = ("f32", "f16", "bf16", "q8_0")
GREEDY_TOKENS = 12
PROMPT = "The quick brown fox, 42 times:"
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")

# Keys convert writes that ours may lack or hold otherwise, and why (docs/gguf.md).
KEY_DIFFERENCES = {
    "general.name": "convert names the model after its directory; ours after the output file",
    "general.basename": "convert's, from the directory name",
    "general.size_label": "convert's guess of the parameter count's label",
    "general.finetune": "convert's, from the directory name",
    "tokenizer.ggml.scores": "SentencePiece BPE: convert writes -1000 for every token (so llama.cpp "
                             "merges leftmost-first); ours rank the merges as BPE does",
}
# Keys ours writes that convert may not (always written, so llama.cpp need not guess).
OUR_EXTRA_KEYS = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                  "tokenizer.ggml.add_sep_token", "tokenizer.ggml.add_space_prefix",
                  "general.type"}


# Each decoder family: transformers' config and model classes.
FAMILIES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
            "qwen3": (Qwen3Config, Qwen3ForCausalLM),
            "mistral": (MistralConfig, MistralForCausalLM),
            "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM),
            "phi3": (Phi3Config, Phi3ForCausalLM)}


@dataclasses.dataclass
class Case:
    name: str
    tokenizer: str            # a pipeline of make_hf_tokenizers.make_all
    llama: Optional[dict]     # the family's config keywords (None: GPT-2)
    family: str = "llama"     # FAMILIES' key
    extra_vocab: int = 0      # model vocabulary beyond the tokenizer's ([PAD] tokens)
    lora: bool = False
    pre: Optional[str] = None  # told to convert (see the docstring)
    tokenizer_config: Optional[dict] = None
    # The 2-D weights times this after transformers' init: larger activations, so the greedy
    # continuation varies instead of repeating one token. GPT-2 keeps 1: llama.cpp's GELU
    # (ggml's ggml_vec_gelu_f32) goes through an fp16 table, an error of its own that grows with
    # the activations (1.4e-4 of the logits at 2x, 8.5e-4 at 4x; 3.3e-5 at 1x).
    weight_scale: float = 4.0
    # The types compared with convert's. GPT-2 checks two: gguf-py's reader takes 4 s for each
    # file of GPT-2's 50,257 tokens and 50,000 merges; F16 and BF16 go the same way as Q8_0
    # through the type choice, and the Llama modes check all four.
    outtypes: tuple = OUTTYPES
    # Keys ours writes that convert does not, for this case only, and why.
    extra_keys: tuple = ()
    # The MLP's GELU is ggml's fp16 table in llama.cpp (GeGLU: Gemma): see check_logits.
    ggml_gelu: bool = False


# A tokenizer whose tokenizer_config.json names no bos: the engine's tokenizer takes an added
# <|endoftext|> as bos (GPT2TokenizerFast's default), and we write it; convert writes no bos. Both
# files say add_bos_token false, so llama.cpp never adds it (docs/gguf.md).
UNNAMED_BOS = ("tokenizer.ggml.bos_token_id",)
LLAMA_BASE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64, torch_dtype="float32")
CASES = {
    "gpt2": Case("gpt2", "gpt2", None,
                 tokenizer_config={"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                                   "unk_token": "<|endoftext|>"}, weight_scale=1.0,
                 outtypes=("f32", "q8_0")),
    "llama-spm": Case("llama-spm", "llama2",
                      dict(LLAMA_BASE, intermediate_size=80, num_key_value_heads=2,
                           rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=True),
                      tokenizer_config={"bos_token": "<s>", "eos_token": "</s>",
                                        "unk_token": "<unk>", "add_bos_token": True,
                                        "add_eos_token": False, "chat_template": CHAT_TEMPLATE}),
    "llama-bpe-lora": Case("llama-bpe-lora", "llama3",
                           dict(LLAMA_BASE, intermediate_size=128, num_key_value_heads=1,
                                rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=500000.0,
                                rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 16}),
                           extra_vocab=3, lora=True, pre="llama-bpe",
                           tokenizer_config={"bos_token": "<|begin_of_text|>",
                                             "eos_token": "<|end_of_text|>"}),
    # The families of issue 34, each under the name llama.cpp gives its architecture. F32 and
    # Q8_0 only: F16 and BF16 take the same path through the type choice (the Llama modes).
    "qwen2": Case("qwen2", "qwen2",
                  dict(LLAMA_BASE, intermediate_size=128, num_key_value_heads=2,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1e6),
                  family="qwen2", pre="qwen2", tokenizer_config={"eos_token": "<|endoftext|>"},
                  outtypes=("f32", "q8_0"), extra_keys=UNNAMED_BOS),
    "qwen3": Case("qwen3", "qwen3",
                  dict(LLAMA_BASE, head_dim=32, intermediate_size=128, num_key_value_heads=2,
                       rms_norm_eps=1e-6, tie_word_embeddings=False),
                  family="qwen3", pre="qwen2", tokenizer_config={"eos_token": "<|im_end|>"},
                  outtypes=("f32", "q8_0"), extra_keys=UNNAMED_BOS),
    # Mistral is llama.cpp's "llama" (convert_hf_to_gguf.py's LlamaModel registers it).
    "mistral": Case("mistral", "llama2",
                    dict(LLAMA_BASE, intermediate_size=96, num_key_value_heads=2,
                         sliding_window=None, tie_word_embeddings=False, rope_theta=1e6),
                    family="mistral",
                    tokenizer_config={"bos_token": "<s>", "eos_token": "</s>",
                                      "unk_token": "<unk>", "add_bos_token": True,
                                      "add_eos_token": False}, outtypes=("f32", "q8_0")),
    # Six layers: llama.cpp's Gemma 3 windows five of every six (layer 5 is global), as
    # transformers' sliding_window_pattern 6; a window of 8 under the 24 positions compared.
    "gemma3": Case("gemma3", "llama3",
                   dict(LLAMA_BASE, num_hidden_layers=6, head_dim=32, query_pre_attn_scalar=32,
                        intermediate_size=128, num_key_value_heads=1, rms_norm_eps=1e-6,
                        sliding_window=8, rope_theta=1e6, rope_local_base_freq=1e4,
                        rope_scaling={"rope_type": "linear", "factor": 2.0}),
                   family="gemma3", pre="llama-bpe",
                   tokenizer_config={"bos_token": "<|begin_of_text|>",
                                     "eos_token": "<|end_of_text|>"},
                   weight_scale=1.0, outtypes=("f32", "q8_0"), ggml_gelu=True),
    # Phi-3 with a byte-level BPE, as Phi-4 ships (convert reads tokenizer.model otherwise).
    "phi3": Case("phi3", "qwen2",
                 dict(LLAMA_BASE, intermediate_size=96, num_key_value_heads=2, rms_norm_eps=1e-5,
                      sliding_window=None, original_max_position_embeddings=64,
                      pad_token_id=None, tie_word_embeddings=False),
                 family="phi3", pre="qwen2",
                 tokenizer_config={"eos_token": "<|endoftext|>",
                                   "tokenizer_class": "GPT2Tokenizer"},
                 outtypes=("f32", "q8_0"), extra_keys=UNNAMED_BOS),
}
# tokenizers mode: each pipeline we export, and llama.cpp's name for it.
TOKENIZER_PIPELINES = {"gpt2": "gpt-2", "llama3": "llama-bpe", "llama3_merges": "llama-bpe",
                       "qwen2": "qwen2", "smollm2": "smollm", "llama2": "default",
                       "metaspace": "default", "qwen3": "qwen2", "gemma3": "default",
                       "phi3": "default"}


def corpus() -> List[str]:
    with open(os.path.join(ROOT, "tests", "data", "tokenizer_corpus.txt"), encoding="utf-8") as f:
        return [line for line in f.read().split("\n") if line.strip()]


_TOKENIZERS: Dict[str, str] = {}


def tokenizer_dir(name: str, tmp: str) -> str:
    """make_hf_tokenizers.make_all's pipelines (trained once per run), and llama3_merges: Llama
    3's pipeline as scripts/tiny_llama.py trains it, without ignore_merges (which llama.cpp's
    llama-bpe always sets: the same ids when every vocabulary token is what its merges make)."""
    import make_hf_tokenizers as mk
    if name == "llama3_merges" and name not in _TOKENIZERS:
        from tokenizers import Regex, pre_tokenizers, processors
        tok = mk.train_byte_level(corpus(), pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(mk.LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                     use_regex=False)]), mk.LLAMA3_SPECIALS, 1000)
        bos = mk.LLAMA3_SPECIALS[0]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
        os.makedirs(os.path.join(tmp, name), exist_ok=True)
        tok.save(os.path.join(tmp, name, "tokenizer.json"))
        _TOKENIZERS[name] = os.path.join(tmp, name)
    if not _TOKENIZERS or name not in _TOKENIZERS:
        gpt2_dir = os.path.join(ROOT, "third_party", "gpt2")
        if not os.path.exists(os.path.join(gpt2_dir, "encoder.json")):
            sys.exit("FAIL: third_party/gpt2 has no encoder.json: run scripts/install-deps.sh "
                     "--gpt2-vocab")
        _TOKENIZERS.update(mk.make_all(os.path.join(tmp, "tokenizers"), gpt2_dir, corpus()))
    return _TOKENIZERS[name]


def save_tokenizer(case: Case, src: str, dst: str) -> int:
    """The pipeline's tokenizer.json with the case's tokenizer_config.json, saved by transformers
    (as a model directory holds it); returns its vocabulary size."""
    cfg = dict(case.tokenizer_config or {})
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(src, "tokenizer.json"), **{
        k: v for k, v in cfg.items() if k.endswith("_token")})
    if "chat_template" in cfg:
        tok.chat_template = cfg["chat_template"]
    tok.save_pretrained(dst)
    path = os.path.join(dst, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    saved.update({k: v for k, v in cfg.items() if k.startswith("add_") or k == "tokenizer_class"})
    with open(path, "w", encoding="utf-8") as f:
        json.dump(saved, f, indent=2)
    return len(tok)


def make_model(case: Case, V: int, hf_dir: str) -> None:
    torch.manual_seed(1234)
    if case.llama is None:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=64, n_embd=64, n_layer=2,
                                           n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                           attn_pdrop=0.0))
    else:
        config_cls, model_cls = FAMILIES[case.family]
        model = model_cls(config_cls(vocab_size=V, **case.llama))
    tp.perturb_1d(model)
    with torch.no_grad():  # larger weights than the init's: a greedy continuation that varies
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(case.weight_scale)
    model.save_pretrained(hf_dir, safe_serialization=True)


def make_adapter(hf_dir: str, out: str) -> None:
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(99)
    model = AutoModelForCausalLM.from_pretrained(hf_dir)
    cfg = LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                     "up_proj", "down_proj"])
    get_peft_model(model, cfg).save_pretrained(out)


# ---- llama.cpp's side ------------------------------------------------------------------------
def convert(hf_dir: str, outfile: str, outtype: str, pre: Optional[str]) -> None:
    """llama.cpp's convert_hf_to_gguf.py, in this process."""
    import convert_hf_to_gguf as conv
    from conversion import base
    logging.getLogger().setLevel(logging.WARNING)
    original = base.TextModel.get_vocab_base_pre
    if pre:
        base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", hf_dir, "--outfile", outfile, "--outtype", outtype]
    try:
        conv.main()
    finally:
        sys.argv = argv
        base.TextModel.get_vocab_base_pre = original
    logging.getLogger().setLevel(logging.WARNING)


def field_value(f):
    v = f.contents()
    return v.tolist() if isinstance(v, np.ndarray) else v


def compare_files(ours: str, theirs: str, checks: tp.Checks, what: str,
                  extra_keys: tuple = ()) -> None:
    a, b = gguf.GGUFReader(ours), gguf.GGUFReader(theirs)
    fa = {k: field_value(f) for k, f in a.fields.items() if not k.startswith("GGUF.")}
    fb = {k: field_value(f) for k, f in b.fields.items() if not k.startswith("GGUF.")}
    missing = [k for k in fb if k not in fa and k not in KEY_DIFFERENCES]
    extra = [k for k in fa if k not in fb and k not in OUR_EXTRA_KEYS and k not in extra_keys]
    differ = [k for k in fb if k in fa and k not in KEY_DIFFERENCES and fa[k] != fb[k]]
    checks.expect(not missing and not extra and not differ,
                  f"{what}: keys as convert's ({len(fb)} keys; missing {missing}, extra {extra}, "
                  f"different {[(k, str(fa[k])[:60], str(fb[k])[:60]) for k in differ]})")
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    checks.expect(set(ta) == set(tb),
                  f"{what}: tensor names as convert's ({len(tb)}; only ours "
                  f"{sorted(set(ta) - set(tb))}, only convert's {sorted(set(tb) - set(ta))})")
    bad = []
    for name in sorted(set(ta) & set(tb)):
        x, y = ta[name], tb[name]
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            bad.append(f"{name}: {x.tensor_type.name}{list(x.shape)} vs "
                       f"{y.tensor_type.name}{list(y.shape)}")
        elif name == "rope_freqs.weight":
            if tp.rel_diff(np.asarray(x.data), np.asarray(y.data)) > LLAMA3_FACTORS_TOL:
                bad.append(f"{name}: {np.asarray(x.data)} vs {np.asarray(y.data)}")
        elif np.asarray(x.data).tobytes() != np.asarray(y.data).tobytes():
            bad.append(f"{name}: values differ")
    types = sorted({t.tensor_type.name for t in ta.values()})
    checks.expect(not bad, f"{what}: every tensor's type, shape and bytes as convert's (types "
                           f"{types}){': ' + '; '.join(bad[:4]) if bad else ''}")


def load_llama(path: str, vocab_only: bool = False):
    """llama.cpp on one thread, its KV cache in F32 (its default, F16, rounds keys and values:
    an F32 file's logits are compared at 1e-4), flash attention off (its default)."""
    return llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=64, n_threads=1,
                           logits_all=True, vocab_only=vocab_only, verbose=False,
                           type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32,
                           flash_attn=False)


def llama_logits(llm, ids: List[int]) -> np.ndarray:
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], dtype=np.float32)


def llama_greedy(llm, ids: List[int], n: int) -> List[int]:
    llm.reset()
    out, seq = [], list(ids)
    llm.eval(seq)
    for _ in range(n):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if nxt == llm.token_eos():
            break
        out.append(nxt)
        llm.eval([nxt])
    return out


def llama_text(llm, ids: List[int]) -> bytes:
    """llama.cpp's text of `ids`, special tokens' included (llama_token_to_piece, each token's
    buffer as large as it asks for). Not llama-cpp-python's detokenize: its buffer is 32 bytes,
    and a longer piece comes back as nothing (a token of 108 bytes, three times a Chinese
    sentence, which the SentencePiece-style tokenizer trained here sometimes learns: its merges'
    ties, hence its vocabulary, vary from run to run)."""
    out = b""
    for t in ids:
        size = 32
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(llm._model.vocab, t, buf, size, 0, True)
            if n >= 0:
                out += buf.raw[:n]
                break
            size = -n
    return out


# ---- the engine's side -----------------------------------------------------------------------
def engine_logits(engine, checkpoint: str, ids: List[int], tmp: str,
                  adapter: Optional[str]) -> np.ndarray:
    src, out = os.path.join(tmp, "ids.safetensors"), os.path.join(tmp, "logits.safetensors")
    save_file({"idx": np.array([ids], dtype=np.float32)}, src)
    engine.logits(checkpoint, src, out, adapter=adapter)
    return load_file(out)["logits"][0]


def engine_greedy(engine, checkpoint, ids, n, eos, tmp, adapter) -> List[int]:
    out, seq = [], list(ids)
    for _ in range(n):
        nxt = int(np.argmax(engine_logits(engine, checkpoint, seq, tmp, adapter)[-1]))
        if nxt == eos:
            break
        out.append(nxt)
        seq.append(nxt)
    return out


def engine_ids(cli: str, tokenizer: str, lines: List[str]) -> List[List[int]]:
    r = subprocess.run([cli, "tokenize", "--tokenizer", tokenizer, "--special"],
                       input="\n".join(lines) + "\n", stdout=subprocess.PIPE, text=True, check=True)
    return [[int(x) for x in line.split()] for line in r.stdout.splitlines()]


def export_gguf(engine, checkpoint, out, outtype, tokenizer=None, adapter=None) -> None:
    cmd = [engine.cli, "export", "--format", "gguf", "--checkpoint", checkpoint, "-o", out,
           "--outtype", outtype]
    cmd += ["--tokenizer", tokenizer] if tokenizer else []
    cmd += ["--adapter", adapter, "--merge"] if adapter else []
    tp.run(cmd)


def ggml_gelu(x: torch.Tensor) -> torch.Tensor:
    """ggml's GELU as llama.cpp's CPU backend computes it (GGML_GELU_FP16, ggml-cpu/vec.h:
    ggml_vec_gelu_f32 / ggml_vec_geglu_f32): the input rounded to fp16, looked up in a table of
    the tanh GELU rounded to fp16; 0 at or below -10, x at or above 10."""
    y = torch.nn.functional.gelu(x.half().float(), approximate="tanh").half().float()
    return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))


def transformers_logits(case: Case, hf_dir: str, ids: List[int], gelu=None) -> np.ndarray:
    model = FAMILIES[case.family][1].from_pretrained(hf_dir, attn_implementation="eager").eval()
    if gelu is not None:
        class Gelu(torch.nn.Module):
            def forward(self, x):
                return gelu(x)
        for layer in model.model.layers:
            layer.mlp.act_fn = Gelu()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def check_logits(case: Case, llm, ours: np.ndarray, hf_dir: str, ids: List[int],
                 checks: tp.Checks) -> None:
    """llama.cpp's logits of our F32 file are the engine's within LOGITS_TOL. Where llama.cpp's
    MLP runs ggml's fp16 GELU table (case.ggml_gelu), an error of llama.cpp's own (1.7e-3 of the
    logits for the gemma3 mode, which is at transformers' init scale), the file is checked
    against transformers running that same GELU instead (GGML_GELU_TOL), and the engine against
    transformers itself (LOGITS_TOL)."""
    theirs = llama_logits(llm, ids)
    e = tp.rel_diff(theirs, ours)
    if not case.ggml_gelu:
        checks.expect(theirs.shape == ours.shape and e <= LOGITS_TOL,
                      f"{case.name}: llama.cpp's logits of our F32 file, {theirs.shape}, the "
                      f"engine's within {LOGITS_TOL:g}: {e:.2e}")
        return
    ref = transformers_logits(case, hf_dir, ids, gelu=ggml_gelu)
    e_file = tp.rel_diff(theirs, ref)
    checks.expect(theirs.shape == ref.shape and e_file <= GGML_GELU_TOL,
                  f"{case.name}: llama.cpp's logits of our F32 file, {theirs.shape}, "
                  f"transformers' with ggml's fp16 GELU within {GGML_GELU_TOL:g}: {e_file:.2e} "
                  f"(the engine's exact GELU: {e:.2e})")
    plain = transformers_logits(case, hf_dir, ids)
    e_ours = tp.rel_diff(ours, plain[:, :ours.shape[1]])
    checks.expect(e_ours <= LOGITS_TOL, f"{case.name}: the engine's logits, transformers' within "
                                        f"{LOGITS_TOL:g}: {e_ours:.2e}")


# ---- the modes -------------------------------------------------------------------------------
def check_case(engine, case: Case, tmp: str) -> int:
    checks = tp.Checks()
    hf_dir, tok_dir = os.path.join(tmp, "hf"), os.path.join(tmp, "tok")
    V = save_tokenizer(case, tokenizer_dir(case.tokenizer, tmp), tok_dir) + case.extra_vocab
    make_model(case, V, hf_dir)
    for f in os.listdir(tok_dir):
        shutil.copy(os.path.join(tok_dir, f), hf_dir)
    adapter = None
    if case.lora:
        adapter = os.path.join(tmp, "adapter")
        make_adapter(hf_dir, adapter)
    # convert's input: our Hugging Face export of the same model, with the tokenizer's files.
    ours_hf = os.path.join(tmp, "ours_hf")
    tp.run([engine.cli, "export", "--format", "hf", "--checkpoint", hf_dir, "-o", ours_hf] +
           (["--adapter", adapter, "--merge"] if adapter else []))
    for f in os.listdir(tok_dir):
        shutil.copy(os.path.join(tok_dir, f), ours_hf)
    files = {}
    for t in case.outtypes:
        files[t] = os.path.join(tmp, f"ours-{t}.gguf")
        export_gguf(engine, hf_dir, files[t], t, adapter=adapter)
        theirs = os.path.join(tmp, f"convert-{t}.gguf")
        convert(ours_hf, theirs, t, case.pre)
        compare_files(files[t], theirs, checks, f"{case.name} {t}", case.extra_keys)
        load_llama(files[t])  # loads (raises otherwise)
    checks.expect(True, f"{case.name}: llama.cpp loads our {', '.join(case.outtypes)} files")

    llm = load_llama(files["f32"])
    rng = np.random.default_rng(7)
    ids = [int(x) for x in rng.integers(0, V - case.extra_vocab, 24)]
    check_logits(case, llm, engine_logits(engine, hf_dir, ids, tmp, adapter), hf_dir, ids, checks)

    want = engine_ids(engine.cli, hf_dir, [PROMPT])[0]
    got = llm.tokenize(PROMPT.encode(), add_bos=llm._model.add_bos_token(), special=False)
    checks.expect(got == want, f"{case.name}: llama.cpp tokenizes the prompt as the engine "
                               f"({len(want)} ids): {got[:8]} vs {want[:8]}")
    eos = llm.token_eos()
    g_llama = llama_greedy(llm, want, GREEDY_TOKENS)
    g_ours = engine_greedy(engine, hf_dir, want, GREEDY_TOKENS, eos, tmp, adapter)
    checks.expect(g_llama == g_ours, f"{case.name}: greedy continuation, llama.cpp's {g_llama} "
                                     f"vs the engine's {g_ours}")
    # generate prints the prompt, then each token's text as it comes (special tokens' too, as
    # transformers' decode), then a newline.
    r = subprocess.run([engine.cli, "generate", "--checkpoint", hf_dir, "--prompt", PROMPT,
                        "--temperature", "0", "--tokens", str(GREEDY_TOKENS)] +
                       (["--adapter", adapter] if adapter else []),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    text = r.stdout[len(PROMPT.encode()):-1]
    llama_says = llama_text(llm, g_llama)
    checks.expect(r.stdout.startswith(PROMPT.encode()) and text == llama_says,
                  f"{case.name}: `generate --temperature 0` prints llama.cpp's greedy text: "
                  f"{text!r} vs {llama_says!r}")
    return checks.exit_code()


def check_tokenizers(engine, tmp: str) -> int:
    checks = tp.Checks()
    for name, pre in TOKENIZER_PIPELINES.items():
        # llama.cpp does not normalize to NFC (Qwen2's normalizer): text already in NFC.
        lines = ([unicodedata.normalize("NFC", t) for t in corpus()] if name in ("qwen2", "qwen3")
                 else corpus())
        src = tokenizer_dir(name, tmp)
        d = os.path.join(tmp, "tok-" + name)
        case = Case(name, name, dict(LLAMA_BASE, intermediate_size=64, num_key_value_heads=4))
        V = save_tokenizer(case, src, d)
        hf_dir = os.path.join(tmp, "hf-" + name)
        make_model(case, V, hf_dir)
        path = os.path.join(tmp, name + ".gguf")
        export_gguf(engine, hf_dir, path, "f32", tokenizer=d)
        reader = gguf.GGUFReader(path)
        checks.expect(field_value(reader.fields["tokenizer.ggml.pre"]) == pre,
                      f"{name}: tokenizer.ggml.pre is {pre}")
        llm = load_llama(path, vocab_only=True)
        hf = AutoTokenizer.from_pretrained(d)
        ours = engine_ids(engine.cli, d, lines)
        add_bos = llm._model.add_bos_token()
        bad = []
        for i, line in enumerate(lines):
            # Special tokens written in the text are matched (as transformers always does).
            theirs = llm.tokenize(line.encode(), add_bos=add_bos, special=True)
            want = hf(line)["input_ids"]
            if not (theirs == ours[i] == want):
                bad.append(i)
        checks.expect(not bad, f"{name}: llama.cpp's ids = the engine's = transformers' on all "
                               f"{len(lines)} corpus lines" +
                      (f"; differ on line {bad[0]}: {lines[bad[0]][:50]!r}" if bad else ""))
    return checks.exit_code()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=list(CASES) + ["tokenizers"])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--engine-logits", required=True)
    a = ap.parse_args(argv)
    engine = tp.Engine(a.cli, a.engine_logits)
    print(f"llama-cpp-python {llama_cpp.__version__}, gguf-py from {CONVERT_DIR}")
    with tempfile.TemporaryDirectory() as tmp:
        if a.mode == "tokenizers":
            return check_tokenizers(engine, tmp)
        return check_case(engine, CASES[a.mode], tmp)


if __name__ == "__main__":
    sys.exit(main())
