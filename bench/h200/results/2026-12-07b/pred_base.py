"""The break-even formula's prediction for the n-gram's chains (py/bench/product.py, predicted_chain_speedup) against
the measured speedup, per stratum, priced three ways from the same reports (forced chains, side A's):
  as shipped: a pass T_single = one run ahead's ms a token (`timings.ahead`), O = max(0, T_alone / N - T_single),
              a chain round T_single + rows(g);
  base:       the pass = a chain of runs ahead's ms a token (`timings.ahead_chain`: the champion alone as the decode
              loop runs it), O = T_alone / N - that (either sign), a chain round pass + rows(g);
  base + c:   as base, a chain round costing C x the pass more (C given: a chain round that finds nothing against a
              pass running ahead in GPU time, bench.mjs CHAIN=1: 0.985-0.994 / 0.950 at k = 3, 0.991-0.992 at k = 4).
Usage: python3 pred_base.py C DIR [DIR ...]   (DIR: product_sides.sh's sides/, e.g. tar -xzf callN/sides.tgz)"""
import glob, json, statistics, sys
from collections import defaultdict

C = float(sys.argv[1])
out = defaultdict(lambda: defaultdict(list))     # (k, way) -> stratum -> [(measured, predicted)] per side and run
for d in sys.argv[2:]:
    for f in sorted(glob.glob(f"{d}/product_*_A.json")):
        rep = json.load(open(f))
        tim = {(t["run"], t["stratum"]): t for t in rep["timings"]}
        recs = rep["records"]
        for (run, stratum), t in tim.items():
            sel = [r for r in recs if r["run"] == run and r["stratum"] == stratum]
            alone = [r for r in sel if r["drafter"] == "none"]
            a_ms = sum(r["elapsed_ms"] for r in alone) / sum(r["n_tokens"] for r in alone)
            ve = {0: t["forward_ms"]["median"], **{int(j): v["median"] for j, v in t["verify_ms"].items()}}
            for k in (3, 4):
                spec = [r for r in sel if r["drafter"] == "ngram" and r["k"] == k and not r["adaptive"]]
                s_ms = sum(r["elapsed_ms"] for r in spec) / sum(r["n_tokens"] for r in spec)
                emitted = sum(r["tau"] * r["target_passes"] for r in spec)
                ahead = sum(max(0, r["ahead_passes"] - r["wasted_passes"]) for r in spec)
                cr = sum(r["chain_rounds"] for r in spec)
                if not cr:
                    continue
                g = sum(r["chain_proposed"] for r in spec) / cr
                lo, hi = int(g), min(int(g) + 1, max(ve))
                rows = ve[lo] + (ve[hi] - ve[lo]) * (g - lo) - ve[0]
                meas = a_ms / s_ms
                for way, base, o, c in (("as shipped", t["single_ms"]["median"], None, 0.0),
                                        ("base", t["ahead_chain"]["ms_per_token"]["median"], "signed", 0.0),
                                        ("base + c", t["ahead_chain"]["ms_per_token"]["median"], "signed", C)):
                    o_ms = max(0.0, a_ms - base) if o is None else a_ms - base
                    per_token = o_ms + (ahead * base + cr * (base * (1 + c) + rows)) / emitted
                    out[(k, way)][stratum].append((meas, (base + o_ms) / per_token))
for (k, way), by in sorted(out.items()):
    cells, within = [], 0
    for st in sorted(by):
        m = statistics.median(x for x, _ in by[st]); p = statistics.median(y for _, y in by[st])
        within += abs(p / m - 1) <= 0.10
        cells.append(f"{st} {m:.2f}/{p:.2f}")
    print(f"k={k} {way}: within 10% in {within} of {len(by)}: " + "; ".join(cells))
