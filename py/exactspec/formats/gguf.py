"""GGUF v2/v3 reader and writer (llama.cpp's model file format).

Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv (key, type, value) pairs, then n_tensors
tensor infos (name, u32 n_dims, u64 dims[n_dims] with dims[0] the fastest-moving axis, u32 ggml type, u64 offset
relative to the data section), padding to `general.alignment` (default 32), then the data section.

The reader is lazy: it parses the header with bounded reads and seeks to a tensor only when asked. Every count,
length and offset is checked against the file size BEFORE anything is allocated; problems raise `FormatError`.

Shapes are reported in numpy order (reversed ggml dims): a llama weight W (out_features, in_features).
llama.cpp's converter permutes the rows of attn_q / attn_k weights (interleaved-pair RoPE); `tensor()` undoes that
for llama-arch files so weights come back in Hugging Face order (rotate-half RoPE). `write_gguf` applies the same
permutation, so write -> read round-trips.
"""
from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from ..backend import ModelConfig
from .layout import check_llama_tensors, check_no_overlap
from .quant import (FormatError, GGML_TYPES, WRITABLE_TYPES, dequantize, quantize, tensor_nbytes, type_id,
                    type_name)

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_TENSORS = 1 << 20          # far above any real model (SmolLM2: 272)
MAX_KV = 1 << 20
MAX_STRING = 1 << 24           # 16 MiB for one string (chat templates are a few KiB)
MAX_ARRAY_DEPTH = 4
MAX_DIMS = 4
MAX_ELEMENTS = 1 << 40
# metadata arrays: at most this many elements are turned into Python values in all (a 256k-token vocabulary's tokens,
# scores and types are < 1M); a scalar array past MAX_EAGER_ARRAY elements, or past what is left of the budget, is
# skipped unread (a SkippedArray: using it is an error) instead of growing a list of hundreds of millions of ints
MAX_META_ELEMENTS = 1 << 22
MAX_EAGER_ARRAY = 1 << 21
MAX_NESTED_ARRAYS = 1 << 16    # arrays inside arrays, in all (no llama metadata uses them)

# GGUF metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, T_UINT64, T_INT64, \
    T_FLOAT64 = range(13)
_SCALAR = {T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2", T_UINT32: "<u4", T_INT32: "<i4",
           T_FLOAT32: "<f4", T_BOOL: "<u1", T_UINT64: "<u8", T_INT64: "<i8", T_FLOAT64: "<f8"}
VALUE_TYPE_NAMES = {T_UINT8: "UINT8", T_INT8: "INT8", T_UINT16: "UINT16", T_INT16: "INT16", T_UINT32: "UINT32",
                    T_INT32: "INT32", T_FLOAT32: "FLOAT32", T_BOOL: "BOOL", T_STRING: "STRING", T_ARRAY: "ARRAY",
                    T_UINT64: "UINT64", T_INT64: "INT64", T_FLOAT64: "FLOAT64"}

_QK_RE = re.compile(r"^blk\.\d+\.attn_(q|k)\.weight$")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: int          # ggml type id
    shape: tuple            # numpy order: reversed ggml dims, e.g. (out_features, in_features)
    offset: int             # ABSOLUTE byte offset of the data in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return type_name(self.ggml_type)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class SkippedArray:
    """A metadata array the reader did not read (too many elements): its type and length only. Any use of the value
    is an error (`require` raises FormatError naming the key)."""

    def __init__(self, etype: int, count: int):
        self.etype, self.count = etype, count

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"<array of {self.count} {VALUE_TYPE_NAMES.get(self.etype, self.etype)} not read: too large>"

    def require(self, key: str):
        raise FormatError(f"metadata {key}: an array of {self.count} elements is larger than this reader accepts "
                          f"({MAX_EAGER_ARRAY})")


