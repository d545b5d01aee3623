"""Why bench product's predicted speedup differs from the measured one (H200, n-gram drafter, k = 4, greedy, forced).

    python bench/h200/results/2026-12-04d/prediction_gap.py [--call5]   (from the repository root; reads only this
    folder; --call5: the answers of call 5, the champion alone running ahead in runs of 4, instead of calls 1-2's 8)

Pairs every forced n-gram answer with the champion-alone answer of the same file, run and prompt, and prices both
from their own counters with the isolated pass times of the same run and stratum (timings: single_ms = s,
verify_ms(g) = t_v interpolated as product.py does, + g * draft_ms):

    product  (py/bench/product.py before this folder's change; what the reports here hold):
                                     T_spec = A (s + O) + V (t_v + O),   O = T_alone / N - s  (per token)
    now      (py/bench/product.py since): T_spec = N O + A s + V t_v  (O is the answer's, paid with or without
                                     speculation; computed here with the product's own predicted_speedup)
    C1 (passes):                     T_spec = T_alone + (P_spec - P_alone) s + V t_v
    C2 (C1 + loop turnaround):       C1 + d_v V + d_r (R_spec - R_alone)

N tokens, A tokens from runs ahead (ahead - wasted passes), V verify rounds, P all passes run ahead (wasted
included), R runs ahead (submissions - V). C1 says: a per-answer fixed cost (TTFT, the answer's end) is the same
with or without speculation, and every pass run, wasted or not, costs s. d_v, d_r are fitted (least absolute
deviations) on the paired 64-token answers only, so C2 on the 256-token set is out of sample.
Speedups: per run, stratum totals (tokens / time) alone over spec; median [min-max] over the runs, as product.py.
"""
from __future__ import annotations

import collections
import gzip
import json
import os
import statistics as st
import sys

import numpy as np

STORED = {}     # the product's own per-run predictions, as the reports hold them
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "py"))
from bench.product import predicted_speedup  # noqa: E402  (the product's own formula, to check the recomputation)

SETS = {"64": ["call1_ngram_adaptive3_A", "call2_ngram_adaptive3_2_A", "call2_ngram_adaptive3_3_A"],
        "256": ["call1_ngram_long_A", "call2_ngram_long2_A", "call2_ngram_long3_A"]}
if sys.argv[1:] == ["--call5"]:     # the same commands with the champion alone's runs of 4 (aheadMax 4, call 5)
    SETS = {"64": [f"call5_ngram_a4_{i}_A" for i in (1, 2, 3)], "256": [f"call5_ngram_a4long_{i}_A" for i in (1, 2, 3)]}


def load():
    tims, data, recs = {}, [], []
    for name, files in SETS.items():
        for fi, f in enumerate(files):
            d = json.load(gzip.open(os.path.join(HERE, f + ".json.gz")))
            for t in d["timings"]:
                tims[(name, fi, t["run"], t["stratum"])] = t
            data.append((name, fi, d))
            for row in d["summary"]:
                if not row["adaptive"]:
                    for pr in row["per_run"]:
                        STORED[(name, fi, pr["run"], row["stratum"])] = pr["predicted"]
    # isolated pass times per set and stratum: the median over its runs (one run's T_single read 4.5 ms, not 1.1)
    med = collections.defaultdict(lambda: collections.defaultdict(list))
    for (name, fi, run, stratum), t in tims.items():
        m = med[(name, stratum)]
        m["s"].append(t["single_ms"]["median"])
        m[0].append(t["forward_ms"]["median"])
        for j, v in t["verify_ms"].items():
            m[int(j)].append(v["median"])
        m["draft"].append(t["draft_ms"]["ngram"]["median"])
    med = {k: {j: st.median(v) for j, v in m.items()} for k, m in med.items()}
    for name, fi, d in data:
        for r in d["records"]:
            if r["adaptive"]:
                continue                           # forced only (the product predicts forced speculation only)
            r = dict(r, set=name, file=fi)
            m = med[(name, r["stratum"])]
            r["s"] = m["s"]
            r["V"] = r["rounds"] - (r["ahead_passes"] - r["wasted_passes"])   # verify rounds (0 alone)
            r["A"] = r["ahead_passes"] - r["wasted_passes"]                   # passes run ahead and used
            r["R"] = r["submissions"] - r["V"]                                  # runs ahead
            g = r["proposed"] / r["V"] if r["V"] else 0.0                       # proposals per verify round
            lo = int(g)
            hi = min(lo + 1, 4)
            r["tv"] = (m[lo] + (m[hi] - m[lo]) * (g - lo) + g * m["draft"]) if r["V"] else 0.0
            recs.append(r)
    return recs, tims


def lad(X, y, it=200):
    """Least absolute deviations by iteratively reweighted least squares."""
    w = np.ones(len(y))
    for _ in range(it):
        b = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)[0]
        w = 1 / np.sqrt(np.maximum(np.abs(y - X @ b), 0.3))
    return b


