"""The draft head's GPU job: the champion's answers, then head variants trained in parallel, evaluated, exported.

    python -m exactspec_train.head_run gen   --champion GGUF --data DIR --workload W --gen-out /tmp/gen/gen.npz \\
                                             --budget-s 150
    python -m exactspec_train.head_run train --champion GGUF --data DIR --workload W --gen /tmp/gen/gen.npz \\
                                             --variant full --budget-s 300 --out OUT [--resume]
    python -m exactspec_train.head_run all   --champion GGUF --data DIR --workload W --gen-out /tmp/gen/gen.npz \\
                                             --gen-budget-s 140 --budget-s 300 --out OUT [--resume]

`gen` answers the prepared prompts (exactspec_train.prep: prompt_ids.npy, prompt_off.npy, prep.json) with the
champion for --budget-s seconds (seeded temperatures; shuffled batches, so a time limit drops a random subset) and
writes gen.npz: the answers (ids uint16, off), the prompts (prompt_ids, prompt_off), temps, done, refused (answers
that contain a workload prompt: never trained on), the champion's sha256. With an existing gen.npz and --reuse it
answers only what is still unanswered (a second call adds data).

`train` trains one VARIANT (see VARIANTS: the full head and its ablations) for --budget-s seconds of wall clock,
checkpointing to --ckpt-dir every --ckpt-every seconds (--resume continues from there), then evaluates it (greedy
chain tau for k = 1..8 on held-out greedy answers, exact per-start simulation of the decode loop's rounds) and
exports OUT/head_<variant>.gguf (Q8_0 matrices) and OUT/head_<variant>.json.

`multi` (exactspec_train.head_multi) trains several runs in ONE process that loads the data once, interleaving their
steps by their measured step time (ablations at equal training time; a schedule that spans several calls).

`all` runs gen, then one `train` process per variant in parallel on the one GPU, then writes OUT/run.json (every
variant's record, the answers' summary, the argv) and OUT/log.txt. Runs on CUDA when there is one (bf16 autocast,
tf32), else on the CPU (smoke tests: --tiny).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

VARIANTS = {
    "full": {},
    "no-multistep": {"depth": 1},
    "no-subset": {"vocab_subset": 0},
    "no-filter": {"filter_frac": 0.0},
}
SEED_DEFAULT = 4321
GEN_TEMPS = {0.0: 0.5, 0.7: 0.4, 1.0: 0.1}       # the answers' temperatures: value -> share of the prompts

DEFAULTS = {"depth": 4, "vocab_subset": 16384, "filter_frac": 0.2, "window": 1024, "lr": 5e-4, "noise": 0.05,
            "feat_weight": 0.5, "decay": 0.8, "tokens_per_step": 12288, "max_len": 1024, "prompt_weight": 0.1,
            "corpus_rows": 1024, "corpus_weight": 0.15, "warmup": 100, "eval_frac": 0.03, "eval_max": 256}
TINY = {"vocab_subset": 512, "window": 64, "tokens_per_step": 512, "max_len": 96, "corpus_rows": 2, "warmup": 2,
        "eval_frac": 0.25, "eval_max": 6}
EOS_NAMES = ("<|im_end|>", "<|endoftext|>")


def _log_to(path: Path, prefix: str = ""):
    t0 = time.time()
    f = open(path, "a")

    def log(msg):
        line = f"[{time.time() - t0:7.1f}s] {prefix}{msg}"
        print(line, flush=True)
        f.write(line + "\n")
        f.flush()
    return log


def _device():
    import torch
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    # cuDNN's attention builds a plan for every new shape: with the batches' and held-out answers' varying lengths
    # a training step cost ~550 ms instead of ~55 (H200, bench/h200/head_step_profile.py --vary)
    torch.backends.cuda.enable_cudnn_sdp(False)
    return dev


def _prompts(data: Path, limit: int = 0) -> list:
    ids = np.load(data / "prompt_ids.npy")
    off = np.load(data / "prompt_off.npy")
    n = len(off) - 1 if not limit else min(limit, len(off) - 1)
    return [ids[off[i]:off[i + 1]].astype(np.int64).tolist() for i in range(n)]


# -- gen -----------------------------------------------------------------------------------------------------------
def cmd_gen(a) -> int:
    import torch
    from exactspec.tokenizer import Tokenizer
    from . import data as D
    from .model import TorchLlama
    from .teacher import generate_all
    out = Path(a.gen_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log = _log_to(out.parent / "gen_log.txt", "gen: ")
    dev = _device()
    data = Path(a.data)
    prep = json.loads((data / "prep.json").read_text())
    sha = D.sha256_file(a.champion)
    if sha != prep["champion_sha256"]:
        raise SystemExit(f"champion sha256 {sha} differs from the one the data was prepared with")
    tok = Tokenizer.from_gguf(a.champion)
    eos = tok.id_of("<|im_end|>")
    prompts = _prompts(data, a.max_prompts or (24 if a.tiny else 0))
    rng = np.random.default_rng(a.seed)
    temps = rng.choice(list(GEN_TEMPS), size=len(prompts), p=list(GEN_TEMPS.values())).astype(np.float32)
    answers = [None] * len(prompts)
    if a.reuse and out.exists():
        g = np.load(out)
        if len(g["off"]) != len(prompts) + 1 or not np.array_equal(g["temps"], temps):
            raise SystemExit(f"{out} was made for other prompts or seeds: remove it or drop --reuse")
        for i in np.flatnonzero(g["done"]):
            answers[i] = g["ids"][g["off"][i]:g["off"][i + 1]].astype(np.int64).tolist()
        log(f"reusing {sum(x is not None for x in answers)} answers from {out}")
    todo = [i for i, x in enumerate(answers) if x is None]
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32        # (bf16 on a CPU is slow)
    teacher = TorchLlama.from_gguf(a.champion).to(device=dev, dtype=dtype).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    log(f"device {dev}, {len(todo)} prompts to answer within {a.budget_s} s")
    new = generate_all(teacher, [prompts[i] for i in todo], [float(temps[i]) for i in todo], a.max_new, eos,
                       a.seed + len(prompts) - len(todo), dev,
                       token_budget=a.token_budget if dev.type == "cuda" else 4096, max_batch=a.max_batch,
                       time_limit_s=a.budget_s, log=log, dtype=dtype)
    for i, x in zip(todo, new):
        answers[i] = x
    done = np.array([x is not None for x in answers])
    widx = D.WorkloadIndex.from_file(a.workload)
    refused = np.array([x is not None and bool(widx.hits(tok.decode(x))) for x in answers])
    flat = np.asarray([t for x in answers if x is not None for t in x], dtype=np.uint16)
    off = np.cumsum([0] + [len(x) if x is not None else 0 for x in answers]).astype(np.int64)
    pid = np.asarray([t for p in prompts for t in p], dtype=np.uint16)
    poff = np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64)
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, ids=flat, off=off, temps=temps, done=done, refused=refused, prompt_ids=pid, prompt_off=poff,
             champion_sha256=np.array(sha), max_new=np.array(a.max_new), seed=np.array(a.seed),
             prompts_sha256=np.array(prep["prompts_sha256"]))
    os.replace(tmp, out)
    log(f"wrote {out}: {int(done.sum())} answers ({int(refused.sum())} refused for workload overlap), "
        f"{len(flat)} answer tokens")
    return 0


# -- train ---------------------------------------------------------------------------------------------------------
class Data:
    """Training sequences (prompt + answer, or corpus chunks) with the champion's features, flat on the device; a
    batch is one gather (padding reads a zero row)."""

    def __init__(self, seqs, feats, n_gen, dev, pad_to: int = 128):
        import torch
        self.pad_to = max(1, int(pad_to))      # batches' T rounded up to a multiple of this (few distinct shapes)
        self.lens = np.array([len(s[0]) for s in seqs])
        self.off = np.concatenate([[0], np.cumsum(self.lens)])                 # (n+1,)
        self.pad = int(self.off[-1])                                           # index of the zero row
        self.tokens = torch.from_numpy(np.concatenate([s[0] for s in seqs] + [[0]])).to(dev)   # (total+1,)
        self.weights = torch.from_numpy(np.concatenate([s[2] for s in seqs] + [[0.0]]).astype(np.float32)).to(dev)
        self.feats = torch.cat(feats + [torch.zeros_like(feats[0][:1])])         # (total+1, dim) bf16
        self.start = np.array([int(s[1]) for s in seqs])                       # absolute position of row 0
        self.n_gen = n_gen                                                     # the first n_gen are answers
        self.gen_idx, self.cor_idx = np.arange(n_gen), np.arange(n_gen, len(seqs))   # answers, corpus chunks
        self.dev = dev
        self.torch = torch

    def draw(self, hp: dict, rng) -> list:
        """A batch's sequence indices: about hp['tokens_per_step'] tokens of sequences of similar length from one
        source (corpus chunks with probability hp['corpus_weight'], else answers)."""
        lens, gen_idx, cor_idx = self.lens, self.gen_idx, self.cor_idx
        src = cor_idx if len(cor_idx) and rng.random() < hp["corpus_weight"] else gen_idx
        first = int(rng.choice(src))
        T = lens[first]
        near = src[np.abs(lens[src] - T) <= max(16, T // 4)]
        b = max(1, hp["tokens_per_step"] // max(T, 1))
        return [first] + rng.choice(near, size=b - 1).tolist() if b > 1 else [first]

    def batch(self, idx):
        """tokens (B, T), positions (B, T), target weights (B, T) (0 on padding), features (B, T, dim). T is the
        longest sequence's length rounded up to a multiple of pad_to: padding rows come after every real row (the
        causal mask keeps them out of the real rows' attention) and weigh 0 in every loss term."""
        torch = self.torch
        idx = np.asarray(idx)
        T = -(-int(self.lens[idx].max()) // self.pad_to) * self.pad_to
        ar = np.arange(T)
        flat = np.where(ar[None] < self.lens[idx][:, None], self.off[idx][:, None] + ar[None], self.pad)  # (B, T)
        g = torch.from_numpy(flat).to(self.dev)
        pos = torch.from_numpy(self.start[idx][:, None] + ar[None]).to(self.dev)
        return self.tokens[g], pos, self.weights[g], self.feats[g]


def _features(champ, seqs, dev, log, what):
    """The champion's features of every sequence (tokens (n,) int64 from position 0), bf16 on dev."""
    import torch
    out = [None] * len(seqs)
    lens = [len(x) for x in seqs]
    order = sorted(range(len(seqs)), key=lambda i: lens[i])
    budget = 65536 if dev.type == "cuda" else 2048
    i = 0
    t0 = time.time()
    with torch.no_grad():
        while i < len(order):
            b = max(1, min(256, budget // max(lens[order[min(len(order) - 1, i + 255)]], 1)))
            idx = order[i:i + b]
            x = torch.zeros(len(idx), max(lens[j] for j in idx), dtype=torch.long, device=dev)
            for r, j in enumerate(idx):
                x[r, :lens[j]] = torch.from_numpy(seqs[j])
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                h = champ(x, return_features=True)                                   # (b, T, dim)
            for r, j in enumerate(idx):
                out[j] = h[r, :lens[j]].to(torch.bfloat16)
            i += b
    log(f"features of {len(seqs)} {what} sequences in {time.time() - t0:.1f}s")
    return out


def build_data(a, hp, champ, tok, dev, log):
    """Training and held-out sequences from gen.npz (+ corpus chunks), their features, the vocabulary subset."""
    from .head import frequency_subset
    g = np.load(a.gen)
    sha = str(g["champion_sha256"])
    if sha != a._champion_sha:
        raise SystemExit(f"{a.gen} was made with the champion {sha}, not {a._champion_sha}")
    pid, poff = g["prompt_ids"], g["prompt_off"]
    use = np.flatnonzero(g["done"] & ~g["refused"])
    # held out: greedy answers whose index hashes below eval_frac, at most eval_max of them (the lowest hashes), so
    # that a later call with more answers never moves a trained answer into the held-out set
    h = (use.astype(np.uint64) * np.uint64(2654435761) + np.uint64(a.seed)) % np.uint64(1 << 32) / float(1 << 32)
    cand = [(x, i) for x, i in zip(h, use) if g["temps"][i] == 0 and x < hp["eval_frac"]]
    eval_ids = {int(i) for _, i in sorted(cand)[:hp["eval_max"]]}
    train, held = [], []
    for i in use:
        p = pid[poff[i]:poff[i + 1]].astype(np.int64)
        y = g["ids"][g["off"][i]:g["off"][i + 1]].astype(np.int64)
        if len(y) == 0:
            continue
        s = np.concatenate([p, y])
        # row q's target is the token at q + 1: answer tokens weigh 1, prompt tokens prompt_weight, the last row 0
        w = np.where(np.arange(len(s)) + 1 >= len(p), 1.0, hp["prompt_weight"]).astype(np.float32)
        w[-1] = 0.0
        if i in eval_ids:
            if len(s) <= hp["max_len"]:
                held.append((s, len(p), len(y), bool(y[-1] in a._eos)))
            continue
        train.append((s, max(0, len(s) - hp["max_len"]), w))     # rows cut..: the last max_len
    answers = [g["ids"][g["off"][i]:g["off"][i + 1]] for i in use if i not in eval_ids]
    ids = frequency_subset(answers, champ.config.vocab_size, hp["vocab_subset"], always=a._eos) \
        if hp["vocab_subset"] else None
    n_gen = len(train)
    if hp["corpus_rows"] and hp["corpus_weight"] > 0:
        corpus = np.load(Path(a.data) / "corpus.npy")[:hp["corpus_rows"]]
        L = min(512, hp["max_len"])
        for row in corpus:
            for s in range(0, corpus.shape[1] - L + 1, L):
                c = row[s:s + L].astype(np.int64)
                w = np.ones(L, np.float32)
                w[-1] = 0.0
                train.append((c, 0, w))
    log(f"sequences: {n_gen} answers + {len(train) - n_gen} corpus chunks for training, {len(held)} held-out "
        f"greedy answers; answer tokens {sum(len(x) for x in answers)}")
    cov = None
    if ids is not None:
        inside = np.zeros(champ.config.vocab_size, bool)
        inside[ids] = True
        flat = np.concatenate(answers) if answers else np.zeros(0, np.int64)
        cov = float(inside[flat].mean()) if len(flat) else None
        log(f"vocabulary subset: {len(ids)} ids cover {cov} of the answer tokens")
    # features over whole sequences (the champion sees the full context), then each cut to its last max_len rows
    feats = [f[c:] for f, (_, c, _) in zip(_features(champ, [s[0] for s in train], dev, log, "training"), train)]
    train = [(s[c:], c, w[c:]) for s, c, w in train]
    # per-dimension std and mean row RMS of the answers' features (the regression scale and the fc init)
    sample = torch_cat([feats[i].float() for i in range(min(n_gen, 2000))])
    sigma = sample.std(0).clamp_min(1e-3 * float(sample.std()))
    rms = float(sample.pow(2).mean(-1).sqrt().mean())
    data = Data(train, feats, n_gen, dev)
    return data, held, ids, sigma, rms, {"train_answers": n_gen, "corpus_chunks": len(train) - n_gen,
                                         "held_out": len(held), "subset_coverage": cov,
                                         "gen_sha256": _sha(a.gen)}


def torch_cat(xs):
    import torch
    return torch.cat(xs, 0)


def load_champion(a, dev):
    """(tokenizer, the champion in torch, frozen); sets a._champion_sha and a._eos."""
    from exactspec.tokenizer import Tokenizer
    from . import data as D
    from .model import TorchLlama
    a._champion_sha = D.sha256_file(a.champion)
    tok = Tokenizer.from_gguf(a.champion)
    a._eos = [tok.id_of(n) for n in EOS_NAMES]
    champ = TorchLlama.from_gguf(a.champion).to(dev).eval()
    for p in champ.parameters():
        p.requires_grad_(False)
    return tok, champ


def new_head(a, champ, hp: dict, ids, rms: float, dev):
    """(config, net, AdamW) of a fresh head for the champion: weight decay 0.01 on matrices, none on norms."""
    import torch
    from exactspec.drafters.head import HeadConfig
    from .head import HeadNet
    cfg = HeadConfig.for_champion(champ.config, champion_sha256=a._champion_sha, window=hp["window"])
    net = HeadNet(cfg, champ.w("token_embd.weight"), champ.w("output_norm.weight"), ids).to(dev)
    net.init_weights(a.seed + 1, rms)
    opt = torch.optim.AdamW([{"params": [p for p in net.parameters() if p.ndim >= 2], "weight_decay": 0.01},
                             {"params": [p for p in net.parameters() if p.ndim < 2], "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(0.9, 0.95))
    return cfg, net, opt


def lr_at(hp: dict, step: int, frac: float) -> float:
    """Linear warm-up over hp['warmup'] steps, then cosine from 1x to 0.1x over the run's time fraction."""
    frac = min(1.0, max(0.0, frac))
    return hp["lr"] * min(1.0, (step + 1) / hp["warmup"]) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac)))


def train_step(net, opt, data, hp: dict, sigma, rng, step: int, lr: float, amp: bool):
    """One optimiser step on a drawn batch: (loss, per-level figures, gradient norm before clipping to 1)."""
    import torch
    from .head import head_loss
    for gr in opt.param_groups:
        gr["lr"] = lr
    tb, pb, wb, fb = data.batch(data.draw(hp, rng))
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=amp):
        filt = hp["filter_frac"] if step >= hp["warmup"] else 0.0
        loss, st = head_loss(net, fb.float() if not amp else fb, tb, pb, wb, depth=hp["depth"], sigma=sigma,
                             noise=hp["noise"], feat_weight=hp["feat_weight"], decay=hp["decay"],
                             filter_frac=filt)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    return loss, st, gn


def _sha(path) -> str:
    from exactspec.formats import sha256_file
    return sha256_file(path)


def evaluate(net, champ, held, dev, k_max=8):
    """Greedy chain tau for k = 1..k_max on held-out answers: the decode loop's rounds replayed exactly (runs of
    matches from each start), summed over answers (emitted / rounds), and acceptance by position."""
    import torch
    from .accept import simulate_runs
    from .head import chain_runs
    net.eval()
    totals = {k: [0, 0] for k in range(1, k_max + 1)}
    acc = {k: np.zeros((2, k)) for k in range(1, k_max + 1)}
    agree = n_tok = 0
    with torch.no_grad():
        for s, P, N, eos in held:
            x = torch.from_numpy(s)[None].to(dev)
            pos = torch.arange(len(s), device=dev)[None]
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                f = champ(x, return_features=True)
                run = chain_runs(net, f, x, pos, k_max)[0].cpu().numpy()           # (T,)
            r = run[P:P + N]                   # round starts at the answer's positions P .. P+N-1
            agree += int((r > 0).sum())
            n_tok += N
            for k in range(1, k_max + 1):
                sim = simulate_runs(r, k, N, eos)
                totals[k][0] += sim["emitted"]
                totals[k][1] += sim["rounds"]
                acc[k][0] += np.array(sim["acceptance_by_position"]) * sim["rounds"]
                acc[k][1] += sim["rounds"]
    net.train()
    return {"answers": len(held), "tokens": n_tok, "first_proposal_accepted": agree / max(1, n_tok),
            "tau_greedy": {k: round(v[0] / max(1, v[1]), 4) for k, v in totals.items()},
            "acceptance_by_position_k4": (acc[4][0] / np.maximum(acc[4][1], 1)).round(4).tolist()
            if k_max >= 4 else None}


def cmd_train(a) -> int:
    import torch
    from exactspec.drafters.head import head_memory
    from .head import export_head
    hp = dict(DEFAULTS)
    if a.tiny:
        hp.update(TINY)
    hp.update(VARIANTS[a.variant])
    for key in ("depth", "vocab_subset", "filter_frac", "window", "lr", "noise", "tokens_per_step", "max_len",
                "corpus_rows"):
        v = getattr(a, key, None)
        if v is not None:
            hp[key] = v
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = _log_to(out / f"head_{a.variant}.log", f"{a.variant}: ")
    dev = _device()
    torch.manual_seed(a.seed)
    tok, champ = load_champion(a, dev)
    data, held, ids, sigma, rms, dstats = build_data(a, hp, champ, tok, dev, log)
    ckpt = Path(a.ckpt_dir) / f"{a.variant}.pt"
    st = torch.load(ckpt, map_location=dev, weights_only=False) if a.resume and ckpt.exists() else None
    if st is not None:
        ids = st["ids"]                         # the subset the checkpoint was trained with (more answers since
        hp = st["hp"]                           # may rank the vocabulary differently); its hyper-parameters
    cfg, net, opt = new_head(a, champ, hp, ids, rms, dev)
    step, hist, spent = 0, [], 0.0
    if st is not None:
        net.load_state_dict(st["net"])
        opt.load_state_dict(st["opt"])
        step, hist, spent = st["step"], st["hist"], st["seconds"]
        log(f"resumed from {ckpt} at step {step} ({spent:.0f}s trained before)")
    rng = np.random.default_rng(a.seed + 17 + step)

    t0 = time.time()
    last_ckpt = t0
    budget = a.budget_s
    amp = dev.type == "cuda"

    def save():
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"net": net.state_dict(), "opt": opt.state_dict(), "step": step, "hist": hist,
                    "seconds": spent + time.time() - t0, "ids": ids, "hp": hp}, str(ckpt) + ".tmp")
        os.replace(str(ckpt) + ".tmp", ckpt)

    log(f"training {a.variant} {hp} for {budget}s on {dev}")
    while True:
        el = time.time() - t0
        if el > budget or (a.max_steps and step >= a.max_steps):
            break
        lr = lr_at(hp, step, el / budget)
        loss, st, gn = train_step(net, opt, data, hp, sigma, rng, step, lr, amp)
        if step % a.log_every == 0:
            hist.append({"step": step, "loss": round(float(loss.detach()), 4), "levels": st, "lr": lr,
                         "grad_norm": round(float(gn), 3), "s": round(spent + time.time() - t0, 1)})
            log(f"step {step} loss {float(loss.detach()):.4f} ce0 {st[0]['ce']:.3f} feat0 {st[0]['feat']:.3f} "
                f"lr {lr:.2e}")
        step += 1
        if time.time() - last_ckpt > a.ckpt_every:
            save()
            last_ckpt = time.time()
    save()
    ev = evaluate(net, champ, held, dev)
    log(f"eval: tau k=4 {ev['tau_greedy'][4]}, by position {ev['acceptance_by_position_k4']}")
    path = out / f"head_{a.variant}.gguf"
    training = {"variant": a.variant, "hp": hp, "steps": step, "seed": a.seed, "eval": ev}
    export_head(path, net, cfg, a.tensor_type, {k: v for k, v in training.items() if k != "eval"})
    rec = {"variant": a.variant, "hp": hp, "steps_done": step, "seconds": round(spent + time.time() - t0, 1),
           "seed": a.seed, "data": dstats, "eval": ev, "gguf": path.name, "gguf_sha256": _sha(path),
           "gguf_bytes": path.stat().st_size, "history": hist, "argv": sys.argv[1:],
           "head_params": cfg.n_params(),
           "memory_at_8192": head_memory(replace(cfg, vocab_subset=len(ids) if ids is not None else 0), 8192,
                                         weight_bytes=path.stat().st_size)}
    (out / f"head_{a.variant}.json").write_text(json.dumps(rec, indent=1))
    log(f"wrote {path} ({rec['gguf_bytes']} bytes)")
    return 0


