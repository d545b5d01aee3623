"""Per answer pair (the same prompt and run, the same side): "only while it pays" over forced chains' time, n-gram at k,
and how many "only while it pays" answers had rounds with chains off; per side name.
    python3 bench/h200/results/2026-12-07e/adaptive_vs_forced.py DIR [K]    (DIR: an unpacked sides.tgz's sides/)"""
import glob
import json
import statistics as st
import sys
from collections import defaultdict

d, k = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4
agg = defaultdict(list)
for f in sorted(glob.glob(f"{d}/product_*_*.json")):
    name = f.rsplit("_", 1)[1].split(".")[0]
    pairs = defaultdict(dict)
    for r in json.load(open(f))["records"]:
        if r["drafter"] == "ngram" and r["k"] == k:
            pairs[(r["prompt_id"], r["run"])]["a" if r["adaptive"] else "f"] = r
    for v in pairs.values():
        if "a" in v and "f" in v:
            agg[name].append((v["a"]["elapsed_ms"] / v["f"]["elapsed_ms"], v["a"]["spec_disabled_rounds"]))
for name, rows in agg.items():
    r = [x[0] for x in rows]
    q = st.quantiles(r, n=4)
    print(f"{name}: {len(rows)} pairs, k = {k}: only while it pays / forced, time median {st.median(r):.3f} "
          f"[quartiles {q[0]:.3f}-{q[2]:.3f}]; answers with rounds off: {sum(1 for x in rows if x[1] > 0)}")
