"""Hostile model files, for the fuzzer (py/bench/fuzz.py), tests/test_hostile.py and the page's import test.

A GGUF file is held as parts (metadata KVs, tensor infos, the data section) that a mutation changes and `to_bytes`
serialises — including what a writer never would: counts that lie, element types that disagree, offsets that
overlap, dims that disagree with the config. A Hugging Face folder is a dict file name -> bytes (config.json,
model*.safetensors, tokenizer.json, tokenizer_config.json). Everything starts from the project's micro-models
(exactspec.micro), so an unmutated case loads and runs.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from exactspec.formats.gguf import (_QK_RE, _SCALAR, DEFAULT_ALIGNMENT, T_ARRAY, T_STRING, GGUFValue, _infer,
                                    gguf_metadata_for_config, permute_qk)
from exactspec.formats.quant import GGML_TYPE_IDS, quantize
from exactspec.micro import SPECIAL_TOKENS, micro_config, micro_tokenizer, micro_weights


def fuzz_config(**kw):
    """The micro-model the fuzzer mutates: the smallest with a byte-level tokenizer (vocab 300), one layer."""
    base = dict(dim=32, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, seq_len=64)
    base.update(kw)
    return micro_config(**base)


# ---- GGUF as parts ---------------------------------------------------------------------------------------------------
@dataclass
class KV:
    key: str
    vtype: int
    value: Any                        # scalar / str, or for arrays a list (etype elements; nested: lists of KVArr)
    etype: int | None = None          # arrays: the element type
    count: int | None = None          # arrays: the count written (None: len(value)); a lie when it differs
    raw: bytes | None = None          # the encoded value as is (type field excluded), when set


@dataclass
class TInfo:
    name: str
    dims: list                        # ggml order (dims[0] the fastest-moving axis)
    tid: int
    rel: int                          # offset relative to the data section


@dataclass
class GGUFParts:
    kvs: list = field(default_factory=list)
    infos: list = field(default_factory=list)
    data: bytearray = field(default_factory=bytearray)
    version: int = 3
    magic: bytes = b"GGUF"
    alignment: int = DEFAULT_ALIGNMENT
    n_tensors: int | None = None      # header counts (None: the true ones)
    n_kv: int | None = None
    n_dims: dict = field(default_factory=dict)   # tensor index -> n_dims written (a lie when it differs)

    def to_bytes(self) -> bytes:
        out = bytearray(self.magic + struct.pack("<I", self.version))
        out += struct.pack("<QQ", len(self.infos) if self.n_tensors is None else self.n_tensors,
                           len(self.kvs) if self.n_kv is None else self.n_kv)
        for kv in self.kvs:
            out += _str(kv.key) + struct.pack("<I", kv.vtype)
            out += kv.raw if kv.raw is not None else _value(kv.vtype, kv.value, kv.etype, kv.count)
        for i, t in enumerate(self.infos):
            out += _str(t.name) + struct.pack("<I", self.n_dims.get(i, len(t.dims)))
            out += b"".join(struct.pack("<Q", d & 0xFFFFFFFFFFFFFFFF) for d in t.dims)
            out += struct.pack("<IQ", t.tid & 0xFFFFFFFF, t.rel & 0xFFFFFFFFFFFFFFFF)
        align = self.alignment if self.alignment and self.alignment > 0 else DEFAULT_ALIGNMENT
        out += b"\x00" * ((-len(out)) % align)
        return bytes(out) + bytes(self.data)

    def kv(self, key: str) -> KV | None:
        return next((k for k in self.kvs if k.key == key), None)

    def info(self, name: str) -> TInfo | None:
        return next((t for t in self.infos if t.name == name), None)


def _str(s: str | bytes) -> bytes:
    b = s if isinstance(s, bytes) else s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _num(v, integer: bool):
    """Any value as a number a field can hold (a mutation may leave a string where a number goes: 0 then)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if integer:
            return int(v) if v == v and abs(v) != float("inf") else 0
        return v
    return 0


def _scalar(vtype: int, v) -> bytes:
    dt = np.dtype(_SCALAR[vtype])
    with np.errstate(all="ignore"):
        if dt.kind in "iub":
            v = _num(v, True) % (1 << (8 * dt.itemsize))
            return v.to_bytes(dt.itemsize, "little")
        return np.asarray(_num(v, False), dtype=dt).tobytes()


