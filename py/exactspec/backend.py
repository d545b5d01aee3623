"""The backend protocol: what the decode loop needs from a model (champion or draft).

Implemented by `exactspec.reference.ReferenceModel` (numpy, CPython and Pyodide) and by the WebGPU engine
through `exactspec.bridge`. Python owns every token decision; a backend only computes logits and keeps a KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class ModelConfig:
    """Llama-family dimensions. One spelling everywhere (Python, JS, WGSL)."""

    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    seq_len: int            # context length
    rope_theta: float = 10000.0
    rope_dim: int = 0       # rotary dims per head; 0 means head_dim
    norm_eps: float = 1e-5
    tied_embeddings: bool = True
    arch: str = "llama"

    def to_json(self) -> dict:
        return asdict(self)


class Backend(Protocol):
    """A model with a KV cache whose logical length is `length`.

    forward(tokens, start_pos, n_out): tokens (n,) are placed at positions start_pos..start_pos+n-1.
    start_pos must equal `length` (append-only); afterwards length == start_pos + n.
    Returns logits float32 (n_out, vocab_size): the rows of the LAST n_out positions (default all n).
    For coupled/greedy exactness a backend must be batch-invariant: the row for a position is bitwise the same
    whatever n and start_pos split the tokens.
    truncate(n): O(1) rollback of the logical KV length to n <= length (no zeroing).
    """

    config: ModelConfig

    @property
    def length(self) -> int: ...

    def forward(self, tokens: Sequence[int], start_pos: int, n_out: int | None = None) -> np.ndarray: ...

    def truncate(self, n: int) -> None: ...
