"""ggml tensor types: block layouts, vectorised numpy dequantisers and quantisers.

Block layouts are llama.cpp's (ggml-common.h), little-endian:
  Q8_0: 32 elements in 34 bytes  = f16 d, int8 qs[32];            x = qs * d
  Q4_0: 32 elements in 18 bytes  = f16 d, uint8 qs[16];           x = (nibble - 8) * d
  Q4_1: 32 elements in 20 bytes  = f16 d, f16 m, uint8 qs[16];    x = nibble * d + m
  (nibbles: the low nibble of qs[j] is element j, the high nibble is element j + 16)
Quantisers follow llama.cpp's reference `quantize_row_*_ref` (and PyPI gguf's bit-exact copies of them).
No module globals beyond constants.
"""
from __future__ import annotations

import numpy as np



class FormatError(ValueError):
    """A model file is malformed, hostile or unsupported. Raised before any large allocation."""

# id -> (name, elements per block, bytes per block). Every ggml type known to llama.cpp's GGUF,
# so that sizes of tensors we cannot dequantise can still be bounds-checked and named in errors.
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
GGML_TYPE_IDS = {name: tid for tid, (name, _, _) in GGML_TYPES.items()}
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")   # dequantisable here
WRITABLE_TYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")            # quantisable here


def type_name(type_id: int) -> str:
    if type_id not in GGML_TYPES:
        raise FormatError(f"unknown ggml type id {type_id}")
    return GGML_TYPES[type_id][0]


def type_id(name: str) -> int:
    if name not in GGML_TYPE_IDS:
        raise FormatError(f"unknown ggml type name {name!r}")
    return GGML_TYPE_IDS[name]


def tensor_nbytes(type_id_: int, n_elements: int, row_len: int) -> int:
    """Bytes of a tensor of `n_elements` whose innermost (ggml ne[0]) length is `row_len`."""
    name, block, size = GGML_TYPES[type_id_]
    if row_len % block != 0:
        raise FormatError(f"{name} tensor row length {row_len} is not a multiple of the block size {block}")
    return n_elements // block * size


def dequantize(raw: np.ndarray, type_name_: str, n_elements: int) -> np.ndarray:
    """raw (nbytes,) uint8 -> (n_elements,) float32. Corrupt scales (inf/NaN halves) give non-finite values without
    warnings; consumers that need finite weights check (ReferenceModel does)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _dequantize(raw, type_name_, n_elements)


def _dequantize(raw: np.ndarray, type_name_: str, n_elements: int) -> np.ndarray:
    raw = np.ascontiguousarray(raw, dtype=np.uint8)   # (nbytes,)
    if type_name_ not in SUPPORTED_TYPES:
        raise FormatError(f"ggml type {type_name_} is not supported (supported: {', '.join(SUPPORTED_TYPES)})")
    if type_name_ == "F32":
        return raw.view("<f4").astype(np.float32, copy=False)[:n_elements]
    if type_name_ == "F16":
        return raw.view("<f2")[:n_elements].astype(np.float32)
    if type_name_ == "BF16":
        u16 = raw.view("<u2")[:n_elements]                      # (n,)
        return (u16.astype(np.uint32) << np.uint32(16)).view(np.float32)
    tid = GGML_TYPE_IDS[type_name_]
    _, block, size = GGML_TYPES[tid]
    nb = n_elements // block
    blocks = raw[: nb * size].reshape(nb, size)                 # (n_blocks, bytes per block)
    if type_name_ == "Q8_0":
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)          # (nb, 1)
        qs = blocks[:, 2:].view(np.int8).astype(np.float32)               # (nb, 32)
        return (qs * d).reshape(-1)
    if type_name_ == "Q4_0":
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)          # (nb, 1)
        qs = blocks[:, 2:18]                                              # (nb, 16)
        q = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1)  # (nb, 32)
        return (d * (q.astype(np.int8) - np.int8(8)).astype(np.float32)).reshape(-1)
    # Q4_1
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)              # (nb, 1)
    m = blocks[:, 2:4].copy().view("<f2").astype(np.float32)              # (nb, 1)
    qs = blocks[:, 4:20]                                                  # (nb, 16)
    q = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1).astype(np.float32)  # (nb, 32)
    return ((d * q) + m).reshape(-1)


def _roundf(x: np.ndarray) -> np.ndarray:
    """C roundf: halves away from zero (np.round rounds halves to even)."""
    a = np.abs(x)
    fl = np.floor(a)
    return np.sign(x) * (fl + np.floor(2 * (a - fl)))


def quantize(values: np.ndarray, type_name_: str) -> np.ndarray:
    """values (..., row_len) float -> (nbytes,) uint8 in ggml's layout (row-major, rows along the last axis)."""
    x = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)    # (n,)
    if type_name_ not in WRITABLE_TYPES:
        raise FormatError(f"cannot write ggml type {type_name_} (writable: {', '.join(WRITABLE_TYPES)})")
    if not np.all(np.isfinite(x)):
        raise FormatError("cannot quantise non-finite values")
    if type_name_ == "F32":
        return x.astype("<f4").view(np.uint8).copy()
    if type_name_ == "F16":
        return x.astype("<f2").view(np.uint8).copy()
    row_len = values.shape[-1] if np.ndim(values) else 1
    if row_len % 32 != 0:
        raise FormatError(f"{type_name_} needs rows that are a multiple of 32 long, got {row_len}")
    blocks = x.reshape(-1, 32)                                         # (nb, 32)
    nb = blocks.shape[0]
    if type_name_ == "Q8_0":
        d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)   # (nb, 1)
        with np.errstate(divide="ignore"):
            inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
        qs = _roundf(blocks * inv).astype(np.int8).view(np.uint8)         # (nb, 32)
        return np.concatenate([d.astype("<f2").view(np.uint8), qs], axis=1).reshape(-1)
    if type_name_ == "Q4_0":
        imax = np.abs(blocks).argmax(axis=1)[:, None]                    # (nb, 1) first max |x|
        mx = np.take_along_axis(blocks, imax, axis=1)                    # (nb, 1) signed
        d = mx / np.float32(-8)
        with np.errstate(divide="ignore"):
            inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
        q = np.trunc(blocks * inv + np.float32(8.5)).astype(np.float32)
        q = np.clip(q, 0, 15).astype(np.uint8)                          # (nb, 32)
        packed = q[:, :16] | (q[:, 16:] << np.uint8(4))                  # (nb, 16)
        return np.concatenate([d.astype("<f2").view(np.uint8), packed], axis=1).reshape(-1)
    # Q4_1
    mx = blocks.max(axis=1, keepdims=True)                               # (nb, 1)
    mn = blocks.min(axis=1, keepdims=True)                               # (nb, 1)
    d = (mx - mn) / np.float32(15)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np.trunc((blocks - mn) * inv + np.float32(0.5)).astype(np.float32)
    q = np.clip(q, 0, 15).astype(np.uint8)                              # (nb, 32)
    packed = q[:, :16] | (q[:, 16:] << np.uint8(4))                      # (nb, 16)
    assert packed.shape == (nb, 16)
    return np.concatenate([d.astype("<f2").view(np.uint8), mn.astype("<f2").view(np.uint8), packed],
                          axis=1).reshape(-1)
