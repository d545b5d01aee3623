"""Toy backends for exhaustive decode tests: logits are a pure function of the whole prefix, so they are batch-
invariant by construction and cheap. They implement exactspec.backend.Backend and check its contract strictly."""
from __future__ import annotations

import zlib

import numpy as np

from exactspec.backend import ModelConfig


def toy_config(vocab_size: int = 100, seq_len: int = 512) -> ModelConfig:
    return ModelConfig(dim=8, hidden_dim=16, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=8,
                       vocab_size=vocab_size, seq_len=seq_len)


def prefix_logits(prefix, vocab: int, seed: int, scale: float) -> np.ndarray:
    key = zlib.crc32(np.asarray(prefix, dtype=np.int64).tobytes(), seed & 0xFFFFFFFF)
    return (np.random.default_rng([seed, key]).standard_normal(vocab) * scale).astype(np.float32)  # (vocab,)


class ToyLM:
    """Next-token logits = f(prefix). `mix_with=(other_seed, w)` blends in another toy's logits (a weaker draft)."""

    def __init__(self, vocab_size=100, seed=0, scale=3.0, seq_len=512, blend=None, fail_at_pass=None):
        self.config = toy_config(vocab_size, seq_len)
        self.seed, self.scale, self.blend = seed, scale, blend
        self.tokens: list[int] = []  # the KV cache: tokens at positions 0..length-1 (entries past length are stale)
        self._len = 0
        self.forward_calls: list[tuple[int, int]] = []  # (n_tokens, start_pos)
        self.fail_at_pass = fail_at_pass

    @property
    def length(self) -> int:
        return self._len

    def row(self, prefix) -> np.ndarray:
        z = prefix_logits(prefix, self.config.vocab_size, self.seed, self.scale)
        if self.blend is not None:
            other_seed, w = self.blend
            z = ((1 - w) * z + w * prefix_logits(prefix, self.config.vocab_size, other_seed, self.scale)).astype(np.float32)
        return z

    def forward(self, tokens, start_pos, n_out=None):
        tokens = [int(t) for t in tokens]
        if start_pos != self._len:
            raise AssertionError(f"forward at {start_pos} but cache length is {self._len}")
        if start_pos + len(tokens) > self.config.seq_len:
            raise AssertionError("past the context")
        if self.fail_at_pass is not None and len(self.forward_calls) == self.fail_at_pass:
            self.forward_calls.append((len(tokens), start_pos))
            raise RuntimeError("device lost (injected)")
        self.forward_calls.append((len(tokens), start_pos))
        del self.tokens[self._len:]
        self.tokens.extend(tokens)
        self._len += len(tokens)
        n_out = len(tokens) if n_out is None else n_out
        rows = [self.row(self.tokens[: start_pos + i + 1]) for i in range(len(tokens) - n_out, len(tokens))]
        return np.stack(rows) if rows else np.zeros((0, self.config.vocab_size), np.float32)  # (n_out, vocab)

    def truncate(self, n):
        if not (0 <= n <= self._len):
            raise AssertionError(f"truncate({n}) with length {self._len}")
        self._len = n


class CycleLM(ToyLM):
    """A champion that repeats a cycle of 7 tokens: the token after t is (t + 1) % 7, whatever came before."""

    def row(self, prefix) -> np.ndarray:
        z = np.zeros(self.config.vocab_size, np.float32)   # (vocab,)
        z[(prefix[-1] + 1) % 7] = 5.0
        return z


class OnAClock:
    """Mixin for a backend wrapper with decode_ahead (exactspec.backend.RunsAhead) on a virtual clock, for tests of
    "only while it pays": `clock()` is the decode loop's clock; a forward costs 1 unit (subclasses price the rest)."""

    t = 0.0

    def clock(self):
        return self.t

    def forward(self, tokens, *a, **k):
        self.t += 1.0
        return self.inner.forward(tokens, *a, **k)
