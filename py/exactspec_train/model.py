"""A small torch Llama for training and teacher inference (CPython + torch only).

Weights use GGUF tensor names and Hugging Face row order for attn_q / attn_k (rotate-half RoPE), which is what
`exactspec.formats.gguf.GGUFFile.tensor()` returns and what `write_gguf` expects (it permutes Q/K rows into
llama.cpp's order on the way out).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from exactspec.backend import ModelConfig


def gguf_names(config: ModelConfig) -> list[str]:
    names = ["token_embd.weight", "output_norm.weight"]
    for i in range(config.n_layers):
        p = f"blk.{i}."
        names += [p + s for s in ("attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                  "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
                                  "ffn_down.weight")]
    if not config.tied_embeddings:
        names.append("output.weight")
    return names


def _key(name: str) -> str:
    return name.replace(".", "__")


class TorchLlama(nn.Module):
    """Llama forward in torch. Parameters are stored under GGUF names ('.' -> '__')."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        if c.n_heads % c.n_kv_heads:
            raise ValueError(f"n_heads {c.n_heads} is not a multiple of n_kv_heads {c.n_kv_heads}")
        if (c.rope_dim or c.head_dim) != c.head_dim:
            raise ValueError("partial rotary dims are not supported by the training model")
        self.config = c
        shapes = {
            "token_embd.weight": (c.vocab_size, c.dim), "output_norm.weight": (c.dim,),
            "output.weight": (c.vocab_size, c.dim),
        }
        for i in range(c.n_layers):
            p = f"blk.{i}."
            shapes.update({
                p + "attn_norm.weight": (c.dim,), p + "ffn_norm.weight": (c.dim,),
                p + "attn_q.weight": (c.n_heads * c.head_dim, c.dim),
                p + "attn_k.weight": (c.n_kv_heads * c.head_dim, c.dim),
                p + "attn_v.weight": (c.n_kv_heads * c.head_dim, c.dim),
                p + "attn_output.weight": (c.dim, c.n_heads * c.head_dim),
                p + "ffn_gate.weight": (c.hidden_dim, c.dim), p + "ffn_up.weight": (c.hidden_dim, c.dim),
                p + "ffn_down.weight": (c.dim, c.hidden_dim),
            })
        self.names = gguf_names(c)
        self.p = nn.ParameterDict({_key(n): nn.Parameter(torch.empty(shapes[n])) for n in self.names})
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64) / c.head_dim))
        self.register_buffer("inv_freq", inv.float(), persistent=False)   # (head_dim/2,)

    # -- weights ------------------------------------------------------------------------------------------------
    def w(self, name: str) -> torch.Tensor:
        return self.p[_key(name)]

    def init_random(self, seed: int, std: float = 0.02) -> None:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n in self.names:
                t = self.w(n)
                if t.ndim == 1:
                    t.fill_(1.0)
                else:
                    s = std / math.sqrt(2 * self.config.n_layers) if n.endswith(("attn_output.weight",
                                                                                  "ffn_down.weight")) else std
                    t.copy_(torch.randn(t.shape, generator=g) * s)

    def load_numpy(self, weights: dict[str, np.ndarray]) -> None:
        missing = [n for n in self.names if n not in weights]
        if missing:
            raise ValueError(f"weights lack {missing[:4]}{'...' if len(missing) > 4 else ''}")
        with torch.no_grad():
            for n in self.names:
                a = np.asarray(weights[n], dtype=np.float32)
                if tuple(a.shape) != tuple(self.w(n).shape):
                    raise ValueError(f"{n}: shape {a.shape} != expected {tuple(self.w(n).shape)}")
                self.w(n).copy_(torch.from_numpy(a))

    def to_numpy(self) -> dict[str, np.ndarray]:
        return {n: self.w(n).detach().float().cpu().numpy().copy() for n in self.names}

    @classmethod
    def from_gguf(cls, path, seq_len: int | None = None) -> "TorchLlama":
        from exactspec.formats.gguf import GGUFFile
        g = GGUFFile(path)
        cfg = g.config()
        if seq_len:
            cfg = replace(cfg, seq_len=seq_len)
        m = cls(cfg)
        m.load_numpy({n: g.tensor(n) for n in m.names})
        return m

    # -- forward ------------------------------------------------------------------------------------------------
    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x (B, H, T, hd); pos (B, T) int64 absolute positions
        ang = pos[:, None, :, None].float() * self.inv_freq[None, None, None, :]   # (B, 1, T, hd/2)
        cos, sin = torch.cos(ang), torch.sin(ang)
        cos = torch.cat([cos, cos], -1).to(x.dtype)                              # (B, 1, T, hd)
        sin = torch.cat([sin, sin], -1).to(x.dtype)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.config.norm_eps)
        return (y * w.float()).to(x.dtype)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor | None = None, cache: dict | None = None,
                key_mask: torch.Tensor | None = None, return_hidden: bool = False,
                return_features: bool = False) -> torch.Tensor:
        """tokens (B, T) int64 -> logits (B, T, vocab) (or final hidden (B, T, dim) with return_hidden, or the
        features a draft head reads with return_features: the residual after the last layer, before the norm).

        Without `cache`: plain causal attention over the T tokens (training; pos defaults to 0..T-1).
        With `cache` (from `new_cache`): keys/values are written at cache['len'] .. +T and attention covers
        everything cached so far; `key_mask` (B, len+T) bool marks real (non-padding) keys; pos (B, T) must be given.
        """
        c = self.config
        B, T = tokens.shape
        if pos is None:
            pos = torch.arange(T, device=tokens.device)[None, :].expand(B, T)
        h = F.embedding(tokens, self.w("token_embd.weight"))                        # (B, T, dim)
        dt = h.dtype if cache is None else cache["k"].dtype
        h = h.to(dt)
        rep = c.n_heads // c.n_kv_heads
        if cache is not None:
            L0 = cache["len"]
            Lk = L0 + T
            allowed = torch.ones(T, Lk, dtype=torch.bool, device=tokens.device).tril(L0)   # (T, Lk) causal
            diag = torch.zeros(T, Lk, dtype=torch.bool, device=tokens.device)
            diag[torch.arange(T), L0 + torch.arange(T)] = True                              # (T, Lk) self
            # padding queries see themselves only, so no row is fully masked (no NaN reaches the cache)
            mask = (allowed[None, None] & key_mask[:, None, None, :Lk]) | diag[None, None]   # (B, 1, T, Lk)
        for i in range(c.n_layers):
            p = f"blk.{i}."
            x = self._norm(h, self.w(p + "attn_norm.weight"))
            q = F.linear(x, self.w(p + "attn_q.weight").to(dt)).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
            k = F.linear(x, self.w(p + "attn_k.weight").to(dt)).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
            v = F.linear(x, self.w(p + "attn_v.weight").to(dt)).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
            q, k = self._rope(q, pos), self._rope(k, pos)                            # (B, H, T, hd)
            if cache is None:
                if rep > 1:
                    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)          # (B, H, T, hd)
            else:
                cache["k"][i, :, :, L0:L0 + T] = k
                cache["v"][i, :, :, L0:L0 + T] = v
                kk, vv = cache["k"][i, :, :, :Lk], cache["v"][i, :, :, :Lk]          # (B, Hkv, Lk, hd)
                if rep > 1:
                    kk, vv = kk.repeat_interleave(rep, 1), vv.repeat_interleave(rep, 1)
                a = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
            a = a.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim)
            h = h + F.linear(a, self.w(p + "attn_output.weight").to(dt))
            x = self._norm(h, self.w(p + "ffn_norm.weight"))
            g = F.linear(x, self.w(p + "ffn_gate.weight").to(dt))
            u = F.linear(x, self.w(p + "ffn_up.weight").to(dt))
            h = h + F.linear(F.silu(g) * u, self.w(p + "ffn_down.weight").to(dt))
        if cache is not None:
            cache["len"] = L0 + T
        if return_features:
            return h                                                                 # (B, T, dim)
        h = self._norm(h, self.w("output_norm.weight"))                              # (B, T, dim)
        if return_hidden:
            return h
        out_w = self.w("token_embd.weight" if c.tied_embeddings else "output.weight")
        return F.linear(h, out_w.to(h.dtype))                                        # (B, T, vocab)

    def new_cache(self, batch: int, max_len: int, dtype=torch.float32, device=None) -> dict:
        c = self.config
        shape = (c.n_layers, batch, c.n_kv_heads, max_len, c.head_dim)
        return {"k": torch.zeros(shape, dtype=dtype, device=device),   # (L, B, Hkv, max_len, hd)
                "v": torch.zeros(shape, dtype=dtype, device=device), "len": 0}


def pca_embedding(emb: np.ndarray, dim: int) -> np.ndarray:
    """Project the champion's token embedding (vocab, D) onto its top `dim` principal directions -> (vocab, dim).

    The projection is scaled so row norms keep their average size (the draft's RMSNorm-ed hidden state then meets
    an output head of the champion's scale)."""
    e = np.asarray(emb, dtype=np.float64)                  # (vocab, D)
    mu = e.mean(0, keepdims=True)                          # (1, D)
    cov = (e - mu).T @ (e - mu) / e.shape[0]               # (D, D)
    w, v = np.linalg.eigh(cov)
    top = v[:, np.argsort(w)[::-1][:dim]]                  # (D, dim)
    proj = e @ top                                         # (vocab, dim) (mean kept: it carries the shared offset)
    scale = np.linalg.norm(e, axis=1).mean() / max(np.linalg.norm(proj, axis=1).mean(), 1e-12)
    return (proj * scale).astype(np.float32)
