"""How far could ANY drafter that copies from the context go on the CPU fallback? (simulated, greedy)

Over the champion's greedy answers (`python build.py bench ngram_tau` makes them: .cache/ngram-bench/), with a round
priced as the CPU fallback prices it (no run ahead: a round without proposals is one pass and one token; a verify of g
proposals costs r(g) passes and emits the accepted ones plus the champion's token; r(g) = T_verify(g) / T_single, by
default the medians of the 15 timing sets of bench/results/product/cpu_chromium_2026-12-05_json_mode.json.gz, the page
in Chromium on 2 threads), the speedup over the champion alone (tokens / passes' cost) of:
  ngram     the shipped drafter (exactspec.drafters.ngram: the most recent earlier occurrence of the last 3, else 2
            tokens), its proposals verified whenever it finds some;
  m1        the same lookup down to a 1-token suffix;
  decided   the shipped lookups, but verified only where it pays, as if the drafter knew how many would be accepted
            (the best any rule deciding WHEN to verify the shipped lookups can do);
  best-occ  for a suffix of 1-3 tokens, the occurrence whose continuation is accepted longest (the best any rule
            choosing WHICH earlier occurrence of the suffix to copy can do), verified where it pays;
  oracle    at every position the longest run of the answer ahead found anywhere in the context (prompt + answer so
            far), verified where it pays: no copy-based drafter, however it finds its copies, does better.
The last three minimise the answer's cost by dynamic programming over positions. k = 1, 2, 4.

    python bench/results/ngram/copy_ceiling.py [--r 1.17,1.22,1.54,2.01]
"""
import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "py"))
from exactspec.drafters.ngram import NgramDrafter  # noqa: E402
from exactspec_train.data import load_workload  # noqa: E402

KS = (1, 2, 4)
TIMINGS = ROOT / "bench/results/product/cpu_chromium_2026-12-05_json_mode.json.gz"


def ratios(path: Path) -> dict[int, float]:
    """r(g) = T_verify(g) / T_single: medians over a bench product report's timing sets."""
    d = json.load(gzip.open(path))
    per = defaultdict(list)
    for t in d["timings"]:
        for g, v in (t.get("verify_ms") or {}).items():
            per[int(g)].append(v["median"] / t["single_ms"]["median"])
    return {g: statistics.median(v) for g, v in sorted(per.items())}


def run_len(ctx: list, j: int, fut: list, k: int) -> int:
    """How many of fut's first k tokens ctx[j:] repeats."""
    n = 0
    while n < k and n < len(fut) and j + n < len(ctx) and ctx[j + n] == fut[n]:
        n += 1
    return n


def shipped(ctx, fut, k, drafter):
    """(proposals, accepted) of a lookup at this position."""
    p = drafter.lookup(ctx, k)
    return len(p), run_len(p, 0, fut, len(p))


def best_occurrence(ctx, fut, k) -> int:
    best = 0
    for n in range(1, min(3, len(ctx) - 1) + 1):
        pat = ctx[len(ctx) - n:]
        for j in range(len(ctx) - n):
            if ctx[j:j + n] == pat:
                best = max(best, run_len(ctx, j + n, fut, k))
    return best


def anywhere(ctx, fut, k) -> int:
    best = 0
    for j in range(len(ctx)):
        if ctx[j] == fut[0]:
            best = max(best, run_len(ctx, j, fut, k))
            if best == k:
                break
    return best


def cheapest(acc: list, r: dict, k: int) -> float:
    """The least cost of the answer when position i may verify g <= acc[i] proposals (all accepted) at r(g)."""
    n = len(acc)
    cost = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        c = 1.0 + cost[i + 1]
        for g in range(1, min(acc[i], k, n - 1 - i) + 1):
            c = min(c, r[g] + cost[i + g + 1])
        cost[i] = c
    return cost[0]


def forced(prompt, y, k, r, drafter) -> float:
    """The cost of the answer when every lookup that finds proposals is verified."""
    i, cost = 0, 0.0
    while i < len(y):
        g, acc = shipped(prompt + y[:i], y[i:], min(k, len(y) - 1 - i), drafter) if i < len(y) - 1 else (0, 0)
        cost += r[g] if g else 1.0
        i += acc + 1
    return cost


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--r", default=None, help="r(1),r(2),...: T_verify(g)/T_single (default: from " + TIMINGS.name + ")")
    a = ap.parse_args()
    r = {0: 1.0, **({i + 1: float(x) for i, x in enumerate(a.r.split(","))} if a.r else ratios(TIMINGS))}
    print("r(g) = T_verify(g) / T_single: " + ", ".join(f"{g}: {v:.2f}" for g, v in r.items() if g))
    ng, m1 = NgramDrafter(), NgramDrafter(min_ngram=1)
    items = load_workload(ROOT / "tests/data/workload.jsonl")
    names = ["ngram", "m1", "decided", "best-occ", "oracle"]
    tot = defaultdict(lambda: [0, 0.0])           # (stratum, name, k) -> tokens, cost
    for it in items:
        f = ROOT / ".cache/ngram-bench" / f"{it['id']}_{min(64, it['max_new_tokens'])}.json"
        if not f.exists():
            sys.exit(f"{f} is missing: run `python build.py bench ngram_tau` first (it makes the answers)")
        c = json.loads(f.read_text())
        prompt, y = list(c["prompt"]), list(c["y"])
        for k in KS:
            ctxs = [(prompt + y[:i], y[i:]) for i in range(len(y) - 1)]
            acc = {"decided": [shipped(cx, fu, k, ng)[1] for cx, fu in ctxs] + [0],
                   "best-occ": [best_occurrence(cx, fu, k) for cx, fu in ctxs] + [0],
                   "oracle": [anywhere(cx, fu, k) for cx, fu in ctxs] + [0]}
            costs = {"ngram": forced(prompt, y, k, r, ng), "m1": forced(prompt, y, k, r, m1),
                     **{n: cheapest(v, r, k) for n, v in acc.items()}}
            for n, cst in costs.items():
                for s in (it["stratum"], "all (136)"):
                    tot[(s, n, k)][0] += len(y)
                    tot[(s, n, k)][1] += cst
    strata = list(dict.fromkeys(it["stratum"] for it in items)) + ["all (136)"]
    print(f"\nspeedup over the champion alone (tokens / cost in passes) at k = {', '.join(map(str, KS))}")
    print(f"{'stratum':<18} " + " ".join(f"{n:<16}" for n in names))
    for s in strata:
        print(f"{s:<18} " + " ".join(" ".join(f"{tot[(s, n, k)][0] / tot[(s, n, k)][1]:.2f}" for k in KS).ljust(16)
                                     for n in names))


if __name__ == "__main__":
    main()