class _Cursor:
    """Bounded little-endian reads from a file: never reads (or allocates) past the file's end. Reads go through a
    window of up to WINDOW bytes (a header of 100k strings is parsed from memory, not with 200k file reads)."""

    WINDOW = 1 << 20

    def __init__(self, f, size: int):
        self.f = f
        self.size = size
        self.pos = 0                         # logical position in the file
        self.buf = b""                       # file bytes [self.base, self.base + len(self.buf))
        self.base = 0
        self.budget = MAX_META_ELEMENTS      # metadata array elements still allowed to become Python values
        self.nested = MAX_NESTED_ARRAYS

    def _short(self, n: int, what: str):
        return FormatError(f"truncated GGUF: {what} needs {n} bytes at offset {self.pos}, file has {self.size}")

    def skip(self, n: int, what: str) -> None:
        if n < 0 or n > self.size - self.pos:
            raise self._short(n, what)
        self.pos += n

    def spend(self, n: int, what: str) -> None:
        if n > self.budget:
            raise FormatError(f"{what}: {n} more metadata array elements than this reader accepts "
                              f"({MAX_META_ELEMENTS} in all)")
        self.budget -= n

    def read(self, n: int, what: str) -> bytes:
        if n < 0 or n > self.size - self.pos:
            raise self._short(n, what)
        off = self.pos - self.base
        if off < 0 or off + n > len(self.buf):       # refill: the window from pos (at least n bytes)
            want = min(max(n, self.WINDOW), self.size - self.pos)
            self.f.seek(self.pos)
            self.buf = self.f.read(want)
            self.base = self.pos
            off = 0
            if len(self.buf) < n:
                raise FormatError(f"truncated GGUF while reading {what} at offset {self.pos}")
        self.pos += n
        return self.buf[off: off + n]

    def strings(self, n: int, what: str) -> list:
        """n length-prefixed strings in a row (a vocabulary): parsed from the window in one loop."""
        out = []
        append = out.append
        buf, base = self.buf, self.base
        off = self.pos - base
        for i in range(n):
            if off < 0 or off + 8 > len(buf):
                self.pos = base + off
                self.read(8, f"{what}[{i}] length")             # refills (or raises on truncation)
                self.pos -= 8
                buf, base = self.buf, self.base
                off = self.pos - base
            ln = int.from_bytes(buf[off: off + 8], "little")
            if ln > MAX_STRING:
                self.pos = base + off
                raise FormatError(f"{what}[{i}]: string length {ln} is absurd (limit {MAX_STRING})")
            if off + 8 + ln > len(buf):
                self.pos = base + off
                self.read(8 + ln, f"{what}[{i}]")
                self.pos -= 8 + ln
                buf, base = self.buf, self.base
                off = self.pos - base
            b = buf[off + 8: off + 8 + ln]
            off += 8 + ln
            try:
                append(b.decode("utf-8"))
            except UnicodeDecodeError:
                append(b.decode("utf-8", errors="surrogateescape"))
        self.pos = base + off
        return out

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.read(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.read(8, what))[0]

    def string(self, what: str) -> str:
        n = self.u64(what + " length")
        if n > MAX_STRING:
            raise FormatError(f"{what}: string length {n} is absurd (limit {MAX_STRING})")
        b = self.read(n, what)
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return b.decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALAR:
            dt = np.dtype(_SCALAR[vtype])
            v = np.frombuffer(self.read(dt.itemsize, what), dtype=dt)[0]
            return bool(v) if vtype == T_BOOL else v.item()
        if vtype == T_STRING:
            return self.string(what)
        if vtype == T_ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise FormatError(f"{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
            etype = self.u32(what + " element type")
            n = self.u64(what + " array length")
            remaining = self.size - self.pos
            if etype in _SCALAR:
                dt = np.dtype(_SCALAR[etype])
                if n > remaining // dt.itemsize:
                    raise FormatError(f"{what}: array of {n} {VALUE_TYPE_NAMES[etype]} exceeds the file")
                if n > MAX_EAGER_ARRAY or n > self.budget:
                    self.skip(n * dt.itemsize, what)          # not read: a SkippedArray (an error if used)
                    return SkippedArray(etype, n)
                self.spend(n, what)
                arr = np.frombuffer(self.read(n * dt.itemsize, what), dtype=dt)
                out = arr.tolist()
                return [bool(x) for x in out] if etype == T_BOOL else out
            if etype == T_STRING:
                if n > remaining // 8:
                    raise FormatError(f"{what}: array of {n} strings exceeds the file")
                self.spend(n, what)
                return self.strings(n, what)
            if etype == T_ARRAY:
                if n > remaining // 12:
                    raise FormatError(f"{what}: array of {n} arrays exceeds the file")
                if n > self.nested:
                    raise FormatError(f"{what}: {n} nested arrays, more than this reader accepts "
                                      f"({MAX_NESTED_ARRAYS} in all)")
                self.nested -= n
                self.spend(n, what)
                return [self.value(T_ARRAY, f"{what}[{i}]", depth + 1) for i in range(n)]
            raise FormatError(f"{what}: unknown array element type {etype}")
        raise FormatError(f"{what}: unknown metadata value type {vtype}")


class GGUFFile:
    """A parsed GGUF header; tensor data is read on demand.

    .version, .metadata (dict key -> python value), .value_types (key -> GGUF value type id),
    .tensors (dict name -> TensorInfo, file order), .alignment, .data_offset, .file_size.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            self.file_size = os.path.getsize(self.path)
            f = open(self.path, "rb")
        except OSError as e:
            raise FormatError(f"cannot open GGUF file {self.path!r}: {e}") from e
        with f:
            self._parse(_Cursor(f, self.file_size))

    def _parse(self, c: _Cursor) -> None:
        magic = c.read(4, "magic") if c.size >= 4 else b""
        if magic != GGUF_MAGIC:
            raise FormatError(f"not a GGUF file (magic {magic!r}, expected b'GGUF'): {self.path}")
        self.version = c.u32("version")
        if self.version not in (2, 3):
            raise FormatError(f"unsupported GGUF version {self.version} (supported: 2, 3)")
        n_tensors = c.u64("tensor count")
        n_kv = c.u64("metadata count")
        # every KV needs >= 13 bytes (8 key length + 1 key byte + 4 type) and every tensor info >= 24
        if n_tensors > MAX_TENSORS or n_tensors * 24 > c.size:
            raise FormatError(f"absurd tensor count {n_tensors} for a {c.size}-byte file")
        if n_kv > MAX_KV or n_kv * 13 > c.size:
            raise FormatError(f"absurd metadata count {n_kv} for a {c.size}-byte file")
        self.metadata: dict[str, Any] = {}
        self.value_types: dict[str, int] = {}
        for i in range(n_kv):
            key = c.string(f"metadata key #{i}")
            vtype = c.u32(f"type of {key!r}")
            if key in self.metadata:
                raise FormatError(f"duplicate metadata key {key!r}")
            self.metadata[key] = c.value(vtype, key)
            self.value_types[key] = vtype
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or isinstance(align, bool) or align <= 0 or align & (align - 1) \
                or align > (1 << 20):
            raise FormatError(f"general.alignment {align!r} must be a power of two <= 2**20")
        self.alignment = align
        infos = []
        for i in range(n_tensors):
            name = c.string(f"tensor #{i} name")
            n_dims = c.u32(f"n_dims of {name!r}")
            if n_dims > MAX_DIMS:
                raise FormatError(f"tensor {name!r} has {n_dims} dims (at most {MAX_DIMS})")
            dims = [c.u64(f"dim of {name!r}") for _ in range(n_dims)]
            n_el = 1
            for d in dims:
                if d > MAX_ELEMENTS:
                    raise FormatError(f"tensor {name!r} has an absurd dimension {d}")
                n_el *= d
            if n_el > MAX_ELEMENTS:
                raise FormatError(f"tensor {name!r} has an absurd element count {n_el}")
            if n_el == 0:
                raise FormatError(f"tensor {name!r} has no elements (shape {dims})")
            tid = c.u32(f"type of {name!r}")
            if tid not in GGML_TYPES:
                raise FormatError(f"tensor {name!r} has unknown ggml type id {tid}")
            rel = c.u64(f"offset of {name!r}")
            nbytes = tensor_nbytes(tid, n_el, dims[0] if dims else 1)
            infos.append((name, tid, tuple(int(d) for d in reversed(dims)), rel, nbytes))
        self.data_offset = (c.pos + align - 1) // align * align
        self.tensors: dict[str, TensorInfo] = {}
        data_size = self.file_size - self.data_offset
        for name, tid, shape, rel, nbytes in infos:
            if name in self.tensors:
                raise FormatError(f"duplicate tensor name {name!r}")
            if rel % align:
                raise FormatError(f"tensor {name!r} offset {rel} is not aligned to {align}")
            if rel > data_size or nbytes > data_size - rel:
                raise FormatError(f"tensor {name!r} data [{rel}, {rel + nbytes}) lies outside the data section "
                                  f"({max(data_size, 0)} bytes): truncated or corrupt file")
            self.tensors[name] = TensorInfo(name, tid, shape, self.data_offset + rel, nbytes)
        # two tensors sharing bytes: one of them reads the other's data (a crafted file)
        check_no_overlap([(t.name, t.offset, t.nbytes) for t in self.tensors.values()], "tensors")

    # -- tensor data --------------------------------------------------------------------------------------------
    def info(self, name: str) -> TensorInfo:
        if name not in self.tensors:
            raise FormatError(f"tensor {name!r} not in {self.path}")
        return self.tensors[name]

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as stored: (nbytes,) uint8."""
        t = self.info(name)
        buf = np.empty(t.nbytes, dtype=np.uint8)   # (nbytes,) size checked against the file at parse time
        with open(self.path, "rb") as f:
            f.seek(t.offset)
            got = f.readinto(memoryview(buf))
        if got != t.nbytes:
            raise FormatError(f"tensor {name!r}: file changed or truncated while reading")
        return buf

    def tensor(self, name: str, unpermute: bool = True) -> np.ndarray:
        """Dequantised float32 array in numpy shape; llama attn_q/attn_k rows back in HF order when `unpermute`."""
        t = self.info(name)
        if t.type_name not in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"):
            raise FormatError(f"tensor {name!r} has ggml type {t.type_name}, which is not supported "
                              "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)")
        arr = dequantize(self.raw(name), t.type_name, t.n_elements).reshape(t.shape)
        if unpermute and self.metadata.get("general.architecture") == "llama":
            m = _QK_RE.match(name)
            if m:
                n_heads = _pos_int(self.metadata, "llama.attention.head_count")
                n_kv = _pos_int(self.metadata, "llama.attention.head_count_kv", n_heads)
                arr = unpermute_qk(arr, n_heads if m.group(1) == "q" else n_kv)
        return arr

    def config(self) -> ModelConfig:
        """The model's config, after checking that the file holds exactly the tensors such a model is made of
        (formats.layout: shapes, types, no tensor the reader would ignore, no layer beyond block_count)."""
        cfg = config_from_gguf(self.metadata, {n: t.shape for n, t in self.tensors.items()})
        check_llama_tensors(cfg, {n: (t.shape, t.type_name) for n, t in self.tensors.items()}, "the GGUF file")
        return cfg

    def load_weights(self) -> dict[str, np.ndarray]:
        """All tensors, dequantised to float32 (C-contiguous), Q/K in HF order. Names are GGUF names."""
        return {name: np.ascontiguousarray(self.tensor(name)) for name in self.tensors}

    def lazy_weights(self) -> "LazyWeights":
        """A read-only mapping that dequantises each tensor when it is looked up (keeps peak memory to one tensor
        beyond what the consumer keeps)."""
        return LazyWeights(self)

    def describe(self) -> dict:
        """JSON-able description so a JS engine can stream raw tensor bytes without parsing GGUF itself.

        tensors: name, ggml_type (name), shape (numpy order), offset (absolute), nbytes, qk_permuted (rows in
        llama.cpp's permuted order: the consumer must apply the HF un-permute or use interleaved-pair RoPE).
        """
        # scalars only, JSON-safe (no NaN/Inf: JSON.parse refuses them), no long strings
        md = {k: v for k, v in self.metadata.items() if isinstance(v, (bool, int, str)) and
              not (isinstance(v, str) and len(v) > 4096) or isinstance(v, float) and math.isfinite(v)}
        try:
            cfg = self.config().to_json()
        except FormatError:
            cfg = None
        arch = self.metadata.get("general.architecture")
        return {
            "format": "gguf", "version": self.version, "alignment": self.alignment, "data_offset": self.data_offset,
            "file_size": self.file_size, "config": cfg,
            "tensors": [{"name": t.name, "ggml_type": t.type_name, "shape": list(t.shape), "offset": t.offset,
                         "nbytes": t.nbytes, "qk_permuted": bool(arch == "llama" and _QK_RE.match(t.name))}
                        for t in self.tensors.values()],
            "metadata": md,
        }


class LazyWeights(Mapping):
    """name -> float32 array (HF order), dequantised on each lookup; nothing cached."""

    def __init__(self, g: GGUFFile):
        self._g = g

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._g.tensors:
            raise KeyError(name)
        return np.ascontiguousarray(self._g.tensor(name))

    def __iter__(self):
        return iter(self._g.tensors)

    def __len__(self) -> int:
        return len(self._g.tensors)

    def __contains__(self, name) -> bool:
        return name in self._g.tensors


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp convert's permute: (n_head*head_dim, in) rows -> HF order."""
    out = w.shape[0]
    if n_head <= 0 or out % (2 * n_head):
        raise FormatError(f"cannot un-permute {w.shape} rows over {n_head} heads")
    return np.ascontiguousarray(
        w.reshape(n_head, out // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert's permute: HF rows -> interleaved-pair order stored in GGUF."""
    out = w.shape[0]
    if n_head <= 0 or out % (2 * n_head):
        raise FormatError(f"cannot permute {w.shape} rows over {n_head} heads")
    return np.ascontiguousarray(
        w.reshape(n_head, 2, out // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _pos_int(md: Mapping, key: str, default=None) -> int:
    v = md.get(key, default)
    if v is None:
        raise FormatError(f"GGUF metadata lacks {key}")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > (1 << 31):
        raise FormatError(f"GGUF metadata {key} = {v!r} is not a sensible positive integer")
    return int(v)


def _float(md: Mapping, key: str, default: float) -> float:
    v = md.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FormatError(f"GGUF metadata {key} = {v!r} is not a number")
    # FLOAT32 metadata: shortest decimal that round-trips in float32 (1e-05, not 9.999999747378752e-06)
    with np.errstate(over="ignore"):
        return float(str(np.float32(v)))


def config_from_gguf(metadata: Mapping, tensor_shapes: Mapping[str, tuple]) -> ModelConfig:
    """ModelConfig from llama-arch GGUF metadata; vocab from token_embd's shape, tied when there is no output.weight."""
    arch = metadata.get("general.architecture")
    if arch != "llama":
        raise FormatError(f"unsupported architecture {arch!r} (supported: 'llama')")
    p = "llama."
    dim = _pos_int(metadata, p + "embedding_length")
    n_heads = _pos_int(metadata, p + "attention.head_count")
    n_kv = _pos_int(metadata, p + "attention.head_count_kv", n_heads)
    if dim % n_heads or n_heads % n_kv:
        raise FormatError(f"inconsistent heads: dim {dim}, n_heads {n_heads}, n_kv_heads {n_kv}")
    head_dim = _pos_int(metadata, p + "attention.key_length", dim // n_heads)
    rope_dim = _pos_int(metadata, p + "rope.dimension_count", head_dim)
    if rope_dim > head_dim or rope_dim % 2:
        raise FormatError(f"rope.dimension_count {rope_dim} must be even and <= head_dim {head_dim}")
    if "token_embd.weight" not in tensor_shapes:
        raise FormatError("GGUF has no token_embd.weight")
    emb = tensor_shapes["token_embd.weight"]
    if len(emb) != 2 or emb[1] != dim:
        raise FormatError(f"token_embd.weight shape {emb} does not match embedding_length {dim}")
    theta = _float(metadata, p + "rope.freq_base", 10000.0)
    eps = _float(metadata, p + "attention.layer_norm_rms_epsilon", 1e-5)
    if not (math.isfinite(theta) and theta > 0 and math.isfinite(eps) and 0 < eps < 1):
        raise FormatError(f"bad rope.freq_base {theta} or rms epsilon {eps}: both must be finite, theta > 0 and "
                          "0 < epsilon < 1")
    return ModelConfig(
        dim=dim, hidden_dim=_pos_int(metadata, p + "feed_forward_length"),
        n_layers=_pos_int(metadata, p + "block_count"), n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
        vocab_size=int(emb[0]), seq_len=_pos_int(metadata, p + "context_length"), rope_theta=theta,
        rope_dim=rope_dim, norm_eps=eps, tied_embeddings="output.weight" not in tensor_shapes, arch="llama")


def gguf_metadata_for_config(config: ModelConfig, name: str = "exactspec-micro") -> dict:
    """The llama.* keys (with llama.cpp's value types) describing `config`."""
    p = "llama."
    return {
        "general.architecture": "llama",
        "general.name": name,
        p + "context_length": GGUFValue(T_UINT32, config.seq_len),
        p + "embedding_length": GGUFValue(T_UINT32, config.dim),
        p + "block_count": GGUFValue(T_UINT32, config.n_layers),
        p + "feed_forward_length": GGUFValue(T_UINT32, config.hidden_dim),
        p + "attention.head_count": GGUFValue(T_UINT32, config.n_heads),
        p + "attention.head_count_kv": GGUFValue(T_UINT32, config.n_kv_heads),
        p + "attention.key_length": GGUFValue(T_UINT32, config.head_dim),
        p + "attention.value_length": GGUFValue(T_UINT32, config.head_dim),
        p + "rope.dimension_count": GGUFValue(T_UINT32, config.rope_dim or config.head_dim),
        p + "rope.freq_base": GGUFValue(T_FLOAT32, config.rope_theta),
        p + "attention.layer_norm_rms_epsilon": GGUFValue(T_FLOAT32, config.norm_eps),
        p + "vocab_size": GGUFValue(T_UINT32, config.vocab_size),
    }


# -- writer ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GGUFValue:
    """A metadata value with an explicit GGUF value type (for arrays: the ELEMENT type)."""
    vtype: int
    value: Any
    array: bool = False


def _infer(v: Any) -> GGUFValue:
    if isinstance(v, GGUFValue):
        return v
    if isinstance(v, bool):
        return GGUFValue(T_BOOL, v)
    if isinstance(v, int):
        return GGUFValue(T_UINT32 if 0 <= v < (1 << 32) else T_INT64, v)
    if isinstance(v, float):
        return GGUFValue(T_FLOAT32, v)
    if isinstance(v, str):
        return GGUFValue(T_STRING, v)
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, str) for x in v):
            return GGUFValue(T_STRING, list(v), array=True)
        if all(isinstance(x, bool) for x in v) and v:
            return GGUFValue(T_BOOL, list(v), array=True)
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return GGUFValue(T_INT32, list(v), array=True)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            return GGUFValue(T_FLOAT32, [float(x) for x in v], array=True)
    raise FormatError(f"cannot infer a GGUF type for {type(v).__name__} value {str(v)[:60]!r}")


def _enc_str(s: str) -> bytes:
    b = s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _enc_value(gv: GGUFValue) -> bytes:
    if gv.array:
        if gv.vtype == T_STRING:
            body = b"".join(_enc_str(s) for s in gv.value)
        elif gv.vtype in _SCALAR:
            body = np.asarray(gv.value, dtype=_SCALAR[gv.vtype]).tobytes()
        else:
            raise FormatError(f"cannot write arrays of GGUF type {gv.vtype}")
        return struct.pack("<IIQ", T_ARRAY, gv.vtype, len(gv.value)) + body
    if gv.vtype == T_STRING:
        return struct.pack("<I", T_STRING) + _enc_str(gv.value)
    if gv.vtype in _SCALAR:
        return struct.pack("<I", gv.vtype) + np.asarray(gv.value, dtype=_SCALAR[gv.vtype]).tobytes()
    raise FormatError(f"cannot write GGUF value type {gv.vtype}")


def write_gguf(path: str | os.PathLike, metadata: Mapping[str, Any],
               tensors: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray, str]],
               tensor_type: str = "F32", types: Mapping[str, str] | None = None,
               permute_qk_rows: bool = True, alignment: int = DEFAULT_ALIGNMENT) -> None:
    """Write a GGUF v3 file.

    metadata: key -> python value (int -> UINT32, float -> FLOAT32, str, bool, lists) or GGUFValue for exact types.
    tensors: name -> float array in numpy/HF order (e.g. (out, in)), written as `types.get(name, tensor_type)`;
    1-D tensors (norms) are always written F32, as llama.cpp does. For llama arch and `permute_qk_rows`,
    blk.N.attn_q/attn_k rows are permuted into llama.cpp's order (what the reader un-permutes).
    """
    types = dict(types or {})
    items = list(tensors.items()) if isinstance(tensors, Mapping) else [(n, a) for n, a, *_ in tensors]
    md = dict(metadata)
    if alignment != DEFAULT_ALIGNMENT:
        md["general.alignment"] = GGUFValue(T_UINT32, alignment)
    arch = md.get("general.architecture")
    arch = arch.value if isinstance(arch, GGUFValue) else arch

    def _md_int(key):
        v = md.get(key)
        return int(v.value if isinstance(v, GGUFValue) else v)

    header = bytearray(GGUF_MAGIC + struct.pack("<IQQ", 3, len(items), len(md)))
    for k, v in md.items():
        header += _enc_str(k) + _enc_value(_infer(v))
    blobs = []
    offset = 0
    for name, arr in items:
        arr = np.asarray(arr, dtype=np.float32)
        if arr.ndim == 0 or arr.ndim > MAX_DIMS:
            raise FormatError(f"tensor {name!r}: cannot write {arr.ndim}-d arrays")
        tname = "F32" if arr.ndim == 1 else types.get(name, tensor_type)
        if tname not in WRITABLE_TYPES:
            raise FormatError(f"cannot write ggml type {tname}")
        m = _QK_RE.match(name)
        if arch == "llama" and m and permute_qk_rows:
            n_head = _md_int("llama.attention.head_count")
            if m.group(1) == "k":
                kv = md.get("llama.attention.head_count_kv")
                n_head = n_head if kv is None else _md_int("llama.attention.head_count_kv")
            arr = permute_qk(arr, n_head)
        data = quantize(arr, tname)
        header += _enc_str(name) + struct.pack("<I", arr.ndim)
        header += struct.pack(f"<{arr.ndim}Q", *reversed(arr.shape))
        header += struct.pack("<IQ", type_id(tname), offset)
        blobs.append((offset, data))
        offset = (offset + len(data) + alignment - 1) // alignment * alignment
    pad = (-len(header)) % alignment
    with open(path, "wb") as f:
        f.write(bytes(header) + b"\x00" * pad)
        pos = 0
        for off, data in blobs:
            if off > pos:
                f.write(b"\x00" * (off - pos))
            f.write(data.tobytes())
            pos = off + len(data)
        if offset > pos:
            f.write(b"\x00" * (offset - pos))
