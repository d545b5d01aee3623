"""Draft -> GGUF (through `exactspec.formats.gguf.write_gguf`) and the provenance manifest. numpy only."""
from __future__ import annotations

import json
from typing import Mapping

import numpy as np

from exactspec.backend import ModelConfig
from exactspec.formats.gguf import GGUFFile, gguf_metadata_for_config

# Tokenizer keys copied from the champion so the draft file carries (and proves) the same vocabulary.
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                  "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                  "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template")


def export_gguf(path, config: ModelConfig, weights: Mapping[str, np.ndarray], champion_gguf, *, name: str,
                tensor_type: str = "Q8_0", extra_metadata: Mapping | None = None,
                tokenizer_metadata: Mapping | None = None) -> None:
    """Write the draft: llama metadata for `config`, the champion's tokenizer keys (or `tokenizer_metadata`, a draft
    with its own tokenizer: Tokenizer.gguf_metadata()), weights in HF Q/K order."""
    from exactspec.formats.gguf import write_gguf
    md = gguf_metadata_for_config(config, name=name)
    md["general.license"] = "apache-2.0"
    if tokenizer_metadata is not None:
        md.update(tokenizer_metadata)
        champ = None
    else:
        champ = GGUFFile(champion_gguf)
        for k in TOKENIZER_KEYS:
            if k in champ.metadata:
                md[k] = champ.metadata[k]
    if champ is not None and champ.metadata.get("tokenizer.ggml.token_type") is not None:
        from exactspec.formats.gguf import GGUFValue, T_INT32
        md["tokenizer.ggml.token_type"] = GGUFValue(T_INT32, list(champ.metadata["tokenizer.ggml.token_type"]),
                                                    array=True)
    for k, v in (extra_metadata or {}).items():
        md[k] = v
    write_gguf(path, md, dict(weights), tensor_type=tensor_type)


def write_manifest(path, manifest: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
