"""Several draft-head runs in ONE process on one GPU: the champion, the answers and their features are loaded once
and shared, and a scheduler interleaves the runs' steps by their own measured step time.

    python -m exactspec_train.head_run multi --champion GGUF --data DIR --workload W --gen /tmp/gen/gen.npz \\
        --plan full:full:80:0,no-multistep:no-multistep:80:0,no-subset:no-subset:80:0,no-filter:no-filter:80:0,long:full:600:1 \\
        --budget-s 420 --out OUT [--resume]

A plan entry is NAME:VARIANT:TOTAL_S:GROUP. TOTAL_S is the run's own training time (GPU-synchronised wall time of
its steps, the data and evaluation not counted): its learning-rate schedule (warm-up, then cosine to 0.1x) spans
TOTAL_S, and the run stops there. The scheduler runs the lowest GROUP that has unfinished runs, inside it always the
run that has spent the smallest fraction of its TOTAL_S, so the runs of a group progress together and end together,
each with the same training time when their TOTAL_S are equal (an ablation at equal compute; their step counts
differ with their cost per step). --budget-s bounds this call's training (wall clock), as does --stop-at (a Unix time: a device call's deadline
minus what the evaluation needs); --resume continues every run
from --ckpt-dir (its step, optimiser, schedule position and time spent), so a schedule can span several calls.

At the end (budget, or every run done) each run is evaluated on the held-out greedy answers (head_run.evaluate) and,
when --workload-eval is on (default), on the champion's greedy 64-token answers to the 136 workload prompts, per
stratum (a proxy made with the torch champion in bf16: the figures of record come from bench head_acceptance on
the reference), and exported to OUT/head_<NAME>.gguf; OUT/run.json holds every run's record.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np


@dataclass
class PlanEntry:
    name: str
    variant: str
    total_s: float
    group: int


def parse_plan(text: str, variants: dict) -> list:
    """'NAME:VARIANT:TOTAL_S:GROUP,...' -> [PlanEntry]; names unique, variants known, TOTAL_S > 0."""
    out, seen = [], set()
    for part in [p for p in text.split(",") if p.strip()]:
        bits = part.strip().split(":")
        if len(bits) != 4:
            raise ValueError(f"plan entry {part!r}: expected NAME:VARIANT:TOTAL_S:GROUP")
        name, variant, total, group = bits
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            raise ValueError(f"plan entry {part!r}: the name must be letters, digits, '-' or '_'")
        if name in seen:
            raise ValueError(f"plan entry {part!r}: the name {name!r} is used twice")
        if variant not in variants:
            raise ValueError(f"plan entry {part!r}: unknown variant {variant!r} (known: {', '.join(sorted(variants))})")
        t = float(total)
        if not t > 0:
            raise ValueError(f"plan entry {part!r}: TOTAL_S must be > 0")
        seen.add(name)
        out.append(PlanEntry(name, variant, t, int(group)))
    if not out:
        raise ValueError("the plan is empty")
    return out


def parse_init(text: str, plan: list) -> dict:
    """{run name: head GGUF path} of --init NAME=PATH,... (every NAME a run of the plan)."""
    out = {}
    names = {e.name for e in plan}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, path = item.partition("=")
        if not sep or not path or name not in names:
            raise ValueError(f"--init {item!r}: want NAME=HEAD.gguf with NAME one of the plan's runs {sorted(names)}")
        out[name] = Path(path)
    return out


def init_weights(path, hp: dict, champion_config) -> tuple:
    """(weights by name, vocab_ids or None) of a trained head to start a run from: its window and its vocabulary
    subset (or none) must be the run's (hp), and it must be a head for this champion's shape (float32 weights,
    dequantized: a Q8_0 head starts from its rounded weights)."""
    from exactspec.drafters.head import HeadConfig, read_head_gguf
    cfg, weights, ids = read_head_gguf(path)
    want = HeadConfig.for_champion(champion_config, window=hp["window"])
    for key in ("dim", "hidden_dim", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "window"):
        if getattr(cfg, key) != getattr(want, key):
            raise ValueError(f"--init {path}: its {key} is {getattr(cfg, key)}, the run's is {getattr(want, key)}")
    if bool(hp["vocab_subset"]) != (ids is not None):
        raise ValueError(f"--init {path}: " + ("it has a vocabulary subset, the run has none" if ids is not None
                                               else "it has no vocabulary subset, the run has one"))
    return weights, ids


def pick_next(entries: list, spent: dict) -> str | None:
    """The run to step next: in the lowest group with a run whose spent time is below its total, the run with the
    smallest spent/total (ties: plan order); None when every run is done."""
    live = [e for e in entries if spent[e.name] < e.total_s]
    if not live:
        return None
    g = min(e.group for e in live)
    best = None
    for e in live:
        if e.group == g and (best is None or spent[e.name] / e.total_s < spent[best.name] / best.total_s):
            best = e
    return best.name


@dataclass
class Run:
    entry: PlanEntry
    hp: dict
    ids: object
    net: object
    opt: object
    step: int = 0
    spent: float = 0.0
    hist: list = field(default_factory=list)
    evals: dict | None = None             # {'step', 'held', 'workload'}: the last evaluation, kept in the checkpoint


def cmd_multi(a) -> int:
    import torch
    from exactspec.drafters.head import HeadConfig, head_memory
    from .head import export_head
    from .head_run import (DEFAULTS, TINY, VARIANTS, _device, _log_to, _sha, answers_record, build_data, evaluate,
                           load_champion, lr_at, new_head, train_step)
    plan = parse_plan(a.plan, VARIANTS)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ck = Path(a.ckpt_dir)
    ck.mkdir(parents=True, exist_ok=True)
    log = _log_to(out / "log.txt", "multi: ")
    dev = _device()
    torch.manual_seed(a.seed)
    tok, champ = load_champion(a, dev)
    base = dict(DEFAULTS)
    if a.tiny:
        base.update(TINY)
    # the data depend only on the hyper-parameters every variant shares (max_len, weights, corpus): one copy, with
    # the vocabulary subset of the defaults (the variants either keep it or drop it)
    data, held, subset_ids, sigma, rms, dstats = build_data(a, base, champ, tok, dev, log)
    inits = parse_init(getattr(a, "init", ""), plan)
    runs = {}
    for e in plan:
        hp = dict(base)
        hp.update(VARIANTS[e.variant])
        path = ck / f"{e.name}.pt"
        st = torch.load(path, map_location=dev, weights_only=False) if a.resume and path.exists() else None
        if st is not None:
            hp, ids = st["hp"], st["ids"]
        elif hp["vocab_subset"] not in (0, base["vocab_subset"]):
            raise ValueError(f"{e.name}: a vocabulary subset of {hp['vocab_subset']} rows (the data have "
                             f"{base['vocab_subset']} or none)")
        else:
            ids = subset_ids if hp["vocab_subset"] else None
        w0 = None
        if st is None and e.name in inits:     # a trained head's weights and subset (its targets: the same rows)
            w0, ids = init_weights(inits[e.name], hp, champ.config)
            hp = dict(hp, init=str(inits[e.name]), init_sha256=_sha(inits[e.name]))
        _, net, opt = new_head(a, champ, hp, ids, rms, dev)
        if w0 is not None:
            net.load_numpy(w0)
            log(f"{e.name}: starts from {inits[e.name]} ({len(ids) if ids is not None else 'all'} vocabulary rows)")
        r = Run(e, hp, ids, net, opt)
        if st is not None:
            net.load_state_dict(st["net"])
            opt.load_state_dict(st["opt"])
            r.step, r.spent, r.hist, r.evals = st["step"], st["spent"], st["hist"], st.get("evals")
            log(f"{e.name}: resumed at step {r.step}, {r.spent:.0f} of {e.total_s:.0f} s trained")
        runs[e.name] = r
    rng = np.random.default_rng(a.seed + 17 + sum(r.step for r in runs.values()))
    def save(r):
        path = ck / f"{r.entry.name}.pt"
        torch.save({"net": r.net.state_dict(), "opt": r.opt.state_dict(), "step": r.step, "spent": r.spent,
                    "hist": r.hist, "ids": r.ids, "hp": r.hp, "evals": r.evals}, str(path) + ".tmp")
        os.replace(str(path) + ".tmp", path)

    amp = dev.type == "cuda"
    sync = torch.cuda.synchronize if amp else (lambda: None)
    t0 = time.time()
    last_ckpt = t0
    log("plan: " + "; ".join(f"{e.name} = {e.variant} for {e.total_s:.0f} s (group {e.group})" for e in plan)
        + f"; this call trains for at most {a.budget_s:.0f} s")
    stop = t0 + a.budget_s if not a.stop_at else min(t0 + a.budget_s, a.stop_at)
    while time.time() < stop:
        name = pick_next(plan, {n: r.spent for n, r in runs.items()})
        if name is None:
            break
        r = runs[name]
        if a.max_steps and r.step >= a.max_steps:
            r.spent = r.entry.total_s                  # (smoke tests: a step cap instead of time)
            continue
        lr = lr_at(r.hp, r.step, r.spent / r.entry.total_s)
        ts = time.time()
        loss, st, gn = train_step(r.net, r.opt, data, r.hp, sigma, rng, r.step, lr, amp)
        sync()
        r.spent += time.time() - ts
        if r.step % a.log_every == 0:
            r.hist.append({"step": r.step, "loss": round(float(loss.detach()), 4), "levels": st, "lr": lr,
                           "grad_norm": round(float(gn), 3), "s": round(r.spent, 1)})
            log(f"{name}: step {r.step} loss {float(loss.detach()):.4f} ce0 {st[0]['ce']:.3f} lr {lr:.2e} "
                f"({r.spent:.0f}/{r.entry.total_s:.0f} s)")
        r.step += 1
        if time.time() - last_ckpt > a.ckpt_every:
            for x in runs.values():
                save(x)
            last_ckpt = time.time()
    for x in runs.values():
        save(x)
    log(f"training stopped after {time.time() - t0:.0f} s: " +
        ", ".join(f"{n} {r.step} steps {r.spent:.0f}/{r.entry.total_s:.0f} s" for n, r in runs.items()))
    wl = workload_trajectories(a, champ, tok, dev, log) if a.workload_eval else None
    rec = {"argv": sys.argv[1:], "plan": [vars(e) for e in plan], "data": dstats, "answers": answers_record(a.gen),
           "runs": {}}
    for n, r in runs.items():
        old = r.evals
        if old and old["step"] == r.step and (old["workload"] is not None or not wl):
            ev, wev = old["held"], old["workload"]             # unchanged since the call that evaluated it
            log(f"{n}: evaluation of step {r.step} reused from its checkpoint")
        else:
            ev = evaluate(r.net, champ, held, dev)
            wev = {s: evaluate(r.net, champ, items, dev) for s, items in wl.items()} if wl else None
            r.evals = {"step": r.step, "held": ev, "workload": wev}
            save(r)
        cfg = HeadConfig.for_champion(champ.config, champion_sha256=a._champion_sha, window=r.hp["window"])
        path = out / f"head_{n}.gguf"
        training = {"variant": r.entry.variant, "run": n, "hp": r.hp, "steps": r.step,
                    "train_seconds": round(r.spent, 1), "seed": a.seed}
        export_head(path, r.net, cfg, a.tensor_type, training)
        rec["runs"][n] = {"variant": r.entry.variant, "hp": r.hp, "steps_done": r.step,
                          "train_seconds": round(r.spent, 1), "total_s": r.entry.total_s,
                          "done": r.spent >= r.entry.total_s, "eval": ev, "workload_proxy": wev,
                          "gguf": path.name, "gguf_sha256": _sha(path), "gguf_bytes": path.stat().st_size,
                          "head_params": cfg.n_params(),
                          "memory_at_8192": head_memory(replace(cfg, vocab_subset=len(r.ids) if r.ids is not None
                                                                else 0), 8192, weight_bytes=path.stat().st_size),
                          "history": r.hist}
        allw = wev.get("all") if wev else None
        log(f"{n}: held-out tau k=4 {ev['tau_greedy'][4]} by position {ev['acceptance_by_position_k4']}"
            + (f"; workload proxy tau k=4 {allw['tau_greedy'][4]}" if allw else ""))
    (out / "run.json").write_text(json.dumps(rec, indent=1))
    log("summary, tau at k = 4 (held-out / workload proxy): " + json.dumps(
        {n: [x["eval"]["tau_greedy"][4], (x["workload_proxy"] or {}).get("all", {}).get("tau_greedy", {}).get(4)]
         for n, x in rec["runs"].items()}))
    return 0


def workload_trajectories(a, champ, tok, dev, log) -> dict:
    """{stratum: [(seq, P, N, ends_with_eos)], 'all': every item}: the torch champion's greedy answers (bf16 on a
    GPU, at most --workload-max-new tokens) to the workload's prompts, rendered as the product renders them."""
    import torch
    from exactspec.chat import encode_chat
    from .data import load_workload, workload_messages
    from .teacher import generate_all
    items = load_workload(a.workload)
    if a.tiny:
        items = items[:4]
    prompts = [list(encode_chat(tok, workload_messages(it))) for it in items]
    t0 = time.time()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    gen_model = copy.deepcopy(champ).to(dtype) if dev.type == "cuda" else champ      # (training keeps f32 weights)
    ys = generate_all(gen_model, prompts, [0.0] * len(prompts),
                      a.workload_max_new, a._eos[0], a.seed, dev, token_budget=400_000 if dev.type == "cuda" else 4096,
                      max_batch=256, log=log, order="sorted", dtype=dtype)
    del gen_model
    out = {"all": []}
    for it, p, y in zip(items, prompts, ys):
        if not y:
            continue
        s = np.asarray(list(p) + list(y), dtype=np.int64)
        rec = (s, len(p), len(y), bool(y[-1] in a._eos))
        out.setdefault(it["stratum"], []).append(rec)
        out["all"].append(rec)
    log(f"workload trajectories: {len(out['all'])} answers, {sum(r[2] for r in out['all'])} tokens, "
        f"{time.time() - t0:.1f} s")
    return out
