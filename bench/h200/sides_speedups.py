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
    d = json.load(open(path))
    alone = {(r["run"], r["prompt_id"]): r["elapsed_ms"] for r in d["records"] if r["drafter"] == "none"}
    per = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0.0]))   # (setting) -> run -> sums
    out = collections.defaultdict(dict)
    for r in d["records"]:
        if r["drafter"] == "none" or (r["run"], r["prompt_id"]) not in alone:
            continue
        key = (r["drafter"], r["k"], "adaptive" if r.get("adaptive") else "forced")
        for s in (r["stratum"], "ALL"):
            acc = per[key + (s,)][r["run"]]
            acc[0] += alone[(r["run"], r["prompt_id"])]
            acc[1] += r["elapsed_ms"]
    for key, runs in per.items():
        out[key[:3]][key[3]] = [a / b for a, b in runs.values()]
    ident = all(r.get("identical", True) for r in d["records"])
    return out, ident


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
                v = strata[s]
                by_name[key][name][s].append(st.median(v))
                cells.append(f"{s} {st.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]")
            print(f"side {side:10s} {key[0]} k={key[1]} {key[2]} (identical: {'yes' if ident else 'NO'}): " + "; ".join(cells))
    print("\nper name: the median over its sides of each side's median speedup (the sides' medians)")
    for key, names in by_name.items():
        for name, strata in names.items():
            cells = [f"{s} {st.median(v):.2f} ({' '.join(f'{x:.2f}' for x in v)})"
                     for s, v in sorted(strata.items(), key=lambda kv: (kv[0] == "ALL", kv[0]))]
            print(f"  {name:8s} {key[0]} k={key[1]} {key[2]}: " + "; ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:] or ["."])
