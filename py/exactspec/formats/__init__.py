"""Model file formats: GGUF (read + write) and safetensors (read), all errors as `FormatError`.

`load_model_file(path) -> (ModelConfig, weights)` picks the reader: a .gguf file, or a folder / .safetensors /
config.json of a Hugging Face checkpoint. weights is a mapping (for GGUF a lazy one that dequantises on lookup, so
a consumer that converts tensor by tensor never holds two copies) of float32, C-contiguous arrays under GGUF names
(token_embd.weight, blk.N.attn_q.weight, ..., output_norm.weight, output.weight when untied), in HF order.
"""
from __future__ import annotations

import os

from .quant import FormatError, GGML_TYPES, SUPPORTED_TYPES, WRITABLE_TYPES, dequantize, quantize
from .gguf import (GGUFFile, GGUFValue, TensorInfo, config_from_gguf, gguf_metadata_for_config, permute_qk,
                   unpermute_qk, write_gguf)
from .safetensors import (SafetensorsFile, config_from_hf, describe_safetensors_model, load_safetensors_model,
                          write_safetensors)


def load_model_file(path: str | os.PathLike):
    """(ModelConfig, dict name -> float32 array) from a GGUF file or a safetensors checkpoint."""
    path = os.fspath(path)
    if os.path.isfile(path):
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic == b"GGUF":
            g = GGUFFile(path)
            return g.config(), g.lazy_weights()
        if path.endswith((".safetensors", "config.json")):
            return load_safetensors_model(path)
        raise FormatError(f"{path!r} is neither GGUF (magic {magic!r}) nor safetensors")
    if os.path.isdir(path):
        return load_safetensors_model(path)
    raise FormatError(f"no such model file or folder: {path!r}")


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB pieces (a draft head names its champion by it)."""
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def describe(path: str | os.PathLike) -> dict:
    """JSON-able {config, tensors: [{name, ggml_type, shape, offset, nbytes, qk_permuted, file?}], ...} of a GGUF file
    or a Hugging Face folder (tensors under GGUF names, each with the safetensors `file` it lives in): what the WebGPU
    engine (app/gpu/engine.js) loads."""
    path = os.fspath(path)
    if os.path.isdir(path) or path.endswith((".safetensors", "config.json")):
        return describe_safetensors_model(path)
    return GGUFFile(path).describe()


__all__ = ["FormatError", "GGML_TYPES", "SUPPORTED_TYPES", "WRITABLE_TYPES", "dequantize", "quantize", "GGUFFile",
           "GGUFValue", "TensorInfo", "config_from_gguf", "gguf_metadata_for_config", "permute_qk", "unpermute_qk",
           "write_gguf", "SafetensorsFile", "config_from_hf", "load_safetensors_model", "load_model_file",
           "describe", "describe_safetensors_model", "write_safetensors", "sha256_file"]
