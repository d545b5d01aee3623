"""Acceptance of a draft head (and the standalone draft beside it) on the preregistered workload (CPython, the
numpy reference backend), with the adaptive schedules.

    python build.py bench head_acceptance --head HEAD.gguf [--head OTHER.gguf ...] [--draft DRAFT.gguf]
        [--per-stratum N] [--max-new-tokens 64] [--validate N] [--json OUT] [--cache DIR]

For each workload prompt (all 136 by default; answers capped at --max-new-tokens) the champion answers alone
through the product's loop (exactspec.decode.generate, no speculation): greedy, and coupled at T = 0.7 (seed 0).
Its features along each answer come from the same passes (ReferenceModel keep_features); trajectories and features
are cached (--cache). Then, for each head, the head's own chain of 8 proposals from EVERY round start along the
answer (exactspec_train.accept.head_chains: positions before the start from the champion's features, then its
predicted ones, each proposal fed back; greedy picks, or coupled picks with the position's own noise) gives the
accepted run from each start and the head's top probability at each chain row; exactspec_train.accept.simulate_runs
replays the decode loop's rounds over them exactly: fixed k = 1..8, the additive schedule (start k, +1 after a
fully accepted round, -1 after a rejected first proposal, limit --k-limit), the confidence stop (thresholds
--stops) at fixed k and with the additive schedule. The standalone draft runs teacher-forced (its proposals are
teacher-forced up to the first mismatch: exact too). --validate N: the first N prompts of every stratum also run
through exactspec.decode.generate with the first head at k = 4, greedy and coupled: the answer must equal the
champion's and the loop's tau, acceptance by position and pass counts must equal the simulation's.

Predicted speedup of each schedule, from its simulated counts (emitted E, rounds R, proposed G, draft passes D):
    speedup = E * T_c / (D * T_d + R * T_v0 + G * T_v1)
with two cost models: 'reference' (this machine's numpy timings: T_c one champion pass, T_verify(g) = T_v0 + g T_v1
fitted over g = 1..8, T_d one head step) and 'gpu' (verification of up to 9 rows costs one pass: T_v0 = T_c,
T_v1 = 0; T_d = --gpu-draft-cost x T_c, the issue's budget of 0.15 for a head step by default).

--shard I/N runs only the prompts whose index is I modulo N (the --validate prompts stay the first N of every
stratum of ALL the prompts; each shard checks those it holds) and writes its raw per-prompt counts, checks and
timings to --json; --merge SHARD.json ... makes the one report of all of them (every prompt exactly once, the same
heads and settings; each timing is the median over the shards), as an unsharded run would print it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # see py/bench/reference.py: one thread is faster when shared

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from exactspec.chat import encode_chat  # noqa: E402
from exactspec.decode import GenerateConfig, generate  # noqa: E402
from exactspec.drafters.head import HeadModel  # noqa: E402
from exactspec.formats import sha256_file  # noqa: E402
from exactspec.kv import TrackedCache  # noqa: E402
from exactspec.reference import ReferenceModel  # noqa: E402
from exactspec.sampling import Rng, SamplingParams, scaled_logits  # noqa: E402
from exactspec.tokenizer import Tokenizer  # noqa: E402
from exactspec_train.accept import head_chains, runs_of, simulate_runs, stop_lengths  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402
from bench._shard import in_shard, parse_shard  # noqa: E402
from bench.draft_acceptance import time_forward  # noqa: E402  (a pass of n tokens, all rows out: what a verify is)

CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
DRAFT = ROOT / "static" / "models" / "draft-smollm2-kd.gguf"
KS = list(range(1, 9))
TEMP, SEED, EOS = 0.7, 0, 2
MODES = ("greedy", "coupled")


def picker(mode: str, vocab: int):
    if mode == "greedy":
        return lambda row, t: int(np.argmax(row))
    rng, params = Rng(SEED), SamplingParams(TEMP)
    return lambda row, t: int(np.argmax(scaled_logits(row, params) + rng.gumbel(t, vocab)))


def gen_cfg(mode: str, max_new: int, **kw) -> GenerateConfig:
    return GenerateConfig(**{"max_new_tokens": max_new, "temperature": 0.0 if mode == "greedy" else TEMP,
                             "seed": SEED, "adaptive": False, "k": 0, "drafter": "none", **kw})


def trajectories(champ, tok, items, max_new_cap, cache: Path, log):
    """Per prompt and mode: prompt ids, the champion's answer (EOS included when it ended with one), the features of
    positions 0 .. P + N - 2 (cached by workload id)."""
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for n, it in enumerate(items):
        prompt = encode_chat(tok, workload_messages(it))
        max_new = min(max_new_cap, it["max_new_tokens"])
        f = cache / f"{it['id']}_{max_new}.npz"
        if f.exists():
            z = np.load(f)
            rec = {"id": it["id"], "stratum": it["stratum"], "prompt": prompt, "max_new": max_new}
            for m in MODES:
                rec[m] = (z[f"{m}_y"].tolist(), z[f"{m}_f"])
            out.append(rec)
            continue
        t0 = time.time()
        cached = TrackedCache(champ)                   # the coupled answer reuses the greedy one's prompt prefix
        rec = {"id": it["id"], "stratum": it["stratum"], "prompt": prompt, "max_new": max_new}
        for m in MODES:
            r = generate(cached, prompt, gen_cfg(m, max_new), eos_ids=[EOS])
            y = r.token_ids + ([EOS] if r.finish_reason == "eos" else [])
            need = len(prompt) + len(y) - 2                                   # positions 0 .. P+N-3 are read
            rec[m] = (y, champ.feature_rows(0, need).copy())
        np.savez(f, **{f"{m}_y": np.asarray(rec[m][0]) for m in MODES}, **{f"{m}_f": rec[m][1] for m in MODES})
        out.append(rec)
        log(f"[{n + 1}/{len(items)}] {it['id']}: prompt {len(prompt)}, answers {len(rec['greedy'][0])} / "
            f"{len(rec['coupled'][0])} tokens, {time.time() - t0:.1f}s")
    return out


def draft_runs(draft: ReferenceModel, prompt, y, mode):
    draft.truncate(0)
    q = draft.forward(list(prompt) + y[:-1], 0, len(y))                        # (N, vocab)
    pick = picker(mode, q.shape[1])
    return runs_of(np.array([pick(q[i], len(prompt) + i) for i in range(len(y))]) == np.asarray(y))


def schedules(stops, k_limit):
    """name -> simulate_runs keywords (k, schedule, stop threshold)."""
    s = {f"fixed k={k}": dict(k=k) for k in KS}
    for k0 in (2, 4):
        s[f"additive from {k0} (limit {k_limit})"] = dict(k=k0, schedule="additive", k_limit=k_limit)
    for th in stops:
        for k in (4, 8):
            s[f"stop {th} k={k}"] = dict(k=k, stop=th)
        s[f"additive from 4 + stop {th}"] = dict(k=4, schedule="additive", k_limit=k_limit, stop=th)
    return s


def simulate(chain, max_new, eos, spec):
    spec = dict(spec)
    th = spec.pop("stop", 0.0)
    stop_at = stop_lengths(chain["top"], th) if th else None
    return simulate_runs(chain["run"], max_new=max_new, ends_with_eos=eos, stop_at=stop_at, **spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head", action="append", help="draft head GGUF (repeat for ablations; the "
                    "first one gets the schedules, the full chains and --validate)")
    ap.add_argument("--draft", default=str(DRAFT), help="the standalone draft beside it ('' for none)")
    ap.add_argument("--per-stratum", type=int, default=0, help="first N prompts of each stratum (0: all 136)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--validate", type=int, default=1, help="prompts per stratum checked against the real loop")
    ap.add_argument("--stops", default="0.3,0.5,0.7")
    ap.add_argument("--k-limit", type=int, default=8)
    ap.add_argument("--gpu-draft-cost", type=float, default=0.15)
    ap.add_argument("--workload", default=str(ROOT / "tests" / "data" / "workload.jsonl"))
    ap.add_argument("--cache", default=str(ROOT / ".devcarry" / "head-bench"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--shard", default=None, help="I/N: only the prompts whose index is I modulo N")
    ap.add_argument("--merge", nargs="+", default=None, help="the shards' --json files: report them as one run")
    a = ap.parse_args(argv)
    if a.merge:
        return merge(a.merge, a.json)
    if not a.head:
        ap.error("--head is required (or --merge)")
    shard = parse_shard(a.shard)
    if shard and not a.json:
        ap.error("--shard needs --json (the shard's file for --merge)")
    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:7.1f}s] {msg}", flush=True)

    champ_sha = sha256_file(CHAMPION)
    tok = Tokenizer.from_gguf(CHAMPION)
    champ = ReferenceModel.from_file(CHAMPION, max_len=4096, keep_features=True)
    heads = {Path(p).stem: HeadModel.from_file(p, champ, champ_sha, max_len=4096) for p in a.head}
    main_head = next(iter(heads))
    draft = ReferenceModel.from_file(a.draft, max_len=4096) if a.draft else None
    items = load_workload(a.workload)
    strata = list(dict.fromkeys(it["stratum"] for it in items))
    if a.per_stratum:
        items = [it for s in strata for it in [x for x in items if x["stratum"] == s][:a.per_stratum]]
    validate_ids = {it["id"] for s in strata for it in [x for x in items if x["stratum"] == s][:a.validate]}
    n_all = len(items)
    items = [it for i, it in enumerate(items) if in_shard(i, shard)]
    stops = [float(x) for x in a.stops.split(",") if x]
    specs = schedules(stops, a.k_limit)
    log(json.dumps({"prompts": len(items), "max_new_tokens": a.max_new_tokens, "heads": list(heads),
                    "draft": Path(a.draft).name if a.draft else None}))
    trajs = trajectories(champ, tok, items, a.max_new_tokens, Path(a.cache), log)

    # per prompt, mode, drafter: the simulated counts of every schedule
    per = []
    for n, tr in enumerate(trajs):
        t0 = time.time()
        P = len(tr["prompt"])
        rec = {"id": tr["id"], "stratum": tr["stratum"], "sims": {}, "tokens": {}}
        for m in MODES:
            y, feats = tr[m]
            eos = y[-1] == EOS
            rec["tokens"][m] = len(y)
            for name, head in heads.items():
                full = name == main_head
                ch = head_chains(head, feats, tr["prompt"], y, 8, picker(m, champ.config.vocab_size), full=full)
                sims = {s: simulate(ch, tr["max_new"], eos, spec) for s, spec in specs.items()
                        if full or s.startswith("fixed")}
                rec["sims"][(name, m)] = sims
            if draft is not None:
                r = draft_runs(draft, tr["prompt"], y, m)
                rec["sims"][("draft", m)] = {f"fixed k={k}": simulate_runs(r, k, tr["max_new"], eos) for k in KS}
        per.append(rec)
        log(f"[{n + 1}/{len(trajs)}] {tr['id']}: greedy tau k=4 " + ", ".join(
            f"{d}: {rec['sims'][(d, 'greedy')]['fixed k=4']['tau']:.2f}"
            for d in list(heads) + (["draft"] if draft is not None else [])) + f" ({time.time() - t0:.1f}s, P={P})")

    # the real loop on a subset: same answer as the champion alone, same counts as the simulation
    checks = []
    if a.validate:
        head = heads[main_head]
        for tr, rec in zip(trajs, per):
            if tr["id"] not in validate_ids:
                continue
            for m in MODES:
                head.bind(champ)
                r = generate(champ, tr["prompt"], gen_cfg(m, tr["max_new"], k=4, drafter="head", head_copy=False),
                             draft=head, eos_ids=[EOS])           # (the head alone, as simulated)
                want = [t for t in tr[m][0] if t != EOS]
                sim = rec["sims"][(main_head, m)]["fixed k=4"]
                ok = (r.token_ids == want and abs(r.stats["tau"] - sim["tau"]) < 1e-12
                      and r.stats["proposed"] == sim["proposed"]
                      and np.allclose(r.stats["acceptance_by_position"], sim["acceptance_by_position"]))
                checks.append({"id": tr["id"], "mode": m, "identical": r.token_ids == want, "counts_equal": ok,
                               "tau_loop": r.stats["tau"], "tau_sim": sim["tau"]})
                if not ok:
                    log(f"VALIDATION FAILED {tr['id']} {m}: {checks[-1]}")
        log(f"validation: {sum(c['counts_equal'] for c in checks)}/{len(checks)} runs of the real loop equal the "
            "simulation (tokens and counts)")

    # timings (this machine): champion pass, verify of g + 1 rows, a head step and a draft step at one context
    ctx = next((tr["prompt"] for tr in trajs if len(tr["prompt"]) < 200), min((tr["prompt"] for tr in trajs), key=len)[:200])
    t_c = time_forward(champ, ctx, 1)
    t_ver = {g: time_forward(champ, ctx, g + 1) for g in KS}
    slope, icpt = np.polyfit(list(t_ver), list(t_ver.values()), 1)
    champ.truncate(0)
    champ.forward(ctx, 0, 1)
    t_d = {}
    for name, head in heads.items():
        head.bind(champ)
        head.forward(ctx[:-1], 0, 1)
        ts = []
        for _ in range(7):
            head.truncate(len(ctx) - 1)
            t0 = time.perf_counter()
            head.forward([ctx[-1]], len(ctx) - 1, 1)
            ts.append(time.perf_counter() - t0)
        t_d[name] = float(np.median(ts))
    if draft is not None:
        t_d["draft"] = time_forward(draft, ctx, 1)
    timing = {"champion_1": t_c, "champion_verify": t_ver, "verify_fit": [icpt, slope], "draft_step": t_d}
    meta = {"max_new_tokens": a.max_new_tokens, "champion_sha256": champ_sha,
            "heads": {n: {"file": Path(p).name, "sha256": sha256_file(p)} for n, p in zip(heads, a.head)},
            "draft": {"file": Path(a.draft).name, "sha256": sha256_file(a.draft)} if draft is not None else None,
            "gpu_draft_cost": a.gpu_draft_cost, "strata": strata, "drafters": list(heads) + (["draft"] if draft
                                                                                               is not None else []),
            "prompts_all": n_all, "validate": a.validate}
    if shard:
        Path(a.json).write_text(json.dumps({"shard": a.shard, "meta": meta, "timing_s": timing, "checks": checks,
                                            "per_prompt": [raw(r) for r in per],
                                            "ids": [tr["id"] for tr in trajs]}, indent=1))
        log(f"shard {a.shard}: {len(per)} prompts written to {a.json}")
        return 0 if all(c["counts_equal"] for c in checks) else 1
    return report(per, checks, timing, meta, a.json)


def raw(r):
    """A per-prompt record as JSON: the (drafter, mode) keys as 'drafter|mode'."""
    return {**{k: v for k, v in r.items() if k != "sims"}, "sims": {f"{d}|{m}": v for (d, m), v in r["sims"].items()}}


def unraw(r):
    return {**{k: v for k, v in r.items() if k != "sims"},
            "sims": {tuple(key.split("|")): v for key, v in r["sims"].items()}}


def merge(files, out) -> int:
    """One report from the shards' JSON files: every prompt exactly once, the same heads and settings."""
    shards = [json.loads(Path(f).read_text()) for f in files]
    meta = shards[0]["meta"]
    for f, d in zip(files, shards):
        if d["meta"] != meta:
            raise SystemExit(f"{f}: heads or settings differ from {files[0]}'s: not shards of one run")
    ids = [i for d in shards for i in d["ids"]]
    if len(ids) != meta["prompts_all"] or len(set(ids)) != len(ids):
        raise SystemExit(f"the shards hold {len(set(ids))} distinct of {meta['prompts_all']} prompts "
                         f"({len(ids) - len(set(ids))} twice)")
    per = sorted((unraw(r) for d in shards for r in d["per_prompt"]), key=lambda r: r["id"])
    checks = [c for d in shards for c in d["checks"]]
    t = [d["timing_s"] for d in shards]
    med = lambda xs: float(np.median(xs))  # noqa: E731
    timing = {"champion_1": med([x["champion_1"] for x in t]),
              "champion_verify": {g: med([x["champion_verify"][str(g)] for x in t]) for g in KS},   # (JSON keys)
              "draft_step": {d: med([x["draft_step"][d] for x in t]) for d in t[0]["draft_step"]}}
    slope, icpt = np.polyfit(KS, [timing["champion_verify"][g] for g in KS], 1)
    timing["verify_fit"] = [float(icpt), float(slope)]
    timing["shards"] = len(files)
    return report(per, checks, timing, meta, out)


