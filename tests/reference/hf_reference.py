#!/usr/bin/env python3
"""A tiny GPT-2 in Hugging Face's layout, and its logits, for the import/export tests.

This runs on Debian's python3-torch (1.13, without transformers), so it writes what
`GPT2LMHeadModel.save_pretrained(dir, safe_serialization=True)` writes, by hand (the real
transformers, from PyPI, checks the same format in transformers_parity.py):

  config.json        GPT2Config's keys, sorted, two-space indent (as transformers writes it)
  model.safetensors  GPT2LMHeadModel's state_dict names ("transformer.h.0.attn.c_attn.weight"),
                     Conv1D weights stored (in, out), no lm_head.weight (tied to wte, so
                     save_pretrained drops it), no attn.bias buffers (not persistent), F32,
                     metadata {"format": "pt"}

with `write_safetensors` below, which follows the byte layout of safetensors' own writer
(safetensors/src/tensor.rs `prepare`): tensors sorted by dtype alignment (descending) then name,
data_offsets consecutive from 0, a compact JSON header (serde_json: no spaces) with
`__metadata__` first and each entry's keys in the order dtype, shape, data_offsets, padded with
spaces to a multiple of 8 bytes, preceded by its length as a little-endian u64.

The weights are the `odd` config's shape (L=3, C=48, NH=3, V=300 -> Vp 384, maxT=40) with every
tensor random (LayerNorm weights and biases too), so a wrong name, a missing transpose or a
swapped bias cannot go unnoticed. The logits are computed twice, by gpt2_reference.gpt2_forward
in llm.c's layout and by `hf_forward` here from the HF-named tensors with Conv1D semantics
(y = x @ W + b, W (in, out)), and must agree: that checks the name and transpose mapping
independently of the C++ code.

  /usr/bin/python3 tests/reference/hf_reference.py --out tests/reference/fixtures/hf
  /usr/bin/python3 tests/reference/hf_reference.py --verify tests/reference/fixtures/hf
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import math
import struct
import sys
from typing import Dict, List, Tuple

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as ref  # noqa: E402

SEED = 2024
B, T = 2, 16  # the logits batch (T < maxT = 40)

# safetensors' Dtype enum order (tensor.rs): the writer sorts by it, descending, then by name.
DTYPE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32",
               "U32", "F32", "F64", "I64", "U64"]


def write_safetensors(tensors: Dict[str, np.ndarray], metadata: Dict[str, str]) -> bytes:
    """F32 tensors -> the bytes safetensors' writer produces (module docstring)."""
    names = sorted(tensors, key=lambda n: (-DTYPE_ORDER.index("F32"), n))
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset, blobs = 0, []
    for name in names:
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def read_safetensors(data: bytes) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8: 8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", info
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a: 8 + n + b], dtype="<f4").reshape(info["shape"])
    return out, meta


def config_json(ms: ref.ModelShape) -> bytes:
    """GPT2Config.to_json_string's keys for this shape (what `export --format hf` writes)."""
    cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
           "attn_pdrop": 0.1, "embd_pdrop": 0.1, "initializer_range": 0.02,
           "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": ms.maxT, "n_embd": ms.C,
           "n_head": ms.NH, "n_inner": None, "n_layer": ms.L, "n_positions": ms.maxT,
           "resid_pdrop": 0.1, "scale_attn_weights": True, "tie_word_embeddings": True,
           "torch_dtype": "float32", "use_cache": True, "vocab_size": ms.V}
    if ms.V > 50256:
        cfg["bos_token_id"] = cfg["eos_token_id"] = 50256
    return (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode()


def random_params(ms: ref.ModelShape) -> Dict[str, torch.Tensor]:
    """llm.c-layout parameters, every tensor random (wte's padding rows stay zero)."""
    gen = torch.Generator().manual_seed(SEED)
    p = {}
    for name, shape in ms.param_shapes():
        t = torch.randn(shape, generator=gen) * 0.1
        if name in ("ln1w", "ln2w", "lnfw"):
            t += 1.0
        if name == "wte":
            t[ms.V:] = 0.0
        p[name] = t
    return p


# (llm.c name, HF name after "h.<l>.", Conv1D weight?)
HF_NAMES = [("wte", "wte.weight", False), ("wpe", "wpe.weight", False),
            ("ln1w", "ln_1.weight", False), ("ln1b", "ln_1.bias", False),
            ("qkvw", "attn.c_attn.weight", True), ("qkvb", "attn.c_attn.bias", False),
            ("attprojw", "attn.c_proj.weight", True), ("attprojb", "attn.c_proj.bias", False),
            ("ln2w", "ln_2.weight", False), ("ln2b", "ln_2.bias", False),
            ("fcw", "mlp.c_fc.weight", True), ("fcb", "mlp.c_fc.bias", False),
            ("fcprojw", "mlp.c_proj.weight", True), ("fcprojb", "mlp.c_proj.bias", False),
            ("lnfw", "ln_f.weight", False), ("lnfb", "ln_f.bias", False)]
PER_LAYER = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw",
             "fcb", "fcprojw", "fcprojb"}