def main():
    recs, tims = load()
    by = {(r["set"], r["file"], r["run"], r["prompt_id"], r["drafter"]): r for r in recs}
    pairs = [(by[k[:4] + ("none",)], r) for k, r in by.items() if k[4] == "ngram"]
    for a, s in pairs:
        assert a["n_tokens"] == s["n_tokens"]

    # ---- d_v (d_r): the loop's time per verify round (per extra run ahead) that the isolated timings miss,
    # fitted on the paired 64-token answers: y = T_spec - T_alone - (P_spec - P_alone) s - V t_v
    fit = [(a, s) for a, s in pairs if a["set"] == "64"]
    y = np.array([s["elapsed_ms"] - a["elapsed_ms"] - (s["ahead_passes"] - a["ahead_passes"]) * s["s"] - s["V"] * s["tv"]
                  for a, s in fit])
    ok = np.abs(y) < 40                            # stalls of 40+ ms (json-02, amb-01, ...): not the loop's
    Xv = np.array([[s["V"]] for a, s in fit], dtype=float)
    Xvr = np.array([[s["V"], s["R"] - a["R"]] for a, s in fit], dtype=float)
    (d_v,) = lad(Xv[ok], y[ok])
    d_v3, d_r3 = lad(Xvr[ok], y[ok])
    print(f"paired 64-token answers: {len(y)}, {len(y) - ok.sum()} stalls left out; residual of C1 per answer: median "
          f"{np.median(y[ok]):+.1f} ms, median |.| {np.median(np.abs(y[ok])):.1f} ms")
    print(f"C2 fit: d_v = {d_v:.2f} ms per verify round (median |residual| {np.median(np.abs(y[ok] - Xv[ok] @ [d_v])):.1f} ms)")
    print(f"C3 fit: d_v = {d_v3:.2f} ms per verify round, d_r = {d_r3:.2f} ms per extra run ahead (median |residual| "
          f"{np.median(np.abs(y[ok] - Xvr[ok] @ [d_v3, d_r3])):.1f} ms)")
    tt = [(a["ttft_ms"], s["ttft_ms"]) for a, s in fit if ok[fit.index((a, s))]]
    # the alone's time outside its passes (elapsed - passes * s): answers ending on EOS inside a run that had
    # been hinted (>= 3 runs: a continuation of up to 8 passes was queued past EOS) vs answers capped by length
    al = [a for a, s in fit]
    q = lambda rs: f"median {np.median([r['elapsed_ms'] - r['ahead_passes'] * r['s'] for r in rs]):+.1f} ms (n {len(rs)})"
    print("alone, time outside its passes (elapsed - passes * s): EOS in a hinted run",
          q([r for r in al if r["finish_reason"] == "eos" and r["R"] >= 3]), "| length-capped",
          q([r for r in al if r["finish_reason"] == "length"]))
    print(f"TTFT, paired: alone median {np.median([x for x, _ in tt]):.2f} ms, spec {np.median([x for _, x in tt]):.2f} ms\n")

    # ---- per stratum and run
    groups = collections.defaultdict(list)
    for a, s in pairs:
        groups[(a["set"], a["stratum"], a["file"], a["run"])].append((a, s))
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    diag = collections.defaultdict(lambda: collections.defaultdict(float))
    RES, VL = collections.defaultdict(list), collections.defaultdict(list)      # per run: medians over runs
    for (st_, stratum, fi, run), ps in groups.items():
        al = [a for a, _ in ps]
        sp = [s for _, s in ps]
        N = sum(a["n_tokens"] for a in al)
        Ta = sum(a["elapsed_ms"] for a in al)
        Ts = sum(s["elapsed_ms"] for s in sp)
        t = tims[(st_, fi, run, stratum)]
        s_ms = t["single_ms"]["median"]
        O = max(0.0, Ta / N - s_ms)
        # the product's prediction, as product.summarise computes it
        A = sum(s["A"] for s in sp)
        V = sum(s["V"] for s in sp)
        emitted = sum(s["tau"] * s["target_passes"] for s in sp)
        if V > 0:
            g = sum(s["proposed"] for s in sp) / V
            pred, parts = predicted_speedup(t, "ngram", 4, g, (emitted - A) / V, O, A / emitted)
            Tprod = Ta / pred
        else:
            pred, Tprod = 1.0, Ta
        now = pred                            # the product's formula today
        pred = STORED[(st_, fi, run, stratum)] or 1.0       # the reports' (the formula before)
        c1 = Ta + sum((s["ahead_passes"] - a["ahead_passes"]) * s["s"] + s["V"] * s["tv"] for a, s in ps)
        c2 = c1 + sum(d_v * s["V"] for a, s in ps)
        c3 = c1 + sum(d_v3 * s["V"] + d_r3 * (s["R"] - a["R"]) for a, s in ps)
        R = rows[(st_, stratum)]
        R["measured"].append(Ta / Ts)
        R["product"].append(pred)
        R["now"].append(now)
        R["C1"].append(Ta / c1)
        R["C2"].append(Ta / c2)
        R["C3"].append(Ta / c3)
        # gap terms (ms per answer, product's T_spec minus C1's): see the .md for the algebra
        n = len(ps)
        Wa = sum(a["wasted_passes"] for a in al)
        Ws = sum(s["wasted_passes"] for s in sp)
        Aa = sum(a["A"] for a in al)
        D = diag[(st_, stratum)]
        D["runs"] += 1
        D["answers"] += n
        D["tokens"] += N
        D["eos"] += sum(a["finish_reason"] == "eos" for a in al)
        D["ttft_a"] += sum(a["ttft_ms"] for a in al)
        D["ttft_s"] += sum(s["ttft_ms"] for s in sp)
        D["W_a"] += Wa
        D["W_s"] += Ws
        D["P_a"] += sum(a["ahead_passes"] for a in al)
        D["P_s"] += sum(s["ahead_passes"] for s in sp)
        D["V"] += V
        D["Ta"] += Ta
        D["Ts"] += Ts
        D["fixed_a"] += Ta - sum(a["ahead_passes"] * a["s"] for a in al)        # alone time outside its passes
        D["O_tok"] += O * N
        D["waste"] += (Wa - Ws) * s_ms + (Aa - N) * s_ms                       # alone's extra passes (past EOS)
        D["credit"] += -(N - A - V) * O                                          # O credited per round saved
        RES[(st_, stratum)].append((Ts - c1) / n)                                # measured minus C1, per answer
        if V:
            VL[(st_, stratum)].append((Ts - Ta - sum((s["ahead_passes"] - a["ahead_passes"]) * s["s"] for a, s in ps)) / V)
        D["prod_c1"] += Tprod - c1
        D["vtv"] += sum(s["V"] * s["tv"] for s in sp)
        D["extra_runs"] += sum(s["R"] - a["R"] for a, s in ps)

    def sp3(v):
        return f"{st.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"

    def err(p, m):
        return (p / m - 1) * 100

    print("Table 1: per stratum, predicted / measured / corrected speedup (median [min-max] over runs)")
    print(f"{'set':>3} {'stratum':17} {'runs':>4} {'measured':>17} {'product':>17} {'C1 passes':>17} {'C2 +loop':>17}"
          f" {'C3 +runs':>17} {'err prod':>8} {'err C1':>7} {'err C2':>7} {'err C3':>7} {'now':>17} {'err now':>7}")
    for (st_, stratum), R in rows.items():
        m = st.median(R["measured"])
        print(f"{st_:>3} {stratum:17} {len(R['measured']):>4} {sp3(R['measured']):>17} {sp3(R['product']):>17} "
              f"{sp3(R['C1']):>17} {sp3(R['C2']):>17} {sp3(R['C3']):>17} {err(st.median(R['product']), m):+7.1f}% "
              f"{err(st.median(R['C1']), m):+6.1f}% {err(st.median(R['C2']), m):+6.1f}% {err(st.median(R['C3']), m):+6.1f}% "
              f"{sp3(R['now']):>17} {err(st.median(R['now']), m):+6.1f}%")

    print("\nTable 2: per stratum, per answer (means over all runs); times in ms")
    print(f"{'set':>3} {'stratum':17} {'tok':>5} {'eos':>4} {'ttft a/s':>10} {'pass a/s':>10} {'wasted a/s':>10} "
          f"{'V':>5} {'outside a':>9} {'O*N':>6} {'waste':>6} {'credit':>7} {'net':>6} {'prod-C1':>7} {'meas-C1':>7} "
          f"{'V loop/iso':>11}")
    for (st_, stratum), D in diag.items():
        n = D["answers"]
        vl = f"{st.median(VL[(st_, stratum)]):.1f}/{D['vtv'] / D['V']:.1f}" if D["V"] / n >= 2 else "-"
        print(f"{st_:>3} {stratum:17} {D['tokens'] / n:5.1f} {D['eos'] / n:4.0%} "
              f"{D['ttft_a'] / n:4.1f}/{D['ttft_s'] / n:4.1f} {D['P_a'] / n:4.1f}/{D['P_s'] / n:4.1f} "
              f"{D['W_a'] / n:4.1f}/{D['W_s'] / n:4.1f} {D['V'] / n:5.1f} {D['fixed_a'] / n:9.1f} "
              f"{D['O_tok'] / n:6.1f} {D['waste'] / n:6.1f} {D['credit'] / n:7.1f} "
              f"{(D['waste'] + D['credit']) / n:6.1f} {D['prod_c1'] / n:7.1f} {st.median(RES[(st_, stratum)]):7.1f} {vl:>11}")


if __name__ == "__main__":
    main()