def report(per, checks, timing, meta, json_out) -> int:
    """Aggregate the per-prompt simulated counts per drafter, mode, stratum and schedule; print the tables."""
    t_c, t_d = timing["champion_1"], timing["draft_step"]
    icpt, slope = timing["verify_fit"]
    strata, drafters = meta["strata"], meta["drafters"]
    main_head = drafters[0]
    models = {"reference": lambda d: (t_d[d], icpt, slope),
              "gpu": lambda d: (meta["gpu_draft_cost"] * t_c, t_c, 0.0)}

    def agg(recs, d, m, s):
        tot = {k: sum(r["sims"][(d, m)][s][k] for r in recs) for k in ("emitted", "rounds", "proposed",
                                                                        "draft_passes")}
        acc = np.array([0.0] * 8)
        cnt = np.array([0.0] * 8)
        for r in recs:
            v = r["sims"][(d, m)][s]
            ap_ = np.array(v["acceptance_by_position"])
            n_ = len(ap_)
            acc[:n_] += ap_ * v["rounds"]
            cnt[:n_] += v["rounds"]
        row = {"tau": round(tot["emitted"] / max(1, tot["rounds"]), 3), **tot,
               "acceptance_by_position": (acc / np.maximum(cnt, 1)).round(3).tolist()}
        for cm, f in models.items():
            td, v0, v1 = f(d)
            cost = tot["draft_passes"] * td + tot["rounds"] * v0 + tot["proposed"] * v1
            row[f"speedup_{cm}"] = round(tot["emitted"] * t_c / max(cost, 1e-12), 3)
        return row

    summary = {"prompts": len(per), "max_new_tokens": meta["max_new_tokens"], "temperature": TEMP, "seed": SEED,
               "champion_sha256": meta["champion_sha256"], "heads": meta["heads"], "draft": meta["draft"],
               "timing_s": timing,
               "gpu_model": {"draft_cost_over_champion": meta["gpu_draft_cost"], "verify": "one pass for <= 9 rows"},
               "validate": {"runs": len(checks), "all_equal": all(c["counts_equal"] for c in checks),
                            "checks": checks},
               "by_drafter": {}}
    for d in drafters:
        out = {}
        for m in MODES:
            names = list(per[0]["sims"][(d, m)])
            out[m] = {}
            for s_ in strata + ["ALL"]:
                recs = [r for r in per if s_ == "ALL" or r["stratum"] == s_]
                if recs:
                    out[m][s_] = {name: agg(recs, d, m, name) for name in names}
        summary["by_drafter"][d] = out

    # tables
    for d in drafters:
        for m in MODES:
            t = summary["by_drafter"][d][m]
            print(f"\n## {d}, {m}: tau for k = 1..8 (fixed), all {len(per)} prompts")
            print("| stratum | " + " | ".join(f"k={k}" for k in KS) + " | acceptance by position (k=8) |")
            print("|---|" + "---|" * (len(KS) + 1))
            for s_, row in t.items():
                print(f"| {s_} | " + " | ".join(f"{row[f'fixed k={k}']['tau']:.2f}" for k in KS) + " | "
                      + " ".join(f"{x:.2f}" for x in row["fixed k=8"]["acceptance_by_position"]) + " |")
    for m in MODES:
        t = summary["by_drafter"][main_head][m]
        names = [n for n in t["ALL"] if not n.startswith("fixed") or n in ("fixed k=4", "fixed k=8")]
        print(f"\n## {main_head}, {m}: schedules -- tau / predicted speedup, reference model / gpu model")
        print("| stratum | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for s_, row in t.items():
            print(f"| {s_} | " + " | ".join(f"{row[n]['tau']:.2f} / {row[n]['speedup_reference']:.2f} / "
                                            f"{row[n]['speedup_gpu']:.2f}" for n in names) + " |")
    print("\n" + json.dumps({"timing_s": summary["timing_s"], "validate": {k: v for k, v in summary["validate"].items()
                                                                          if k != "checks"}}))
    if json_out:
        Path(json_out).write_text(json.dumps({"summary": summary, "per_prompt": [raw(r) for r in per]}, indent=1))
    return 0 if all(c["counts_equal"] for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
