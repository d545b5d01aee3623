"""Training the draft head (exactspec.drafters.head) by distillation from the champion (torch).

The head at position q reads the champion's feature f_{q-1} (the residual after its last layer, before the output
norm) and the token x_q, and predicts f_q; the champion's output norm and LM head (or a frequency-ranked subset of
its rows, FR-Spec) turn f_q into logits for x_{q+1}. Training (EAGLE-style, with EAGLE-3's training-time test):

- level 0: every position reads the champion's TRUE feature of the position before (plus uniform noise scaled by
  each dimension's std); level d >= 1: every position reads the PREDICTED feature of level d - 1 at the position
  before, and attends to level-0 keys at positions <= q - d and to the level-j key at q - d + j for j = 1..d. That
  is exactly what the drafter computes in a round started at L = q - d + 1 (positions < L from true features, then
  its own chain), so level d's row at q is the (d+1)-th proposal of that round.
- loss per level (weight decay_d ** d): cross-entropy to the champion's next-token distribution (restricted to the
  head's vocabulary and renormalised) + feat_weight x smooth-L1 of (f_hat - f) / sigma (per-dimension std).
- token filtering (AdaSPEC-style, simplified): after warm-up, the `filter_frac` hardest target positions of each
  batch for the head (highest level-0 cross-entropy) are dropped from the token loss, so its capacity goes to the
  tokens it can learn. (AdaSPEC ranks tokens by the gap to a reference draft's loss; here the head's own loss.)

Evaluation (`chain_tau`) is the same level structure without noise: the run of matches of levels 0..k-1 from each
round start, replayed by exactspec_train.accept.simulate_runs (the decode loop's counters).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from exactspec.drafters.head import LAYER_TENSORS, HeadConfig

HEAD_PARAMS = ("head.feat_norm.weight", "head.emb_norm.weight", "head.fc_feat.weight", "head.fc_emb.weight") + \
    tuple(f"blk.0.{t}.weight" for t in LAYER_TENSORS)


def _key(name: str) -> str:
    return name.replace(".", "__")


class HeadNet(nn.Module):
    """The head's trainable tensors (GGUF names) and the champion's frozen ones it shares (buffers)."""

    def __init__(self, cfg: HeadConfig, embed: torch.Tensor, out_norm: torch.Tensor, vocab_ids=None):
        super().__init__()
        self.cfg = cfg
        shapes = cfg.tensor_shapes()
        self.p = nn.ParameterDict({_key(n): nn.Parameter(torch.empty(shapes[n])) for n in HEAD_PARAMS})
        self.register_buffer("embed", embed.detach().float().clone(), persistent=False)       # (vocab, dim)
        self.register_buffer("out_norm", out_norm.detach().float().clone(), persistent=False)  # (dim,)
        ids = torch.arange(cfg.vocab_size) if vocab_ids is None else torch.as_tensor(np.asarray(vocab_ids))
        self.register_buffer("vocab_ids", ids.long(), persistent=False)                      # (n_rows,)
        self.subset = vocab_ids is not None
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
        self.register_buffer("inv_freq", inv.float(), persistent=False)                      # (head_dim/2,)

    def w(self, name: str) -> torch.Tensor:
        return self.p[_key(name)]

    def init_weights(self, seed: int, feature_rms: float, std: float = 0.02) -> None:
        """Norms 1; fc_feat = feature_rms x I (so at first x_in ~ f_{q-1}, the predicted feature starts near the
        previous one); the rest N(0, std), output projections scaled down."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n in HEAD_PARAMS:
                t = self.w(n)
                if t.ndim == 1:
                    t.fill_(1.0)
                elif n == "head.fc_feat.weight":
                    t.copy_(torch.eye(t.shape[0]) * feature_rms + torch.randn(t.shape, generator=g) * std)
                else:
                    s = std / math.sqrt(2) if n.endswith(("attn_output.weight", "ffn_down.weight")) else std
                    t.copy_(torch.randn(t.shape, generator=g) * s)

    def load_numpy(self, weights: dict) -> None:
        with torch.no_grad():
            for n in HEAD_PARAMS:
                self.w(n).copy_(torch.from_numpy(np.asarray(weights[n], dtype=np.float32)))

    def to_numpy(self) -> dict:
        return {n: self.w(n).detach().float().cpu().numpy().copy() for n in HEAD_PARAMS}

    # -- pieces ---------------------------------------------------------------------------------------------------
    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.norm_eps) * w.float()).to(x.dtype)

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        ang = pos[:, None, :, None].float() * self.inv_freq[None, None, None, :]          # (B, 1, T, hd/2)
        cos, sin = torch.cat([torch.cos(ang)] * 2, -1).to(x.dtype), torch.cat([torch.sin(ang)] * 2, -1).to(x.dtype)
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def head_input(self, f_prev: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """x_in (B, T, dim) from f_{q-1} (B, T, dim) and x_q (B, T)."""
        e = F.embedding(tokens, self.embed)
        return F.linear(self._norm(f_prev, self.w("head.feat_norm.weight")), self.w("head.fc_feat.weight")) + \
            F.linear(self._norm(e, self.w("head.emb_norm.weight")), self.w("head.fc_emb.weight"))

    def logits(self, f: torch.Tensor) -> torch.Tensor:
        """(..., n_rows) logits over the head's vocabulary rows from features (..., dim)."""
        rows = self.embed[self.vocab_ids] if self.subset else self.embed
        return F.linear(self._norm(f, self.out_norm), rows.to(f.dtype))

    def levels(self, feats: torch.Tensor, tokens: torch.Tensor, pos: torch.Tensor, depth: int,
               noise: float = 0.0, sigma: torch.Tensor | None = None) -> list:
        """The predicted features of levels 0..depth-1, each (B, T, dim).

        feats (B, T, dim): the champion's features f_q at the rows' positions; tokens (B, T); pos (B, T) absolute
        positions (consecutive per row). Row q of level 0 reads f_{q-1} (zeros for the first row when pos is 0,
        else the row's own f_{q-1} is not in the batch: the first row of a cut sequence reads zeros too, a small
        mismatch confined to it); level d reads level d-1's output at q-1."""
        c = self.cfg
        B, T, D = feats.shape
        H, Hk, hd = c.n_heads, c.n_kv_heads, c.head_dim
        rep = H // Hk
        f_in = torch.cat([torch.zeros_like(feats[:, :1]), feats[:, :-1]], 1)               # (B, T, dim) f_{q-1}
        if noise > 0 and sigma is not None:
            f_in = f_in + (torch.rand_like(f_in) * 2 - 1) * noise * sigma.to(f_in.dtype)
        keys, vals, outs = [], [], []
        q_idx = torch.arange(T, device=feats.device)
        for d in range(depth):
            if d > 0:
                prev = outs[-1]
                f_in = torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], 1)          # level d-1 at q-1
            h = self.head_input(f_in, tokens)                                              # (B, T, dim)
            x = self._norm(h, self.w("blk.0.attn_norm.weight"))
            q = F.linear(x, self.w("blk.0.attn_q.weight")).view(B, T, H, hd).transpose(1, 2)
            k = F.linear(x, self.w("blk.0.attn_k.weight")).view(B, T, Hk, hd).transpose(1, 2)
            v = F.linear(x, self.w("blk.0.attn_v.weight")).view(B, T, Hk, hd).transpose(1, 2)
            q, k = self._rope(q, pos), self._rope(k, pos)                                  # (B, H*, T, hd)
            keys.append(k)
            vals.append(v)
            # keys: level 0 at every position, then level j's key shifted so that query q meets position q-d+j
            kk, vv, blocks = [keys[0]], [vals[0]], []
            allowed0 = q_idx[None, :] <= q_idx[:, None] - d                                # (T, T) p <= q - d
            if c.window:
                allowed0 &= q_idx[None, :] > q_idx[:, None] - c.window
            blocks.append(allowed0)
            for j in range(1, d + 1):
                s = d - j
                kk.append(torch.cat([torch.zeros_like(keys[j][:, :, :s]), keys[j][:, :, :T - s]], 2))
                vv.append(torch.cat([torch.zeros_like(vals[j][:, :, :s]), vals[j][:, :, :T - s]], 2))
                blocks.append(torch.diag(q_idx >= s))                                      # (T, T) own row only
            K_ = torch.cat(kk, 2).repeat_interleave(rep, 1)                                # (B, H, (d+1)T, hd)
            V_ = torch.cat(vv, 2).repeat_interleave(rep, 1)
            mask = torch.cat(blocks, 1)                                                    # (T, (d+1)T)
            a = F.scaled_dot_product_attention(q, K_.to(q.dtype), V_.to(q.dtype), attn_mask=mask)
            a = a.transpose(1, 2).reshape(B, T, H * hd)
            h = h + F.linear(a, self.w("blk.0.attn_output.weight"))
            x = self._norm(h, self.w("blk.0.ffn_norm.weight"))
            h = h + F.linear(F.silu(F.linear(x, self.w("blk.0.ffn_gate.weight"))) *
                             F.linear(x, self.w("blk.0.ffn_up.weight")), self.w("blk.0.ffn_down.weight"))
            outs.append(h)
        return outs


