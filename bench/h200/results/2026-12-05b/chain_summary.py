"""Summarise bench product reports side by side: per drafter and k, the per-stratum median speedup (each run's
speedup = spec tok/s over the champion alone's in the same run, as bench product's table), its median and range over
the strata, the strata at or above 1.0, and the median answer's time to first token and submissions per round.

    python bench/h200/results/2026-12-05b/chain_summary.py NAME=REPORT.json.gz [NAME=REPORT.json.gz ...]
"""
import gzip
import json
import statistics as st
import sys
from collections import defaultdict


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def summary(d):
    runs = defaultdict(lambda: defaultdict(list))      # (stratum, run) -> (drafter, k) -> records
    for r in d["records"]:
        runs[(r["stratum"], r["run"])][(r["drafter"], r["k"])].append(r)
    speed = defaultdict(lambda: defaultdict(list))     # (drafter, k) -> stratum -> per-run speedups
    extra = defaultdict(list)
    for (stratum, run), g in runs.items():
        alone = g.get(("none", 0))
        if not alone:
            continue
        t_alone = sum(r["n_tokens"] for r in alone) / sum(r["elapsed_ms"] for r in alone)
        for key, rs in g.items():
            if key == ("none", 0):
                continue
            t = sum(r["n_tokens"] for r in rs) / sum(r["elapsed_ms"] for r in rs)
            speed[key][stratum].append(t / t_alone)
            extra[key] += rs
    out = {}
    for key, by in speed.items():
        med = {s: st.median(v) for s, v in by.items()}
        rs = extra[key]
        out[key] = (st.median(med.values()), min(med.values()), max(med.values()),
                    sum(1 for v in med.values() if v >= 1.0), len(med),
                    st.median(r["ttft_ms"] for r in rs), st.median(r["submissions"] / r["rounds"] for r in rs))
    return out


def main(argv):
    sides = [(a.split("=", 1)[0], summary(load(a.split("=", 1)[1]))) for a in argv]
    keys = sorted({k for _, s in sides for k in s})
    print("drafter k | " + " | ".join(f"{n}: median [min-max] over strata, strata >= 1, ttft ms, sub/round" for n, _ in sides))
    for k in keys:
        cells = []
        for _, s in sides:
            if k in s:
                m, lo, hi, ge, n, ttft, spr = s[k]
                cells.append(f"{m:.2f} [{lo:.2f}-{hi:.2f}] {ge}/{n} {ttft:.1f} {spr:.2f}")
            else:
                cells.append("-")
        print(f"{k[0]} {k[1]} | " + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
