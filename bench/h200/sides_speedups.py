"""Per side of product_sides.sh's sides: speculation's speedup over the champion alone, same run, per stratum (median
[min-max] over the runs of the stratum's time alone / its time with speculation) and all strata pooled; then, per side
NAME, the median over that name's sides (over every folder given; product_sides.sh prints it).
    python bench/h200/sides_speedups.py DIR [DIR ...]   (DIR: product_<i>_<name>.json, e.g. an unpacked sides.tgz)"""
import collections
import glob
import json
import re
import statistics as st
import sys


def speedups(path):
    """{(drafter, k, 'adaptive' | 'forced'): {stratum: (median, min, max) over runs, 'ALL': the same pooled}} and
    whether every answer was identical: the strata's from the report's own summary (bench product's summarise), the
    pooled one from its records (per run, the time alone over the time with speculation, all strata together)."""
    d = json.load(open(path))
    out = collections.defaultdict(dict)
    for s in d["summary"]:
        if isinstance(s.get("speedup"), dict):
            sp = s["speedup"]
            out[(s["drafter"], s["k"], "adaptive" if s["adaptive"] else "forced")][s["stratum"]] = \
                (sp["median"], sp["min"], sp["max"])
    alone = {(r["run"], r["prompt_id"]): r["elapsed_ms"] for r in d["records"] if r["drafter"] == "none"}
    pooled = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0.0]))   # setting -> run -> sums
    for r in d["records"]:
        if r["drafter"] != "none" and (r["run"], r["prompt_id"]) in alone:
            acc = pooled[(r["drafter"], r["k"], "adaptive" if r.get("adaptive") else "forced")][r["run"]]
            acc[0] += alone[(r["run"], r["prompt_id"])]
            acc[1] += r["elapsed_ms"]
    for key, runs in pooled.items():
        v = [a / b for a, b in runs.values()]
        out[key]["ALL"] = (st.median(v), min(v), max(v))
    return out, all(s.get("identical", True) for s in d["summary"])


def main(folders):
    by_name = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    paths = [p for f in folders for p in sorted(glob.glob(f"{f}/product_*.json"),
                                                key=lambda p: int(re.search(r"product_(\d+)_", p)[1]))]
    for path in paths:
        side = re.search(r"product_(\d+_.+)\.json", path)[1]
        name = side.split("_", 1)[1]
        out, ident = speedups(path)
        for key, strata in sorted(out.items()):
            cells = []
            for s in sorted(strata, key=lambda s: (s == "ALL", s)):
                med, lo, hi = strata[s]
                by_name[key][name][s].append(med)
                cells.append(f"{s} {med:.2f} [{lo:.2f}-{hi:.2f}]")
            print(f"side {side:10s} {key[0]} k={key[1]} {key[2]} (identical: {'yes' if ident else 'NO'}): " + "; ".join(cells))
    print("\nper name: the median over its sides of each side's median speedup (the sides' medians)")
    for key, names in by_name.items():
        for name, strata in names.items():
            cells = [f"{s} {st.median(v):.2f} ({' '.join(f'{x:.2f}' for x in v)})"
                     for s, v in sorted(strata.items(), key=lambda kv: (kv[0] == "ALL", kv[0]))]
            print(f"  {name:8s} {key[0]} k={key[1]} {key[2]}: " + "; ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:] or ["."])