def frequency_subset(token_lists, vocab_size: int, n: int, always=()) -> np.ndarray:
    """The n most frequent token ids of `token_lists` (ties -> lower id), plus `always`, ascending (FR-Spec)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for t in token_lists:
        np.add.at(counts, np.asarray(t, dtype=np.int64), 1)
    order = np.lexsort((np.arange(vocab_size), -counts))
    ids = set(order[:n].tolist()) | set(int(a) for a in always)
    keep = sorted(ids)
    while len(keep) > n:                                       # `always` pushed it over: drop the rarest extras
        rare = min((i for i in keep if i not in always), key=lambda i: (counts[i], -i))
        keep.remove(rare)
    return np.asarray(keep, dtype=np.int64)


def soft_ce(logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """(N,) cross-entropy of softmax(target_logits) against log_softmax(logits), both (N, n_rows)."""
    lt = F.log_softmax(target_logits.float(), -1)
    ls = F.log_softmax(logits.float(), -1)
    return -(lt.exp() * ls).sum(-1)


def head_loss(net: HeadNet, feats: torch.Tensor, tokens: torch.Tensor, pos: torch.Tensor, weight: torch.Tensor,
              *, depth: int, sigma: torch.Tensor, noise: float, feat_weight: float, decay: float,
              filter_frac: float = 0.0, chunk: int = 8192) -> tuple:
    """Total loss and per-level figures. weight (B, T): weight of the target at each row (the champion's
    distribution at that row, i.e. of the next token); 0 for padding."""
    outs = net.levels(feats, tokens, pos, depth, noise=noise, sigma=sigma)
    B, T, D = feats.shape
    w = weight.reshape(-1).float()                                                     # (B*T,)
    f_true = feats.reshape(-1, D)
    with torch.no_grad():
        t_logits = net.logits(f_true)                                                  # (B*T, rows)
    total = feats.new_zeros((), dtype=torch.float32)
    stats = []
    keep = None
    for d, out in enumerate(outs):
        f_hat = out.reshape(-1, D)
        wd = w.clone()
        if d > 0:            # level d's row q belongs to a round started at q - d + 1 >= 1: the rows q >= d
            wd = wd * (torch.arange(T, device=w.device) >= d).float().repeat(B)
        ce = torch.cat([soft_ce(net.logits(f_hat[s:s + chunk]), t_logits[s:s + chunk])
                        for s in range(0, f_hat.shape[0], chunk)])                    # (B*T,)
        if d == 0 and filter_frac > 0:
            with torch.no_grad():
                live = wd > 0
                cut = torch.quantile(ce[live].float(), 1.0 - filter_frac) if live.any() else None
                keep = (ce <= cut).float() if cut is not None else torch.ones_like(ce)
        wt = wd * keep if keep is not None else wd
        fl = F.smooth_l1_loss(((f_hat.float() - f_true.float()) / sigma).float(),
                              torch.zeros_like(f_hat, dtype=torch.float32), reduction="none").mean(-1)
        tok = (ce * wt).sum() / wt.sum().clamp_min(1e-6)
        feat = (fl * wd).sum() / wd.sum().clamp_min(1e-6)
        total = total + decay ** d * (tok + feat_weight * feat)
        stats.append({"ce": float(tok.detach()), "feat": float(feat.detach())})
    return total, stats


@torch.no_grad()
def chain_runs(net: HeadNet, feats: torch.Tensor, tokens: torch.Tensor, pos: torch.Tensor, k: int) -> torch.Tensor:
    """(B, T) run[b, L]: how many of the k greedy proposals of a round started at row L (L >= 1) match the tokens
    at L, L+1, ... (level j's row at L-1+j against tokens[L+j]); what the decode loop accepts."""
    outs = net.levels(feats, tokens, pos, k)
    B, T = tokens.shape
    match = []
    for j, out in enumerate(outs):
        am = net.vocab_ids[net.logits(out).argmax(-1)]                                 # (B, T) ids
        m = torch.zeros(B, T, dtype=torch.bool, device=tokens.device)
        # round start L: level j's row L - 1 + j predicts tokens[L + j]
        if T - 1 - j > 0:
            m[:, 1:T - j] = am[:, j:T - 1] == tokens[:, 1 + j:]
        match.append(m)
    run = torch.zeros(B, T, dtype=torch.long, device=tokens.device)
    alive = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
    for m in match:
        alive &= m
        run += alive.long()
    return run


def export_head(path, net: HeadNet, cfg: HeadConfig, tensor_type: str, training: dict) -> None:
    from exactspec.drafters.head import write_head_gguf
    ids = net.vocab_ids.cpu().numpy() if net.subset else None
    write_head_gguf(path, replace(cfg, vocab_subset=0), net.to_numpy(), tensor_type=tensor_type,
                    name="exactspec-head-smollm2", training=training, vocab_ids=ids)
