"""Measured speedup against the break-even formula's prediction, forced n-gram chains, per stratum: each side's
summary as bench product made it on the device (`stored`), and summarised again by the tree's py/bench/product.py
(`redrawn`, as `bench product --redraw` does), over side A's reports (median over the sides of each side's median
over runs); how many strata agree within 10%.
Usage (repository root): [DRAFTER=model] python3 bench/h200/results/2026-12-07b/predicted_vs_measured.py DIR [DIR ...]
  (DRAFTER: the drafter whose forced rounds are compared, ngram unless named; the twenty-third session's model)
  (DIR: product_sides.sh's sides/, e.g. tar -xzf bench/h200/results/2026-12-07b/call3/sides.tgz -C /tmp/c3)"""
import glob, json, os, statistics, sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "py"))
from bench.product import ADAPTIVES, summarise  # noqa: E402

DRAFTER = os.environ.get("DRAFTER", "ngram")
for d in sys.argv[1:]:
    got = {way: defaultdict(lambda: defaultdict(list)) for way in ("stored", "redrawn")}
    for f in sorted(glob.glob(f"{d}/product_*_A.json")):
        rep = json.load(open(f))
        m = rep["meta"]
        a = SimpleNamespace(modes=m["modes"], drafters=m["drafters"], ks=m["ks"], runs=m["runs"],
                            adaptives=ADAPTIVES[m["adaptive"]])
        for way, rows in (("stored", rep["summary"]), ("redrawn", summarise(rep, a))):
            for s in rows:
                if s["drafter"] == DRAFTER and not s["adaptive"] and s["predicted"]:
                    got[way][s["k"]][s["stratum"]].append((s["speedup"]["median"], s["predicted"]["median"]))
    for way, by_k in got.items():
        for k, by in sorted(by_k.items()):
            cells, within = [], 0
            for st in sorted(by):
                ms = statistics.median(x for x, _ in by[st])
                ps = statistics.median(y for _, y in by[st])
                within += abs(ps / ms - 1) <= 0.10
                cells.append(f"{st} {ms:.2f} / {ps:.2f}")
            print(f"{d} {way} {DRAFTER} k={k}: within 10% in {within} of {len(by)} (measured / predicted): " + "; ".join(cells))