def to_hf(p: Dict[str, torch.Tensor], ms: ref.ModelShape) -> Dict[str, np.ndarray]:
    """llm.c layout -> GPT2LMHeadModel state_dict names and layouts."""
    out = {}
    for ours, hf, conv1d in HF_NAMES:
        copies = [(f"transformer.h.{l}.{hf}", p[ours][l]) for l in range(ms.L)] \
            if ours in PER_LAYER else [(f"transformer.{hf}", p[ours])]
        for name, t in copies:
            if ours == "wte":
                t = t[: ms.V]
            out[name] = (t.t() if conv1d else t).contiguous().numpy()
    return out


def hf_forward(sd: Dict[str, np.ndarray], ms: ref.ModelShape, idx: torch.Tensor) -> torch.Tensor:
    """GPT2LMHeadModel's forward from its state_dict, as transformers' modeling_gpt2 does it
    (Conv1D: x @ W + b), eval mode. Returns logits (B,T,V)."""
    w = {k: torch.from_numpy(v.copy()) for k, v in sd.items()}
    tr = "transformer."
    Bn, Tn = idx.shape
    C, NH = ms.C, ms.NH
    hs = C // NH
    conv1d = lambda x, name: x @ w[name + ".weight"] + w[name + ".bias"]  # noqa: E731
    ln = lambda x, name: F.layer_norm(x, (C,), w[name + ".weight"], w[name + ".bias"], eps=1e-5)  # noqa: E731,E501
    x = w[tr + "wte.weight"][idx] + w[tr + "wpe.weight"][:Tn]
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    for l in range(ms.L):
        h = f"{tr}h.{l}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=2)
        q, k, v = (t.view(Bn, Tn, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + conv1d(y, h + "attn.c_proj")
        m = F.gelu(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc"), approximate="tanh")
        x = x + conv1d(m, h + "mlp.c_proj")
    return ln(x, tr + "ln_f") @ w[tr + "wte.weight"].t()


def generate() -> Dict[str, bytes]:
    cfg = ref.CONFIGS["odd"]
    ms = ref.shape_of(cfg)
    p = random_params(ms)
    sd = to_hf(p, ms)
    idx = torch.from_numpy(
        np.arange(B * T, dtype=np.int64).reshape(B, T) * 37 % ms.V)  # ids up to V-1 appear
    with torch.no_grad():
        logits, _ = ref.gpt2_forward(p, ms, idx, None)
        logits_hf = hf_forward(sd, ms, idx)
    diff = (logits - logits_hf).abs().max().item()
    assert diff < 1e-5, f"llm.c-layout and HF-layout forwards disagree by {diff}"
    check = {"idx": idx.numpy().astype(np.float32), "logits": logits.numpy()}
    return {"config.json": config_json(ms),
            "model.safetensors": write_safetensors(sd, {"format": "pt"}),
            "logits.safetensors": write_safetensors(check, {})}


def verify(d: str) -> int:
    files, problems = generate(), []
    for name, data in files.items():
        path = os.path.join(d, name)
        if not os.path.exists(path):
            problems.append(f"{name} is missing")
            continue
        with open(path, "rb") as f:
            want = f.read()
        if name == "config.json":
            if want != data:
                problems.append(f"{name} differs")
            continue
        got_t, got_m = read_safetensors(data)
        want_t, want_m = read_safetensors(want)
        if got_m != want_m or sorted(got_t) != sorted(want_t):
            problems.append(f"{name}: different tensors or metadata")
            continue
        for k in got_t:  # torch's RNG and kernels are deterministic on one build; allow rounding
            if not np.allclose(got_t[k], want_t[k], rtol=1e-5, atol=1e-6):
                problems.append(f"{name}: {k} differs")
    for p in problems:
        print("STALE:", p)
    print(f"verify: {'FAILED' if problems else 'ok'} ({len(files)} files)")
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the fixture files into OUT")
    ap.add_argument("--verify", metavar="DIR", help="check DIR holds what --out writes")
    args = ap.parse_args(argv)
    if not (args.out or args.verify):
        ap.error("give --out or --verify")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for name, data in generate().items():
            with open(os.path.join(args.out, name), "wb") as f:
                f.write(data)
            print(f"wrote {os.path.join(args.out, name)} ({len(data)} bytes)")
    return verify(args.verify) if args.verify else 0


if __name__ == "__main__":
    sys.exit(main())