def _value(vtype: int, v, etype=None, count=None) -> bytes:
    if vtype in _SCALAR:
        return _scalar(vtype, v)
    if vtype == T_STRING:
        return _str(v if isinstance(v, (str, bytes)) else str(v))
    if vtype == T_ARRAY:
        items = list(v)
        n = len(items) if count is None else count
        head = struct.pack("<IQ", (etype or 0) & 0xFFFFFFFF, n & 0xFFFFFFFFFFFFFFFF)
        if etype in _SCALAR:
            if np.dtype(_SCALAR[etype]).kind in "iub":
                try:                   # the common case: plain ints within int64 (wrapped to the element type)
                    if all(type(x) is int for x in items):
                        return head + np.asarray(items, dtype=np.int64).astype(_SCALAR[etype]).tobytes()
                except OverflowError:
                    pass
                return head + b"".join(_scalar(etype, x) for x in items)
            with np.errstate(all="ignore"):
                return head + np.asarray([_num(x, False) for x in items], dtype=_SCALAR[etype]).tobytes()
        if etype == T_STRING:
            return head + b"".join(_str(x if isinstance(x, (str, bytes)) else str(x)) for x in items)
        if etype == T_ARRAY:
            return head + b"".join(_value(T_ARRAY, x.value, x.etype, x.count) if isinstance(x, KV) else
                                   struct.pack("<IQ", 0, 0) for x in items)
        return head
    return b""


def kv_of(key: str, v) -> KV:
    gv = v if isinstance(v, GGUFValue) else _infer(v)
    if gv.array:
        return KV(key, T_ARRAY, list(gv.value), etype=gv.vtype)
    return KV(key, gv.vtype, gv.value)


def micro_parts(cfg=None, seed: int = 0, tensor_type: str = "F32", tokenizer: bool = True) -> GGUFParts:
    """The micro-model (cfg, seed) as GGUF parts, byte for byte what exactspec.formats.write_gguf writes."""
    cfg = cfg or fuzz_config()
    md = gguf_metadata_for_config(cfg, name=f"exactspec-micro-seed{seed}")
    if tokenizer:
        md.update(micro_tokenizer(cfg.vocab_size))
    parts = GGUFParts(kvs=[kv_of(k, v) for k, v in md.items()])
    off = 0
    for name, arr in micro_weights(cfg, seed).items():
        tname = "F32" if arr.ndim == 1 else tensor_type
        m = _QK_RE.match(name)
        if m:
            arr = permute_qk(arr, cfg.n_heads if m.group(1) == "q" else cfg.n_kv_heads)
        blob = quantize(arr, tname).tobytes()
        parts.infos.append(TInfo(name, list(reversed(arr.shape)), GGML_TYPE_IDS[tname], off))
        parts.data += blob
        pad = (-len(parts.data)) % DEFAULT_ALIGNMENT
        parts.data += b"\x00" * pad
        off = len(parts.data)
    return parts


# ---- Hugging Face folders ----------------------------------------------------------------------------------------------
_GG2HF = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def hf_name(g: str) -> str:
    if g == "token_embd.weight":
        return "model.embed_tokens.weight"
    if g == "output_norm.weight":
        return "model.norm.weight"
    if g == "output.weight":
        return "lm_head.weight"
    _, i, kind, _ = g.split(".")
    return f"model.layers.{i}.{_GG2HF[kind]}.weight"


def safetensors_bytes(tensors: dict, dtype: str = "F32", header_extra: dict | None = None) -> bytes:
    """name -> float array as one safetensors file; header_extra entries are added to (or replace) the header."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype=np.float32)
        if dtype == "BF16":
            b = (a.view("<u4") >> np.uint32(16)).astype("<u2").tobytes()
        elif dtype == "F16":
            b = a.astype("<f2").tobytes()
        else:
            b = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header.update(header_extra or {})
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def hf_config(cfg) -> dict:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": cfg.dim,
            "intermediate_size": cfg.hidden_dim, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
            "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.seq_len, "rope_theta": cfg.rope_theta,
            "rms_norm_eps": cfg.norm_eps, "tie_word_embeddings": cfg.tied_embeddings}


def micro_tokenizer_json(vocab_size: int) -> tuple[dict, dict]:
    """(tokenizer.json, tokenizer_config.json) of the micro byte-level tokenizer (the GGUF one, HF's spelling)."""
    md = micro_tokenizer(vocab_size)
    toks = md["tokenizer.ggml.tokens"]
    tj = {"version": "1.0", "added_tokens": [{"id": i, "content": t, "special": True, "single_word": False,
                                              "lstrip": False, "rstrip": False, "normalized": False}
                                             for i, t in enumerate(SPECIAL_TOKENS)],
          "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Digits", "individual_digits": True},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
          "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(toks)},
                    "merges": list(md["tokenizer.ggml.merges"])}}
    tc = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": md["tokenizer.chat_template"]}
    return tj, tc


def micro_hf(cfg=None, seed: int = 0, dtype: str = "F32") -> dict:
    """A Hugging Face folder of the micro-model: {file name: bytes}."""
    cfg = cfg or fuzz_config()
    w = micro_weights(cfg, seed)
    tj, tc = micro_tokenizer_json(cfg.vocab_size)
    return {"config.json": json.dumps(hf_config(cfg)).encode(),
            "model.safetensors": safetensors_bytes({hf_name(k): v for k, v in w.items()}, dtype),
            "tokenizer.json": json.dumps(tj).encode(), "tokenizer_config.json": json.dumps(tc).encode()}


def write_folder(folder, files: dict) -> None:
    import os
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def load_json_or(data, default):
    try:
        return json.loads(data)
    except (ValueError, TypeError, RecursionError):
        return default
