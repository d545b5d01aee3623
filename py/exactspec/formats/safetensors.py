"""Safetensors reader (F32 / F16 / BF16) and Hugging Face config.json -> ModelConfig.

Layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]},
"__metadata__": {...}}, then the data (offsets relative to the byte after the header). Every field is checked
against the file size before anything is allocated; problems raise `FormatError`.

Weights are returned under GGUF names (token_embd.weight, blk.N.attn_q.weight, ...) in HF order, the naming
`exactspec.reference` uses for every source.
"""
from __future__ import annotations

import json
import os
import re
import struct
from typing import Any, Mapping

import numpy as np

from ..backend import ModelConfig
from .layout import check_llama_tensors, check_no_overlap, json_number, load_json
from .quant import FormatError

MAX_HEADER = 100 << 20
_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2)}
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_HF_TO_GGUF = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_HF_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight"}


def hf_to_gguf_name(name: str) -> str | None:
    if name in _HF_GLOBAL:
        return _HF_GLOBAL[name]
    m = _HF_LAYER.match(name)
    if m and m.group(2) in _HF_TO_GGUF:
        return f"blk.{int(m.group(1))}.{_HF_TO_GGUF[m.group(2)]}"
    return None


def gguf_to_hf_name(name: str) -> str | None:
    """The inverse of hf_to_gguf_name (the same table)."""
    for hf, g in _HF_GLOBAL.items():
        if g == name:
            return hf
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
        for hf, g in _HF_TO_GGUF.items():
            if g == parts[2]:
                return f"model.layers.{int(parts[1])}.{hf}"
    return None


