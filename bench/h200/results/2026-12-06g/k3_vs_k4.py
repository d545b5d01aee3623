"""Per prompt, an answer's time with the n-gram at k = 3 over k = 4 (and each over the champion alone), in the same
side and run, pooled over the sides of the given folders (product_sides.sh's `sides/`, e.g. `tar -xzf callN/sides.tgz`):
median over the prompts [quartiles] of each prompt's median ratio, per setting (forced, "only while it pays").
Usage: python3 k3_vs_k4.py SIDES_DIR [SIDES_DIR ...]"""
import glob, json, statistics, sys
from collections import defaultdict


def q(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 4], statistics.median(xs), xs[(3 * n) // 4]


ratios = {a: defaultdict(list) for a in (False, True)}
alone = {(a, k): defaultdict(list) for a in (False, True) for k in (3, 4)}
identical = True
for d in sys.argv[1:]:
    for f in sorted(glob.glob(f"{d}/product_*.json")):
        rep = json.load(open(f))
        identical &= bool(rep.get("all_identical", True))
        by = {}
        for r in rep["records"]:
            by[(r["run"], r["prompt_id"], r["drafter"], r["k"], r["adaptive"])] = r
        for (run, pid, dr, k, ad), r in by.items():
            if dr != "ngram" or k != 3:
                continue
            r4 = by.get((run, pid, "ngram", 4, ad))
            r0 = by.get((run, pid, "none", 0, False))
            if r4:
                ratios[ad][(r["stratum"], pid)].append(r["elapsed_ms"] / r4["elapsed_ms"])
            if r0:
                alone[(ad, 3)][(r["stratum"], pid)].append(r0["elapsed_ms"] / r["elapsed_ms"])
                if r4:
                    alone[(ad, 4)][(r["stratum"], pid)].append(r0["elapsed_ms"] / r4["elapsed_ms"])
print(f"every answer identical to the champion alone's: {identical}")
for ad in (False, True):
    name = '"only while it pays"' if ad else "forced"
    per = {p: statistics.median(v) for p, v in ratios[ad].items()}
    lo, med, hi = q(list(per.values()))
    print(f"{name}: time k=3 / k=4, median over {len(per)} prompts {med:.3f} [quartiles {lo:.3f}-{hi:.3f}]")
    strata = defaultdict(list)
    for (s, _), v in per.items():
        strata[s].append(v)
    print("   per stratum (median of its prompts): " + "; ".join(f"{s} {statistics.median(v):.2f}" for s, v in sorted(strata.items())))
    for k in (3, 4):
        sp = {p: statistics.median(v) for p, v in alone[(ad, k)].items()}
        lo, med, hi = q(list(sp.values()))
        print(f"   speedup over the champion alone, k={k}: median over prompts {med:.3f} [quartiles {lo:.3f}-{hi:.3f}]")
