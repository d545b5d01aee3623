"""The draft's training loop: knowledge distillation (forward KL to the champion's full next-token distribution)
or plain next-token cross-entropy, seeded, with a step count and an optional wall-clock cap."""
from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from .model import TorchLlama


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, chunk: int = 4096,
            weight: torch.Tensor | None = None) -> torch.Tensor:
    """mean over tokens of KL(p_teacher || q_student), or its `weight`-weighted mean (weight (N,) >= 0).
    logits (N, vocab); chunked to bound memory."""
    total = student_logits.new_zeros((), dtype=torch.float32)
    n = student_logits.shape[0]
    for s in range(0, n, chunk):
        ls = F.log_softmax(student_logits[s:s + chunk].float(), -1)            # (c, vocab)
        lt = F.log_softmax(teacher_logits[s:s + chunk].float(), -1)            # (c, vocab)
        kl = (lt.exp() * (lt - ls)).sum(-1)                                    # (c,)
        total = total + (kl if weight is None else kl * weight[s:s + chunk]).sum()
    return total / (n if weight is None else weight.sum().clamp_min(1e-6))


def lr_at(step: int, steps: int, lr: float, warmup: int, final_frac: float = 0.1) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    prog = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


def train(student: TorchLlama, sources: list[tuple[np.ndarray, float]], *, mode: str, steps: int, batch: int,
          lr: float, seed: int, device, teacher: TorchLlama | None = None, warmup: int = 50,
          weight_decay: float = 0.01, time_limit_s: float = 1e9, log=print, log_every: int = 50,
          stop_at: int | None = None) -> dict:
    """sources: [(rows (n, seq_len) uint16, weight)] or [(rows, weight, token_weights (n, seq_len) float32)]: each
    batch row is drawn from a source with that weight; token_weights (default 1) weight each predicted token's loss.

    mode 'kd': loss = KL(teacher || student) at every position; 'ce': next-token cross-entropy.
    Returns a record (steps done, losses, seconds)."""
    if mode not in ("kd", "ce"):
        raise ValueError(f"mode must be 'kd' or 'ce', not {mode!r}")
    if mode == "kd" and teacher is None:
        raise ValueError("mode 'kd' needs a teacher")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    w = np.array([s[1] for s in sources], dtype=np.float64)
    w = w / w.sum()
    decay = [p for n, p in student.p.items() if p.ndim >= 2]
    no_decay = [p for n, p in student.p.items() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95), eps=1e-8)
    hist = []
    t0 = time.time()
    done = 0
    for step in range(steps):
        if time.time() - t0 > time_limit_s:
            log(f"{mode}: stopped by the time limit at step {step}")
            break
        if stop_at is not None and step >= stop_at:
            log(f"{mode}: stopped at step {step} (stop_at, the schedule still spans {steps} steps)")
            break
        src = rng.choice(len(sources), size=batch, p=w)
        pick = [(k, rng.integers(len(sources[k][0]))) for k in src]
        rows = np.stack([sources[k][0][i] for k, i in pick])                   # (B, seq_len)
        tw = np.stack([sources[k][2][i] if len(sources[k]) > 2 else np.ones(rows.shape[1], np.float32)
                       for k, i in pick])                                      # (B, seq_len)
        x = torch.from_numpy(rows.astype(np.int64)).to(device)
        wt = torch.from_numpy(tw[:, 1:].reshape(-1)).to(device)                # (B*(T-1),) weight of each target
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        with torch.autocast(device_type="cuda" if str(device).startswith("cuda") else "cpu", dtype=torch.bfloat16):
            s_logits = student(x[:, :-1])                                      # (B, T-1, vocab)
            if mode == "kd":
                with torch.no_grad():
                    t_logits = teacher(x[:, :-1])                              # (B, T-1, vocab)
                loss = kd_loss(s_logits.reshape(-1, s_logits.shape[-1]), t_logits.reshape(-1, t_logits.shape[-1]),
                               weight=wt)
            else:
                ce = F.cross_entropy(s_logits.reshape(-1, s_logits.shape[-1]).float(), x[:, 1:].reshape(-1),
                                     reduction="none")                         # (B*(T-1),)
                loss = (ce * wt).sum() / wt.sum().clamp_min(1e-6)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        done = step + 1
        if step % log_every == 0 or step == steps - 1:
            lv = float(loss)
            hist.append({"step": step, "loss": lv, "grad_norm": float(gn), "s": round(time.time() - t0, 1)})
            log(f"{mode} step {step} loss {lv:.4f} gn {float(gn):.2f} {time.time() - t0:.1f}s")
    return {"mode": mode, "steps_planned": steps, "steps_done": done, "batch": batch, "lr": lr, "seed": seed,
            "warmup": warmup, "weight_decay": weight_decay, "seconds": round(time.time() - t0, 1), "history": hist}


@torch.no_grad()
def eval_agreement(student: TorchLlama, teacher: TorchLlama, rows: np.ndarray, device, batch: int = 8) -> dict:
    """Held-out agreement: top-1 match rate of student vs teacher argmax, and mean KL."""
    agree = n = 0
    kl = 0.0
    for s in range(0, len(rows), batch):
        x = torch.from_numpy(rows[s:s + batch].astype(np.int64)).to(device)
        with torch.autocast(device_type="cuda" if str(device).startswith("cuda") else "cpu", dtype=torch.bfloat16):
            ls = student(x).float()
            lt = teacher(x).float()
        agree += int((ls.argmax(-1) == lt.argmax(-1)).sum())
        n += ls.shape[0] * ls.shape[1]
        kl += float(kd_loss(ls.reshape(-1, ls.shape[-1]), lt.reshape(-1, lt.shape[-1]))) * ls.shape[0] * ls.shape[1]
    return {"top1_agreement": agree / max(1, n), "kl": kl / max(1, n), "tokens": n}