class SafetensorsFile:
    """Parsed header; `.tensors` name -> (dtype, shape, absolute offset, nbytes); data read on demand."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as f:
                if size < 8:
                    raise FormatError(f"truncated safetensors file ({size} bytes): {self.path}")
                (n,) = struct.unpack("<Q", f.read(8))
                if n > MAX_HEADER or n > size - 8:
                    raise FormatError(f"safetensors header length {n} is absurd for a {size}-byte file")
                raw = f.read(n)
        except OSError as e:
            raise FormatError(f"cannot read safetensors file {self.path!r}: {e}") from e
        header = load_json(raw, "the safetensors header")
        if not isinstance(header, dict):
            raise FormatError("safetensors header is not a JSON object")
        md = header.pop("__metadata__", None)
        self.metadata = md if isinstance(md, dict) else {}
        base = 8 + n
        data_size = size - base
        self.tensors: dict[str, tuple[str, tuple, int, int]] = {}
        for name, spec in header.items():
            if not isinstance(spec, dict):
                raise FormatError(f"safetensors entry {name!r} is not an object")
            dtype, shape, offs = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
            if not (isinstance(shape, list) and len(shape) <= 8 and
                    all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < (1 << 40) for d in shape)):
                raise FormatError(f"safetensors tensor {name!r} has a bad shape {shape!r}")
            if not (isinstance(offs, list) and len(offs) == 2 and
                    all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
                    and 0 <= offs[0] <= offs[1] <= data_size):
                raise FormatError(f"safetensors tensor {name!r} offsets {offs!r} lie outside the data "
                                  f"({data_size} bytes)")
            n_el = 1
            for d in shape:
                n_el *= d
            if dtype not in _DTYPES:
                self.tensors[name] = (str(dtype), tuple(shape), base + offs[0], offs[1] - offs[0])
                continue
            if n_el * _DTYPES[dtype][1] != offs[1] - offs[0]:
                raise FormatError(f"safetensors tensor {name!r}: {offs[1] - offs[0]} bytes for shape {shape} "
                                  f"of {dtype}")
            self.tensors[name] = (dtype, tuple(shape), base + offs[0], offs[1] - offs[0])
        # two tensors sharing bytes: one reads the other's data (the format forbids it; a crafted file)
        check_no_overlap([(k, v[2], v[3]) for k, v in self.tensors.items() if v[3]], "safetensors tensors")

    def tensor(self, name: str) -> np.ndarray:
        if name not in self.tensors:
            raise FormatError(f"tensor {name!r} not in {self.path}")
        dtype, shape, off, nbytes = self.tensors[name]
        if dtype not in _DTYPES:
            raise FormatError(f"safetensors tensor {name!r} has dtype {dtype}, not supported (F32, F16, BF16)")
        buf = np.empty(nbytes, dtype=np.uint8)          # (nbytes,) checked against the file size
        with open(self.path, "rb") as f:
            f.seek(off)
            if f.readinto(memoryview(buf)) != nbytes:
                raise FormatError(f"safetensors tensor {name!r}: file truncated while reading")
        if dtype == "BF16":
            out = (buf.view("<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
        else:
            out = buf.view(_DTYPES[dtype][0]).astype(np.float32)
        return out.reshape(shape)


def _cfg_int(cfg: Mapping, key: str, default=None) -> int:
    v = cfg.get(key)
    if v is None:            # absent or null: the default (a required field has none)
        v = default
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > (1 << 31):
        raise FormatError(f"config.json {key} = {v!r} is not a sensible positive integer")
    return v


def config_from_hf(cfg: Mapping[str, Any]) -> ModelConfig:
    """Hugging Face LlamaConfig-style dict -> ModelConfig. Every field is type-checked (a JSON object of numbers,
    strings and booleans of the right kind: "false" is not false, null means absent); problems are FormatError."""
    if not isinstance(cfg, dict):
        raise FormatError(f"config.json must be a JSON object, not {type(cfg).__name__}")
    mt = cfg.get("model_type", "llama")
    archs = cfg.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise FormatError(f"config.json architectures = {archs!r} must be a list of names")
    if not isinstance(mt, str) or (mt not in ("llama", "mistral", "qwen2") and
                                   "LlamaForCausalLM" not in (archs or [])):
        raise FormatError(f"unsupported model_type {mt!r} (llama-style decoders only)")
    dim = _cfg_int(cfg, "hidden_size")
    n_heads = _cfg_int(cfg, "num_attention_heads")
    n_kv = _cfg_int(cfg, "num_key_value_heads", n_heads)
    if n_heads % n_kv:
        raise FormatError(f"num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv}")
    head_dim = _cfg_int(cfg, "head_dim", dim // n_heads if dim >= n_heads else None)
    prf = json_number(cfg, "partial_rotary_factor", 1.0, low=0.0, high=1.0, low_open=True)
    rope_dim = int(head_dim * prf)
    if rope_dim < 2 or rope_dim % 2:
        raise FormatError(f"config.json partial_rotary_factor {prf} gives {rope_dim} rotary dims of head_dim "
                          f"{head_dim}: must be even and >= 2")
    scaling = cfg.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, dict):
        raise FormatError(f"rope_scaling {scaling!r} must be an object or null")
    if scaling and scaling.get("rope_type", scaling.get("type")) != "default":
        raise FormatError(f"rope_scaling {scaling!r} is not supported")
    tie = cfg.get("tie_word_embeddings")
    if tie is not None and not isinstance(tie, bool):
        raise FormatError(f"config.json tie_word_embeddings = {tie!r} must be true or false")
    return ModelConfig(
        dim=dim, hidden_dim=_cfg_int(cfg, "intermediate_size"), n_layers=_cfg_int(cfg, "num_hidden_layers"),
        n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, vocab_size=_cfg_int(cfg, "vocab_size"),
        seq_len=_cfg_int(cfg, "max_position_embeddings", 2048),
        rope_theta=json_number(cfg, "rope_theta", 10000.0, low=0.0, low_open=True),
        rope_dim=rope_dim, norm_eps=json_number(cfg, "rms_norm_eps", 1e-5, low=0.0, high=1.0, low_open=True),
        tied_embeddings=bool(tie), arch="llama")


def config_to_hf(cfg: ModelConfig) -> dict:
    """ModelConfig -> a Hugging Face LlamaConfig-style dict (the inverse of config_from_hf; for tests and tools)."""
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": cfg.dim,
            "intermediate_size": cfg.hidden_dim, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "vocab_size": cfg.vocab_size,
            "max_position_embeddings": cfg.seq_len, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.norm_eps,
            "partial_rotary_factor": (cfg.rope_dim or cfg.head_dim) / cfg.head_dim,
            "tie_word_embeddings": cfg.tied_embeddings}


def read_hf_config(path: str | os.PathLike) -> ModelConfig:
    """config.json -> ModelConfig (FormatError for unreadable, invalid or hostile JSON)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG + 1)
    except OSError as e:
        raise FormatError(f"no readable config.json: {e}") from None
    if len(raw) > MAX_CONFIG:
        raise FormatError(f"config.json is larger than {MAX_CONFIG} bytes")
    return config_from_hf(load_json(raw, "config.json"))


MAX_CONFIG = 1 << 20