# -- all -----------------------------------------------------------------------------------------------------------
def cmd_all(a) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = _log_to(out / "log.txt", "all: ")
    t0 = time.time()
    gen_out = Path(a.gen_out)
    if not (a.reuse_gen and gen_out.exists()):
        ga = argparse.Namespace(**{**vars(a), "budget_s": a.gen_budget_s, "reuse": a.resume})
        cmd_gen(ga)
    log(f"answers ready after {time.time() - t0:.0f}s")
    if a.after_gen:
        log(f"starting: {a.after_gen}")
        extra = subprocess.Popen(a.after_gen, shell=True)
    procs = {}
    env = dict(os.environ)
    for v in a.variants.split(","):
        cmd = [sys.executable, "-m", "exactspec_train.head_run", "train", "--champion", a.champion, "--data",
               a.data, "--workload", a.workload, "--gen", str(gen_out), "--variant", v, "--budget-s",
               str(a.budget_s), "--out", str(out), "--ckpt-dir", a.ckpt_dir, "--seed", str(a.seed),
               "--tensor-type", a.tensor_type] + (["--resume"] if a.resume else []) + (["--tiny"] if a.tiny else []) \
            + (["--max-steps", str(a.max_steps)] if a.max_steps else [])
        procs[v] = subprocess.Popen(cmd, env=env, stdout=open(out / f"stdout_{v}.txt", "w"),
                                    stderr=subprocess.STDOUT)
    codes = {v: p.wait() for v, p in procs.items()}
    if a.after_gen:
        codes["after_gen"] = extra.wait()
    run = {"argv": sys.argv[1:], "seconds": round(time.time() - t0, 1), "exit_codes": codes,
           "answers": answers_record(gen_out), "variants": {}}
    for v in procs:
        f = out / f"head_{v}.json"
        if f.exists():
            run["variants"][v] = json.loads(f.read_text())
            f.unlink()                               # folded into run.json (fewer files to bring back)
        lf = out / f"head_{v}.log"
        so = out / f"stdout_{v}.txt"
        if so.exists():
            tail = so.read_text()[-4000:]
            if codes[v]:
                run["variants"].setdefault(v, {})["error_tail"] = tail
            so.unlink()
        if lf.exists():
            with open(out / "log.txt", "a") as fh:
                fh.write(lf.read_text())
            lf.unlink()
    (out / "run.json").write_text(json.dumps(run, indent=1))
    log("summary, greedy tau at k = 4: " + json.dumps({v: (r.get("eval") or {}).get("tau_greedy", {}).get("4")
                                  for v, r in run["variants"].items()}))
    return 0 if not any(codes.values()) else 1


