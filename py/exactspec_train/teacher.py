"""Batched, KV-cached generation of the champion's own answers (torch; runs on the GPU host)."""
from __future__ import annotations

import time

import numpy as np
import torch

from .model import TorchLlama


@torch.no_grad()
def generate_batch(model: TorchLlama, prompts: list[list[int]], temps: list[float], max_new: int, eos: int,
                   gen: torch.Generator, device, dtype=torch.bfloat16) -> list[list[int]]:
    """Answer every prompt (left-padded batch). temps[i] == 0 -> greedy. Returns generated ids (eos included)."""
    B = len(prompts)
    P = max(len(p) for p in prompts)
    tok = torch.zeros(B, P, dtype=torch.long)                                 # (B, P) left-padded
    km = torch.zeros(B, P + max_new, dtype=torch.bool)                        # (B, P+max_new) real keys
    pos = torch.zeros(B, P, dtype=torch.long)                                 # (B, P)
    for i, p in enumerate(prompts):
        n = len(p)
        tok[i, P - n:] = torch.tensor(p)
        km[i, P - n:P] = True
        pos[i, P - n:] = torch.arange(n)
    tok, km, pos = tok.to(device), km.to(device), pos.to(device)
    km[:, P:] = True
    lens = torch.tensor([len(p) for p in prompts], device=device)             # (B,) next position per row
    t = torch.tensor(temps, dtype=torch.float32, device=device)[:, None]      # (B, 1)
    greedy = t[:, 0] <= 0
    cache = model.new_cache(B, P + max_new, dtype=dtype, device=device)
    logits = model(tok, pos=pos, cache=cache, key_mask=km)[:, -1].float()     # (B, vocab)
    out = torch.zeros(B, max_new, dtype=torch.long, device=device)            # (B, max_new)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    steps = 0
    for s in range(max_new):
        probs = torch.softmax(logits / torch.where(t > 0, t, torch.ones_like(t)), -1)   # (B, vocab) greedy rows: T=1
        samp = torch.multinomial(probs, 1, generator=gen)[:, 0]
        nxt = torch.where(greedy, logits.argmax(-1), samp)
        nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
        out[:, s] = nxt
        done |= nxt == eos
        steps = s + 1
        if bool(done.all()):
            break
        logits = model(nxt[:, None], pos=(lens + s)[:, None], cache=cache, key_mask=km)[:, -1].float()
    res = []
    o = out[:, :steps].cpu().numpy()
    for i in range(B):
        row = o[i].tolist()
        if eos in row:
            row = row[:row.index(eos) + 1]
        res.append(row)
    return res


def generate_all(model: TorchLlama, prompts: list[list[int]], temps: list[float], max_new: int, eos: int,
                 seed: int, device, token_budget: int = 160_000, max_batch: int = 384,
                 time_limit_s: float = 1e9, log=print, max_prompts: int | None = None,
                 order: str = "shuffled", dtype=torch.bfloat16) -> list[list[int] | None]:
    """Batches of length-sorted prompts (little padding); None for prompts not reached before `time_limit_s` (or,
    for a deterministic rerun, after the batch that reaches `max_prompts`).

    order "sorted" runs the batches shortest first (so a time limit drops the LONGEST prompts: the shipped draft's
    run did that); "shuffled" runs them in a seeded random order, so a time limit drops a random subset."""
    if order not in ("sorted", "shuffled"):
        raise ValueError(f"order must be 'sorted' or 'shuffled', not {order!r}")
    by_len = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batches = []
    i = 0
    while i < len(by_len):
        L = len(prompts[by_len[min(i + max_batch, len(by_len)) - 1]]) + max_new
        b = max(1, min(max_batch, token_budget // L))
        batches.append((by_len[i:i + b], L))
        i += b
    if order == "shuffled":
        perm = np.random.default_rng(seed).permutation(len(batches))
        batches = [batches[j] for j in perm]
    gen = torch.Generator(device=device).manual_seed(seed)
    res: list[list[int] | None] = [None] * len(prompts)
    t0 = time.time()
    n = 0
    for idx, L in batches:
        if time.time() - t0 > time_limit_s:
            log(f"generation stopped by its time limit after {n} prompts")
            break
        if max_prompts is not None and n >= max_prompts:
            log(f"generation stopped at --gen-max-prompts after {n} prompts")
            break
        outs = generate_batch(model, [prompts[j] for j in idx], [temps[j] for j in idx], max_new, eos, gen, device,
                              dtype=dtype)
        for j, o in zip(idx, outs):
            res[j] = o
        n += len(idx)
        log(f"gen {n}/{len(prompts)} prompts, batch {len(idx)}, len {L}, {time.time() - t0:.1f}s")
    return res