def _hf_folder(path: str | os.PathLike) -> tuple[ModelConfig, list[str]]:
    """(config from config.json, the .safetensors files) of a Hugging Face folder (or a path to one of its files)."""
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    cfg = read_hf_config(os.path.join(folder, "config.json"))
    files = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors"))
    if path.endswith(".safetensors"):
        files = [path]
    if not files:
        raise FormatError(f"no .safetensors files in {folder!r}")
    return cfg, files


def _tie(cfg: ModelConfig, names) -> tuple[ModelConfig, bool]:
    """(config, keep output.weight): a tied config ignores lm_head; an untied one without lm_head is tied."""
    if cfg.tied_embeddings:
        return cfg, False
    if "output.weight" not in names:
        return ModelConfig(**{**cfg.to_json(), "tied_embeddings": True}), False
    return cfg, True


# tensors a llama checkpoint may hold that the model does not use (old checkpoints saved RoPE's inverse
# frequencies, which the reader computes itself)
_HF_IGNORED = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")


def hf_tensor_table(path: str | os.PathLike):
    """(config, {gguf name: (shard path, hf name, dtype, shape, offset, nbytes)}) of a Hugging Face folder, checked:
    no tensor defined in two shards, none the model would ignore (biases, unknown names), every tensor with its
    shape and a readable dtype (formats.layout)."""
    cfg, files = _hf_folder(path)
    table: dict[str, tuple] = {}
    seen: dict[str, str] = {}
    for fp in files:
        st = SafetensorsFile(fp)
        for name, (dtype, shape, off, nbytes) in st.tensors.items():
            if name in seen:
                raise FormatError(f"tensor {name!r} is defined in both {os.path.basename(seen[name])} and "
                                  f"{os.path.basename(fp)}")
            seen[name] = fp
            g = hf_to_gguf_name(name)
            if g is None:
                if _HF_IGNORED.match(name):
                    continue
                raise FormatError(f"the checkpoint holds tensor {name!r}, which a llama model of this reader does "
                                  "not use (biases and other extras are not supported): refusing it rather than "
                                  "running a different model")
            table[g] = (fp, name, dtype, tuple(shape), off, nbytes)
    cfg, keep_out = _tie(cfg, table)
    if not keep_out:
        table.pop("output.weight", None)
    check_llama_tensors(cfg, {g: (v[3], v[2]) for g, v in table.items()}, "the checkpoint",
                        name_of=lambda g: gguf_to_hf_name(g) or g)
    return cfg, table


def load_safetensors_model(path: str | os.PathLike) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """A folder with config.json + *.safetensors (or a path to one of them) -> (config, GGUF-named weights)."""
    cfg, table = hf_tensor_table(path)
    opened: dict[str, SafetensorsFile] = {}
    weights: dict[str, np.ndarray] = {}
    for g, (fp, name, *_rest) in table.items():
        st = opened.get(fp) or opened.setdefault(fp, SafetensorsFile(fp))
        weights[g] = np.ascontiguousarray(st.tensor(name))
    return cfg, weights


def describe_safetensors_model(path: str | os.PathLike) -> dict:
    """JSON-able {format: "hf", config, tensors: [{name (GGUF), ggml_type, shape, offset, nbytes, qk_permuted, file}]}
    of a Hugging Face folder, for a JS engine that streams raw tensor bytes: names mapped by `hf_to_gguf_name` (the
    one map), offsets absolute within `file` (the shard's file name in the folder), rows in HF order (qk_permuted
    False). The folder is checked as hf_tensor_table does."""
    cfg, table = hf_tensor_table(path)
    files = sorted({v[0] for v in table.values()})
    tensors = [{"name": g, "ggml_type": dtype, "shape": list(shape), "offset": off, "nbytes": nbytes,
                "qk_permuted": False, "file": os.path.basename(fp)}
               for g, (fp, _n, dtype, shape, off, nbytes) in table.items()]
    return {"format": "hf", "config": cfg.to_json(), "files": [os.path.basename(f) for f in files],
            "tensors": tensors}


def write_safetensors(path: str | os.PathLike, tensors: Mapping[str, np.ndarray], dtype: str = "F32") -> None:
    """Write float arrays as one safetensors file of dtype F32, F16 or BF16 (BF16 truncates: exact for values that
    are already bfloat16). For tests and tools; the runtime only reads."""
    if dtype not in _DTYPES:
        raise FormatError(f"cannot write dtype {dtype} (F32, F16, BF16)")
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype=np.float32)
        if dtype == "BF16":
            b = (a.view("<u4") >> np.uint32(16)).astype("<u2").tobytes()
        else:
            b = a.astype(_DTYPES[dtype][0]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
