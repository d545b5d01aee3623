"""What a llama model file must hold, checked before anything runs: every tensor the reader would use, with the shape
and a type it can read, and nothing else (a tensor the reader would silently ignore — a bias, rope_freqs, an extra
layer — changes the model, so the file is refused instead); byte ranges that never overlap; JSON read with bounded
nesting. Shared by the GGUF and safetensors readers; every problem is a `FormatError`.
"""
from __future__ import annotations

import json
import math
import re
from typing import Mapping

from .quant import FormatError

# the float types a norm may be stored in (llama.cpp writes norms F32); matrices may also be quantised
NORM_TYPES = ("F32", "F16", "BF16")
MATRIX_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")
_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")
LAYER_TENSORS = ("attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                 "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
MAX_JSON_DEPTH = 64


def expected_tensors(cfg) -> dict[str, tuple[tuple, tuple]]:
    """name -> (numpy shape, allowed types) of every tensor a llama model of `cfg` is made of (output.weight only
    when untied)."""
    c = cfg
    qd, kd = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    out = {"token_embd.weight": ((c.vocab_size, c.dim), MATRIX_TYPES),
           "output_norm.weight": ((c.dim,), NORM_TYPES)}
    if not c.tied_embeddings:
        out["output.weight"] = ((c.vocab_size, c.dim), MATRIX_TYPES)
    shapes = {"attn_norm.weight": ((c.dim,), NORM_TYPES), "attn_q.weight": ((qd, c.dim), MATRIX_TYPES),
              "attn_k.weight": ((kd, c.dim), MATRIX_TYPES), "attn_v.weight": ((kd, c.dim), MATRIX_TYPES),
              "attn_output.weight": ((c.dim, qd), MATRIX_TYPES), "ffn_norm.weight": ((c.dim,), NORM_TYPES),
              "ffn_gate.weight": ((c.hidden_dim, c.dim), MATRIX_TYPES),
              "ffn_up.weight": ((c.hidden_dim, c.dim), MATRIX_TYPES),
              "ffn_down.weight": ((c.dim, c.hidden_dim), MATRIX_TYPES)}
    for i in range(c.n_layers):
        for k, v in shapes.items():
            out[f"blk.{i}.{k}"] = v
    return out


def check_llama_tensors(cfg, tensors: Mapping[str, tuple], what: str = "the file",
                        name_of=lambda n: n) -> None:
    """tensors: GGUF name -> (numpy shape, type name) of every tensor the file holds. Refuses (FormatError) a file
    that lacks a tensor, holds one of another shape or a type the reader cannot use, or holds one the reader would
    ignore. name_of(gguf_name) spells a name as the file does (Hugging Face names for safetensors)."""
    n_layers = cfg.n_layers
    # a layer is 9 tensors: more layers than tensors is refused before the expected table is built (no loop over
    # 2**31 declared layers)
    if n_layers > len(tensors):
        layers = {int(m.group(1)) for m in map(_LAYER.match, tensors) if m}
        raise FormatError(f"{what} declares {n_layers} layers but holds tensors for {len(layers)} "
                          f"({len(tensors)} tensors in all)")
    want = expected_tensors(cfg)
    for name in tensors:
        if name in want:
            continue
        m = _LAYER.match(name)
        if m and int(m.group(1)) >= n_layers and m.group(2) in LAYER_TENSORS:
            raise FormatError(f"{what} holds layer {int(m.group(1))} ({name_of(name)}) but declares only {n_layers} "
                              "layers: refusing to run fewer layers than the file has")
        if name == "output.weight" and cfg.tied_embeddings:
            continue          # (callers drop a tied model's output.weight before this check)
        raise FormatError(f"{what} holds tensor {name_of(name)!r}, which a llama model of this reader does not use "
                          "(biases, rope frequency tables, extra heads are not supported): refusing it rather than "
                          "running a different model")
    for name, (shape, types) in want.items():
        if name not in tensors:
            raise FormatError(f"{what} lacks tensor {name_of(name)!r}")
        got_shape, got_type = tensors[name]
        if tuple(got_shape) != tuple(shape):
            raise FormatError(f"tensor {name_of(name)!r} has shape {tuple(got_shape)}, the config implies {shape}")
        if got_type not in types:
            kind = "a norm" if types is NORM_TYPES else "a weight matrix"
            raise FormatError(f"tensor {name_of(name)!r} is {kind} stored as {got_type}; this reader takes "
                              f"{', '.join(types)} there")


def check_no_overlap(ranges, what: str = "tensors") -> None:
    """ranges: (name, start, nbytes) in any order; refuses two that share a byte."""
    prev = None
    for name, start, n in sorted(ranges, key=lambda r: (r[1], r[2])):
        if prev is not None and start < prev[1] + prev[2]:
            raise FormatError(f"{what} {prev[0]!r} [{prev[1]}, {prev[1] + prev[2]}) and {name!r} [{start}, "
                              f"{start + n}) overlap: a corrupt or crafted file")
        if prev is None or start + n > prev[1] + prev[2]:
            prev = (name, start, n)


def _depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when no JSON array/object in `text` nests deeper than `limit` (strings skipped)."""
    depth = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def load_json(data: bytes | str, what: str, error=FormatError):
    """Parse JSON from untrusted bytes: invalid UTF-8, invalid JSON, nesting deeper than MAX_JSON_DEPTH, numbers
    Python refuses (ints of thousands of digits) all raise `error` naming `what`."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else str(data)
    except UnicodeDecodeError as e:
        raise error(f"{what} is not UTF-8 text: {e}") from None
    # deep nesting: json.loads recurses (RecursionError); look before parsing only when it could matter
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and not _depth_ok(text):
        raise error(f"{what} nests arrays/objects deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except RecursionError:
        raise error(f"{what} nests too deeply") from None
    except ValueError as e:       # JSONDecodeError, and int strings past Python's digit limit
        raise error(f"{what} is not valid JSON: {e}") from None


def json_number(cfg: Mapping, key: str, default, *, low=None, high=None, low_open=False, what="config.json"):
    """A float field of a JSON config: absent or null -> default; else a finite JSON number within the bounds."""
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FormatError(f"{what} {key} = {v!r} must be a number")
    try:
        x = float(v)
    except OverflowError:
        raise FormatError(f"{what} {key} = {v!r} is out of range") from None
    if not math.isfinite(x) or (low is not None and (x < low or (low_open and x == low))) or \
            (high is not None and x > high):
        bounds = f"{'>' if low_open else '>='} {low}" + (f" and <= {high}" if high is not None else "")
        raise FormatError(f"{what} {key} = {v!r} must be a finite number {bounds}")
    return x


def _nonfinite(raw, type_name: str) -> bool:
    """True when the stored bytes of a tensor (uint8 array, whole blocks / elements) dequantise to a NaN or an Inf:
    the float elements, or the f16 scales of quantised blocks (their integer parts are always finite)."""
    import numpy as np
    if type_name == "F32":
        u = raw.view("<u4")
        return bool(np.any((u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)))
    if type_name in ("F16", "BF16"):
        u = raw.view("<u2")
        mask = np.uint16(0x7C00) if type_name == "F16" else np.uint16(0x7F80)
        return bool(np.any((u & mask) == mask))
    per = {"Q8_0": (34, (0,)), "Q4_0": (18, (0,)), "Q4_1": (20, (0, 2))}.get(type_name)
    if per is None:
        return False
    size, scales = per
    blocks = raw.reshape(-1, size)
    m = np.uint16(0x7C00)
    for s in scales:
        u = blocks[:, s:s + 2].view("<u2")          # (n_blocks, 1) the f16 scale, a strided view
        if np.any((u & m) == m):
            return True
    return False


def check_finite(path: str, tensors, chunk: int = 8 << 20) -> None:
    """tensors: (name, type name, absolute offset, nbytes) in one file. Refuses (FormatError) a file with a weight that
    would be NaN or Inf, reading it in pieces of about `chunk` bytes (whole blocks) without dequantising."""
    import numpy as np
    block = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20, "F32": 4, "F16": 2, "BF16": 2}
    with open(path, "rb") as f:
        for name, tname, off, nbytes in tensors:
            b = block.get(tname)
            if b is None:
                continue
            step = max(b, chunk // b * b)
            f.seek(off)
            left = nbytes
            while left > 0:
                n = min(step, left)
                raw = np.frombuffer(f.read(n), dtype=np.uint8)
                if raw.size != n:
                    raise FormatError(f"tensor {name!r}: the file ends inside it")
                if _nonfinite(raw, tname):
                    raise FormatError(f"tensor {name!r} holds non-finite values (NaN or Inf): a damaged or crafted "
                                      "file")
                left -= n
