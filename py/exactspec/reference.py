"""Numpy float32 reference forward pass for llama-family models: the oracle for every browser result.

Math (Hugging Face LlamaForCausalLM order): h = embed[tok]; per layer: h += Wo attn(RoPE(Wq n1(h)), RoPE(Wk n1(h)),
Wv n1(h)); h += Wdown (silu(Wgate n2(h)) * Wup n2(h)); logits = Wout norm(h). RMSNorm x * rsqrt(mean(x^2) + eps) * w;
RoPE is HF's rotate-half convention over the first rope_dim dims of each head (weights arrive un-permuted);
grouped-query attention with n_heads // n_kv_heads query heads per KV head; tied embeddings when there is no
output.weight.

BATCH INVARIANCE (coupled-mode exactness depends on it): the logits row of a position is bitwise identical whether
the tokens arrive one at a time, in a verify block of k+1 or in a prefill of any chunk size. OpenBLAS's sgemm gives
different bits for the same row depending on how many rows are multiplied (measured here: n = 1 vs 2 vs >= 7 all
differ), so:
  - every matrix product is a matrix-VECTOR product of one row, copied into a fixed per-model input buffer (same
    kernel, same shapes, same alignment whatever the batch);
  - attention runs one query position at a time over exactly its own prefix 0..pos (shapes depend only on pos);
  - element-wise work and row reductions (RMSNorm) run on the whole block; they are per-row by construction, and
    tests/test_reference.py proves the result bitwise for many chunkings.
Weights are dequantised once to float32 at load and kept (out_features, in_features) C-contiguous; q/k/v and
gate/up are stacked into one matrix each so a position needs 4 matrix-vector products per layer plus the head.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from .backend import ModelConfig


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax in the input's float dtype."""
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def rope_tables(config: ModelConfig, n_pos: int) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin (n_pos, rope_dim // 2) float32, computed in float64 then rounded once."""
    r = config.rope_dim or config.head_dim
    inv = 1.0 / (config.rope_theta ** (np.arange(0, r, 2, dtype=np.float64) / r))   # (r/2,)
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv[None, :]               # (n_pos, r/2)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


class ReferenceModel:
    """Backend protocol implementation (see exactspec.backend) on numpy float32."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, np.ndarray], max_len: int | None = None,
                 keep_features: bool = False, window: int = 0):
        """keep_features: also keep the final hidden state of every row computed, by absolute position (see
        `feature_rows`; a draft head reads them). window > 0: each position attends to its last `window` positions
        only (itself included); 0: to its whole prefix."""
        c = config
        self.config = c
        if c.n_heads % c.n_kv_heads:
            raise ValueError(f"n_heads {c.n_heads} is not a multiple of n_kv_heads {c.n_kv_heads}")
        rope_dim = c.rope_dim or c.head_dim
        if rope_dim % 2 or rope_dim > c.head_dim:
            raise ValueError(f"rope_dim {rope_dim} must be even and <= head_dim {c.head_dim}")
        self.rope_dim = rope_dim
        qd, kd = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim

        def get(name: str, shape: tuple) -> np.ndarray:
            if name not in weights:
                raise ValueError(f"missing weight {name}")
            w = np.asarray(weights[name])
            if tuple(w.shape) != shape:
                raise ValueError(f"weight {name} has shape {tuple(w.shape)}, expected {shape}")
            if not np.all(np.isfinite(w)):
                raise ValueError(f"weight {name} has non-finite values")
            return np.ascontiguousarray(w, dtype=np.float32)

        self.embed = get("token_embd.weight", (c.vocab_size, c.dim))                  # (vocab, dim)
        self.out_norm = get("output_norm.weight", (c.dim,))                           # (dim,)
        if c.tied_embeddings:
            self.out = self.embed                                                     # (vocab, dim)
        else:
            self.out = get("output.weight", (c.vocab_size, c.dim))                    # (vocab, dim)
        self.layers = []
        for i in range(c.n_layers):
            p = f"blk.{i}."
            self.layers.append({
                "attn_norm": get(p + "attn_norm.weight", (c.dim,)),                  # (dim,)
                "wqkv": np.ascontiguousarray(np.concatenate([                         # (qd + 2 kd, dim)
                    get(p + "attn_q.weight", (qd, c.dim)), get(p + "attn_k.weight", (kd, c.dim)),
                    get(p + "attn_v.weight", (kd, c.dim))], axis=0)),
                "wo": get(p + "attn_output.weight", (c.dim, qd)),                     # (dim, qd)
                "ffn_norm": get(p + "ffn_norm.weight", (c.dim,)),                     # (dim,)
                "w13": np.ascontiguousarray(np.concatenate([                          # (2 hidden, dim)
                    get(p + "ffn_gate.weight", (c.hidden_dim, c.dim)),
                    get(p + "ffn_up.weight", (c.hidden_dim, c.dim))], axis=0)),
                "w2": get(p + "ffn_down.weight", (c.dim, c.hidden_dim)),              # (dim, hidden)
            })
        self.max_len = c.seq_len if max_len is None else min(int(max_len), c.seq_len)
        if self.max_len <= 0:
            raise ValueError("max_len must be positive")
        # fixed matrix-vector input buffers (see BATCH INVARIANCE)
        self._xbuf = {d: np.zeros(d, dtype=np.float32) for d in {c.dim, qd, c.hidden_dim}}  # (d,)
        self._cap = 0
        self._k: list[np.ndarray] = []     # per layer (n_kv_heads, cap, head_dim)
        self._v: list[np.ndarray] = []     # per layer (n_kv_heads, cap, head_dim)
        self._cos = self._sin = np.zeros((0, rope_dim // 2), np.float32)   # (cap, rope_dim/2)
        self._feat = np.zeros((0, c.dim), np.float32) if keep_features else None   # (cap, dim) or None
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        self.window = int(window)
        self._length = 0
        self._grow(min(self.max_len, 256))

    # -- construction ---------------------------------------------------------------------------------------------
    @classmethod
    def from_weights(cls, config: ModelConfig, weights: Mapping[str, np.ndarray], max_len: int | None = None, **kw):
        return cls(config, weights, max_len=max_len, **kw)

    @classmethod
    def from_file(cls, path: str | os.PathLike, max_len: int | None = None, **kw) -> "ReferenceModel":
        """kw: keep_features, window (see __init__)."""
        from .formats import load_model_file
        config, weights = load_model_file(path)
        return cls(config, weights, max_len=max_len, **kw)

    # -- KV cache -------------------------------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self._length

    def truncate(self, n: int) -> None:
        """O(1) rollback of the logical KV length (no zeroing)."""
        n = int(n)
        if not 0 <= n <= self._length:
            raise ValueError(f"truncate({n}) outside 0..{self._length}")
        self._length = n

    def reset(self) -> None:
        self._length = 0

    def _grow(self, need: int) -> None:
        if need <= self._cap:
            return
        if need > self.max_len:
            raise ValueError(f"context overflow: {need} positions > max_len {self.max_len}")
        c = self.config
        cap = min(self.max_len, max(need, 2 * self._cap))
        for lst in (self._k, self._v):
            for i in range(c.n_layers):
                new = np.zeros((c.n_kv_heads, cap, c.head_dim), np.float32)    # (n_kv_heads, cap, head_dim)
                if i < len(lst):
                    new[:, : self._cap] = lst[i][:, : self._cap]
                    lst[i] = new
                else:
                    lst.append(new)
        self._cos, self._sin = rope_tables(c, cap)                              # (cap, rope_dim/2)
        if self._feat is not None:
            feat = np.zeros((cap, c.dim), np.float32)                           # (cap, dim)
            feat[: self._cap] = self._feat[: self._cap]
            self._feat = feat
        self._cap = cap

    # -- forward --------------------------------------------------------------------------------------------------
    def _matvec(self, w: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        """out (n, rows) = rows of w (rows, d) @ x (n, d), one fixed-buffer matrix-vector product per row."""
        buf = self._xbuf[x.shape[1]]                                            # (d,)
        for i in range(x.shape[0]):
            buf[...] = x[i]
            out[i] = w @ buf

    def _rmsnorm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)          # (n, 1)
        return (x * (np.float32(1.0) / np.sqrt(ms + np.float32(self.config.norm_eps)))) * w

    def _rope(self, x: np.ndarray, pos: np.ndarray) -> None:
        """In place on x (n, heads, head_dim); HF rotate-half over the first rope_dim dims."""
        h = self.rope_dim // 2
        cos = self._cos[pos][:, None, :]                                        # (n, 1, r/2)
        sin = self._sin[pos][:, None, :]                                        # (n, 1, r/2)
        x1 = x[:, :, :h].copy()                                                 # (n, heads, r/2)
        x2 = x[:, :, h: 2 * h].copy()                                           # (n, heads, r/2)
        x[:, :, :h] = x1 * cos - x2 * sin
        x[:, :, h: 2 * h] = x2 * cos + x1 * sin

    def forward(self, tokens: Sequence[int], start_pos: int, n_out: int | None = None, features: bool = False,
                embeds: np.ndarray | None = None):
        """tokens (n,) at positions start_pos.. -> logits float32 (n_out, vocab) of the last n_out positions.

        features=True: returns (logits, feats) with feats float32 (n_out, dim) the final hidden state of those rows
        (the residual stream after the last layer, before the output norm): what a draft head reads.
        embeds (n, dim): the layers' input rows instead of the tokens' embeddings (a draft head makes its own);
        the tokens then only count the rows."""
        c = self.config
        toks = np.asarray(tokens, dtype=np.int64).reshape(-1)                   # (n,)
        n = toks.shape[0]
        if start_pos != self._length:
            raise ValueError(f"forward at start_pos {start_pos} but the KV cache holds {self._length} positions")
        if n == 0:
            raise ValueError("forward needs at least one token")
        n_out = n if n_out is None else int(n_out)
        if not 0 <= n_out <= n:
            raise ValueError(f"n_out {n_out} outside 0..{n}")
        if embeds is None and (toks.min() < 0 or toks.max() >= c.vocab_size):
            raise ValueError(f"token id outside 0..{c.vocab_size - 1}")
        self._grow(start_pos + n)
        hd, nh, nkv = c.head_dim, c.n_heads, c.n_kv_heads
        rep = nh // nkv
        qd, kd = nh * hd, nkv * hd
        scale = np.float32(1.0 / np.sqrt(hd))
        pos = np.arange(start_pos, start_pos + n)                                # (n,)

        if embeds is None:
            x = self.embed[toks].astype(np.float32)                             # (n, dim)
        else:
            x = np.array(embeds, dtype=np.float32).reshape(n, c.dim)            # (n, dim)
        qkv = np.empty((n, qd + 2 * kd), np.float32)                            # (n, qd + 2 kd)
        att = np.empty((n, qd), np.float32)                                     # (n, qd)
        proj = np.empty((n, c.dim), np.float32)                                 # (n, dim)
        ffh = np.empty((n, 2 * c.hidden_dim), np.float32)                       # (n, 2 hidden)
        for li, L in enumerate(self.layers):
            xn = self._rmsnorm(x, L["attn_norm"])                               # (n, dim)
            self._matvec(L["wqkv"], xn, qkv)
            q = qkv[:, :qd].reshape(n, nh, hd).copy()                           # (n, n_heads, head_dim)
            k = qkv[:, qd: qd + kd].reshape(n, nkv, hd).copy()                  # (n, n_kv_heads, head_dim)
            v = qkv[:, qd + kd:].reshape(n, nkv, hd)                            # (n, n_kv_heads, head_dim)
            self._rope(q, pos)
            self._rope(k, pos)
            kc, vc = self._k[li], self._v[li]                                   # (n_kv_heads, cap, head_dim)
            kc[:, start_pos: start_pos + n] = k.transpose(1, 0, 2)
            vc[:, start_pos: start_pos + n] = v.transpose(1, 0, 2)
            qg = (q * scale).reshape(n, nkv, rep, hd)                           # (n, n_kv, rep, head_dim)
            for i in range(n):
                t = start_pos + i + 1
                lo = max(0, t - self.window) if self.window else 0             # keys lo..t-1
                s = np.matmul(qg[i], kc[:, lo:t].transpose(0, 2, 1))           # (n_kv, rep, t - lo)
                s = s - s.max(axis=-1, keepdims=True)
                e = np.exp(s)
                p = e / e.sum(axis=-1, keepdims=True)                           # (n_kv, rep, t - lo)
                att[i] = np.matmul(p, vc[:, lo:t]).reshape(qd)                  # (n_kv, rep, head_dim)
            self._matvec(L["wo"], att, proj)
            x = x + proj
            xn = self._rmsnorm(x, L["ffn_norm"])                                # (n, dim)
            self._matvec(L["w13"], xn, ffh)
            g = ffh[:, : c.hidden_dim]                                          # (n, hidden)
            u = ffh[:, c.hidden_dim:]                                           # (n, hidden)
            hact = np.ascontiguousarray((g / (np.float32(1.0) + np.exp(-g))) * u)   # (n, hidden)
            self._matvec(L["w2"], hact, proj)
            x = x + proj
        self._length = start_pos + n
        if self._feat is not None:
            self._feat[start_pos: start_pos + n] = x
        xn = self._rmsnorm(x[n - n_out:], self.out_norm)                        # (n_out, dim)
        logits = np.empty((n_out, c.vocab_size), np.float32)                    # (n_out, vocab)
        self._matvec(self.out, xn, logits)
        if features:
            return logits, np.ascontiguousarray(x[n - n_out:])                   # (n_out, dim)
        return logits

    def feature_rows(self, start: int, stop: int) -> np.ndarray:
        """(stop - start, dim) float32: the final hidden states kept (keep_features) for positions start..stop-1,
        all below `length`."""
        if self._feat is None:
            raise ValueError("this model does not keep its features (keep_features=False)")
        if not 0 <= start <= stop <= self._length:
            raise ValueError(f"feature rows {start}..{stop} outside the {self._length} positions held")
        return self._feat[start:stop]

    # -- the batched step (exactspec.backend): the same passes one after another, with the same meaning ----------
    ahead_max = 0   # decode_ahead gains nothing on a CPU (no round trips to save): the decode loop leaves it unused

    def decode_ahead(self, token: int, start_pos: int, n: int, pick, rows: bool = True):
        from .backend import decode_ahead_by_forwards
        return decode_ahead_by_forwards(self, token, start_pos, n, pick, rows)

    def spec_round(self, draft, feed, draft_start: int, k: int, token: int, start_pos: int, pick, rows: bool = True):
        from .backend import spec_round_by_forwards
        return spec_round_by_forwards(self, draft, feed, draft_start, k, token, start_pos, pick, rows)
