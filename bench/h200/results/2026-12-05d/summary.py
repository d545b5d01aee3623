"""Speedups of bench product reports, per speculative setting (drafter, k, "only while it pays"): the stratum tables'
median [min-max] over runs when one stratum is measured, and for several strata, per run, the whole run's time alone
over its time with speculation on the same prompts (all strata pooled), median [min-max] over the runs, with the
geometric mean over the strata of each stratum's median speedup beside it.
Usage: python bench/h200/results/2026-12-05d/summary.py [REPORT.json[.gz] ...]   (default: every report here)"""
import collections
import gzip
import json
import math
import statistics as st
import sys
from pathlib import Path


def load(path):
    op = gzip.open if str(path).endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)


def main(paths):
    for path in paths:
        d = load(path)
        alone = {(r["run"], r["prompt_id"], r["mode"], r.get("seed")): r["elapsed_ms"]
                 for r in d["records"] if r["drafter"] == "none"}
        runs = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0.0]))
        for r in d["records"]:
            a = alone.get((r["run"], r["prompt_id"], r["mode"], r.get("seed")))
            if r["drafter"] == "none" or a is None:
                continue
            key = (r["drafter"], r["k"], r["adaptive"])
            runs[key][r["run"]][0] += a
            runs[key][r["run"]][1] += r["elapsed_ms"]
        medians = collections.defaultdict(list)
        for s in d["summary"]:
            if isinstance(s.get("speedup"), dict):
                medians[(s["drafter"], s["k"], s["adaptive"])].append(s["speedup"]["median"])
        print(Path(path).name)
        for key in sorted(runs):
            rs = [a / b for a, b in runs[key].values()]
            sp = medians.get(key, [])
            gm = math.exp(sum(map(math.log, sp)) / len(sp)) if sp else float("nan")
            print(f"  {key[0]:6} k={key[1]} {'only while it pays' if key[2] else 'forced':18} all strata: "
                  f"{st.median(rs):.2f} [{min(rs):.2f}-{max(rs):.2f}] over {len(rs)} runs; geometric mean of the "
                  f"{len(sp)} strata's medians {gm:.2f}")


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    main(sys.argv[1:] or sorted(str(p) for p in here.glob("call*.json.gz")))