def answers_record(gen_out) -> dict:
    """What gen.npz holds, for run.json and the manifest: how many answers, refused, of how many prompts, its sha256."""
    g = np.load(gen_out)
    return {"done": int(g["done"].sum()), "refused": int(g["refused"].sum()), "prompts": len(g["done"]),
            "answer_tokens": int(len(g["ids"])), "gen_sha256": _sha(gen_out),
            "champion_sha256": str(g["champion_sha256"]), "max_new": int(g["max_new"]),
            "temps": {str(t): f for t, f in GEN_TEMPS.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exactspec_train.head_run")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--champion", required=True)
        p.add_argument("--data", required=True, help="exactspec_train.prep output")
        p.add_argument("--workload", required=True)
        p.add_argument("--seed", type=int, default=SEED_DEFAULT)
        p.add_argument("--tiny", action="store_true", help="smoke test: few prompts, tiny sizes")

    def gen_args(p):
        p.add_argument("--max-new", type=int, default=192)
        p.add_argument("--max-batch", type=int, default=1024)
        p.add_argument("--token-budget", type=int, default=400_000)
        p.add_argument("--max-prompts", type=int, default=0)

    def train_args(p):
        p.add_argument("--budget-s", type=float, default=300.0)
        p.add_argument("--out", required=True)
        p.add_argument("--ckpt-dir", default="/tmp/head/ckpt")
        p.add_argument("--ckpt-every", type=float, default=60.0)
        p.add_argument("--resume", action="store_true", help="continue from --ckpt-dir (and, for all, gen.npz)")
        p.add_argument("--tensor-type", default="Q8_0", choices=("Q8_0", "F16", "F32"))
        p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (smoke tests)")
        p.add_argument("--log-every", type=int, default=50)

    g = sub.add_parser("gen", help="the champion's answers -> gen.npz")
    common(g)
    gen_args(g)
    g.add_argument("--gen-out", required=True)
    g.add_argument("--budget-s", type=float, default=150.0)
    g.add_argument("--reuse", action="store_true", help="keep the answers of an existing gen.npz, answer the rest")
    t = sub.add_parser("train", help="train, evaluate and export one head variant")
    common(t)
    train_args(t)
    t.add_argument("--gen", required=True)
    t.add_argument("--variant", choices=sorted(VARIANTS), default="full")
    for key, kind in (("depth", int), ("vocab-subset", int), ("filter-frac", float), ("window", int), ("lr", float),
                      ("noise", float), ("tokens-per-step", int), ("max-len", int), ("corpus-rows", int)):
        t.add_argument(f"--{key}", type=kind, default=None, help="override the variant's value")
    al = sub.add_parser("all", help="gen, then every variant in parallel, then run.json")
    common(al)
    gen_args(al)
    train_args(al)
    al.add_argument("--gen-out", required=True)
    al.add_argument("--gen-budget-s", type=float, default=140.0)
    al.add_argument("--reuse-gen", action="store_true", help="use an existing gen.npz as it is")
    al.add_argument("--variants", default=",".join(VARIANTS))
    al.add_argument("--after-gen", default="", help="a shell command started once the answers exist (runs beside)")
    mu = sub.add_parser("multi", help="several runs in one process (shared data), interleaved by their step time")
    common(mu)
    train_args(mu)
    mu.add_argument("--gen", required=True)
    mu.add_argument("--plan", required=True, help="NAME:VARIANT:TOTAL_S:GROUP,... (exactspec_train.head_multi)")
    mu.add_argument("--workload-eval", action=argparse.BooleanOptionalAction, default=True)
    mu.add_argument("--workload-max-new", type=int, default=64)
    mu.add_argument("--stop-at", type=float, default=0.0, help="Unix time at which training stops (0: no limit)")
    mu.add_argument("--init", default="", help="NAME=HEAD.gguf,...: start these runs from a trained head's weights "
                    "and vocabulary subset (exactspec_train.head_multi.init_weights) instead of a fresh head")
    a = ap.parse_args(argv)
    if a.cmd == "multi":
        from .head_multi import cmd_multi
        return cmd_multi(a)
    return {"gen": cmd_gen, "train": cmd_train, "all": cmd_all}[a.cmd](a)


if __name__ == "__main__":
    raise SystemExit(main())
