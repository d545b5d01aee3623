"""Acceptance of the shipped draft(s) against SmolLM2 on the preregistered workload (CPython, reference backend).

    python build.py bench draft_acceptance [--per-stratum N] [--max-new-tokens N] [--draft PATH ...] [--json OUT]

For each sampled workload prompt (the first N of every stratum; answers capped at --max-new-tokens) the champion
decodes alone, one token per forward, greedy and at temperature 0.7 (Gumbel-max with seeded noise, i.e. coupled
mode's sampler). Each draft then runs once, teacher-forced, over the champion's answer; acceptance for every
k = 1..8 follows exactly for greedy and coupled modes (exactspec_train.accept: a round accepts the run of
positions where the draft's choice equals the champion's under the same noise). Rejection mode at T = 0.7 is
estimated from beta_t = sum min(p, q) along the champion's trajectory (Monte Carlo of the rounds).
`--validate` (default on) also runs exactspec.decode.generate greedy with the first draft at k = 4 on every
sampled prompt: it must give exactly the champion's tokens, and its measured tau is printed beside the simulated one.
Timing: T_draft and T_champion per token (single-token forwards at the answer's context), T_verify(k) for k+1
tokens, and the speedup the break-even formula predicts: tau_k * T_champion / (k * T_draft + T_verify(k)).
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
from exactspec.reference import ReferenceModel  # noqa: E402
from exactspec.tokenizer import Tokenizer  # noqa: E402
from exactspec_train.accept import beta, rejection_tau, simulate_rounds  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402

CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
DEFAULT_DRAFTS = [ROOT / "static" / "models" / "draft-smollm2-kd.gguf",
                  ROOT / ".devcarry" / "draft" / "run3" / "draft_ce.gguf"]
KS = list(range(1, 9))
TEMP = 0.7


def champion_decode(m: ReferenceModel, prompt, max_new, eos, temperature, rng):
    """Plain decode, one token per forward. Returns tokens (EOS included if hit), logits rows (N, vocab), s/token."""
    m.truncate(0)
    row = m.forward(prompt, 0, 1)[-1]
    toks, rows, noise, dts = [], [], [], []
    for _ in range(max_new):
        if temperature > 0:
            g = rng.gumbel(size=row.shape[0])                                  # (vocab,)
            t = int(np.argmax(row.astype(np.float64) / temperature + g))
            noise.append(g)
        else:
            t = int(np.argmax(row))
        toks.append(t)
        rows.append(row)
        if t == eos or len(toks) == max_new:
            break
        t0 = time.perf_counter()
        row = m.forward([t], m.length, 1)[-1]
        dts.append(time.perf_counter() - t0)
    return toks, np.stack(rows), (np.stack(noise) if noise else None), (float(np.median(dts)) if dts else None)


def draft_rows(d: ReferenceModel, prompt, toks):
    d.truncate(0)
    seq = list(prompt) + toks[:-1]
    return d.forward(seq, 0, len(toks))                                        # (N, vocab)


def time_forward(m: ReferenceModel, ctx, n_tokens: int, reps: int = 5) -> float:
    m.truncate(0)
    m.forward(ctx, 0, 1)
    best = []
    for _ in range(reps):
        m.truncate(len(ctx))
        t0 = time.perf_counter()
        m.forward(list(range(100, 100 + n_tokens)), len(ctx), n_tokens)
        best.append(time.perf_counter() - t0)
    return float(np.median(best))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-stratum", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft", action="append", default=None)
    ap.add_argument("--workload", default=str(ROOT / "tests" / "data" / "workload.jsonl"))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--no-validate", action="store_true")
    ap.add_argument("--json", default=None, help="write all figures here")
    a = ap.parse_args(argv)
    drafts = [Path(p) for p in (a.draft or [str(p) for p in DEFAULT_DRAFTS])]
    drafts = [p for p in drafts if p.exists()]
    if not drafts:
        raise SystemExit("no draft file found")
    tok = Tokenizer.from_gguf(CHAMPION)
    eos = 2
    champ = ReferenceModel.from_file(CHAMPION, max_len=4096)
    dms = {p.stem: ReferenceModel.from_file(p, max_len=4096) for p in drafts}
    items = load_workload(a.workload)
    strata = []
    for it in items:
        if it["stratum"] not in strata:
            strata.append(it["stratum"])
    chosen = [it for s in strata for it in [x for x in items if x["stratum"] == s][:a.per_stratum]]
    print(json.dumps({"prompts": len(chosen), "per_stratum": a.per_stratum, "max_new_tokens": a.max_new_tokens,
                      "drafts": [p.name for p in drafts]}), flush=True)

    per = []   # one record per prompt
    t_champ = []
    for idx, it in enumerate(chosen):
        prompt = encode_chat(tok, workload_messages(it))
        max_new = min(a.max_new_tokens, it["max_new_tokens"])
        rng = np.random.default_rng([a.seed, idx])
        yg, pg, _, dt = champion_decode(champ, prompt, max_new, eos, 0.0, rng)
        ys, ps, gs, _ = champion_decode(champ, prompt, max_new, eos, TEMP, rng)
        if dt:
            t_champ.append(dt)
        rec = {"id": it["id"], "stratum": it["stratum"], "prompt_tokens": len(prompt), "greedy_tokens": len(yg),
               "sampled_tokens": len(ys), "drafts": {}}
        for name, d in dms.items():
            qg = draft_rows(d, prompt, yg)
            qs = draft_rows(d, prompt, ys)
            mg = np.argmax(qg, -1) == np.asarray(yg)
            ms = np.argmax(qs.astype(np.float64) / TEMP + gs, -1) == np.asarray(ys)
            b = beta(ps, qs, TEMP)
            r = {"greedy": {}, "coupled": {}, "rejection": {}, "greedy_match": float(mg.mean()),
                 "coupled_match": float(ms.mean()), "mean_beta": float(b.mean())}
            for k in KS:
                r["greedy"][k] = simulate_rounds(mg, k, max_new, yg[-1] == eos)
                r["coupled"][k] = simulate_rounds(ms, k, max_new, ys[-1] == eos)
                r["rejection"][k] = rejection_tau(b, k, a.draws, np.random.default_rng([a.seed, idx, k]), max_new,
                                                  ys[-1] == eos)
            rec["drafts"][name] = r
        if not a.no_validate:
            name, d = next(iter(dms.items()))
            res = generate(champ, prompt, GenerateConfig(max_new_tokens=max_new, k=4, drafter="model"), draft=d,
                           eos_ids=[eos])
            want = [t for t in yg if t != eos]
            rec["validate"] = {"draft": name, "identical": res.token_ids == want, "tau_measured": res.stats["tau"],
                               "tau_simulated": rec["drafts"][name]["greedy"][4]["tau"],
                               "acceptance_measured": res.stats["acceptance_by_position"]}
            if res.token_ids != want:
                print(json.dumps({"id": it["id"], "ERROR": "speculative greedy output differs from the champion"}))
        per.append(rec)
        short = {n: round(r["greedy"][4]["tau"], 2) for n, r in rec["drafts"].items()}
        print(json.dumps({"id": it["id"], "tau_greedy_k4": short, "validate": rec.get("validate", {}).get("identical"),
                          "tau_measured_k4": rec.get("validate", {}).get("tau_measured")}), flush=True)

    # timing on a mid-size context
    ctx = encode_chat(tok, workload_messages(chosen[0]))
    t_c1 = time_forward(champ, ctx, 1)
    t_ver = {k: time_forward(champ, ctx, k + 1) for k in KS}
    t_d = {name: time_forward(d, ctx, 1) for name, d in dms.items()}

    # aggregate: per stratum, tokens-weighted (sum emitted / sum rounds) per mode and k
    def agg(recs, name, mode, k):
        em = sum(r["drafts"][name][mode][k].get("emitted", 0) for r in recs)
        ro = sum(r["drafts"][name][mode][k].get("rounds", 0) for r in recs)
        if mode == "rejection":   # Monte Carlo means: weight each prompt by its token count
            w = np.array([r["sampled_tokens"] for r in recs], dtype=float)
            return float(np.sum(w * [r["drafts"][name][mode][k]["tau"] for r in recs]) / w.sum())
        return em / ro if ro else 0.0

    def acc_pos(recs, name, mode, k):
        v = np.array([r["drafts"][name][mode][k]["acceptance_by_position"] for r in recs])
        return v.mean(0).round(3).tolist()

    summary = {"prompts": len(per), "per_stratum": a.per_stratum, "max_new_tokens": a.max_new_tokens,
               "temperature": TEMP, "timing_s": {"champion_1": t_c1, "champion_verify": t_ver, "draft_1": t_d,
                                                 "champion_decode_median": float(np.median(t_champ))},
               "drafts": {}}
    for name in dms:
        ds = {"by_stratum": {}, "all": {}}
        for s in strata + ["ALL"]:
            recs = [r for r in per if s == "ALL" or r["stratum"] == s]
            if not recs:
                continue
            row = {m: {k: round(agg(recs, name, m, k), 3) for k in KS} for m in ("greedy", "coupled", "rejection")}
            row["acceptance_by_position_k8"] = {m: acc_pos(recs, name, m, 8) for m in ("greedy", "coupled",
                                                                                       "rejection")}
            row["match_rate"] = {"greedy": round(float(np.mean([r["drafts"][name]["greedy_match"] for r in recs])), 3),
                                 "coupled": round(float(np.mean([r["drafts"][name]["coupled_match"] for r in recs])), 3),
                                 "beta": round(float(np.mean([r["drafts"][name]["mean_beta"] for r in recs])), 3)}
            ds["by_stratum" if s != "ALL" else "all"][s] = row
        ratio = t_d[name] / t_c1
        sp = {}
        for k in KS:
            tau = ds["all"]["ALL"]["greedy"][k]
            sp[k] = round(tau * t_c1 / (k * t_d[name] + t_ver[k]), 3)
        ds["t_draft_over_t_champion"] = round(ratio, 4)
        ds["predicted_speedup_greedy_reference"] = sp
        # the same formula for a memory-bound GPU where verifying k+1 tokens costs about one token
        ds["predicted_speedup_greedy_if_verify_flat"] = {
            k: round(ds["all"]["ALL"]["greedy"][k] / (k * ratio + 1.0), 3) for k in KS}
        summary["drafts"][name] = ds
    if not a.no_validate:
        v = [r["validate"] for r in per]
        summary["validate"] = {"prompts": len(v), "all_identical": all(x["identical"] for x in v),
                               "tau_measured_mean": round(float(np.mean([x["tau_measured"] for x in v])), 3),
                               "tau_simulated_mean": round(float(np.mean([x["tau_simulated"] for x in v])), 3),
                               "max_abs_diff": round(float(max(abs(x["tau_measured"] - x["tau_simulated"])
                                                               for x in v)), 4)}
    # tables
    for name, ds in summary["drafts"].items():
        print(f"\n## {name}: tau (tokens per target pass), k = 1..8 | greedy / coupled T=0.7 / rejection T=0.7 (est.)")
        print("| stratum | greedy k=1..8 | coupled k=1..8 | rejection k=1..8 |")
        print("|---|---|---|---|")
        for s, row in list(ds["by_stratum"].items()) + list(ds["all"].items()):
            f = lambda m: " ".join(f"{row[m][k]:.2f}" for k in KS)  # noqa: E731
            print(f"| {s} | {f('greedy')} | {f('coupled')} | {f('rejection')} |")
        print(f"acceptance by position (k=8, all): {ds['all']['ALL']['acceptance_by_position_k8']}")
        print(f"T_draft/T_champion = {ds['t_draft_over_t_champion']}; predicted speedup (reference timings) "
              f"{ds['predicted_speedup_greedy_reference']}; if verify were flat {ds['predicted_speedup_greedy_if_verify_flat']}")
    print("\n" + json.dumps({"timing_s": summary["timing_s"], "validate": summary.get("validate")}))
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": summary, "per_prompt": per}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
