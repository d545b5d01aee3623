"""Per stratum speedup over the champion alone (sides_summary.py's "per name" lines: the median over a name's sides of
each side's median) and the geometric mean over the strata, for each setting of each name (the n-gram; since the
twenty-third session also the shipped draft `model` and the head).
Usage (repository root): python3 bench/h200/results/2026-12-07c/geo.py SIDES_SUMMARY.txt [...]"""
import math, re, sys

for f in sys.argv[1:]:
    lines = open(f).read().split("per name:")[1].splitlines()
    for line in lines:
        m = re.match(r"\s+(\S+)\s+((?:ngram|model|head) k=\d \w+): (.*)", line)
        if not m:
            continue
        cells = dict((s, float(v)) for s, v in re.findall(r"(\w+) ([\d.]+) \(", m.group(3)) if s != "ALL")
        geo = math.exp(sum(map(math.log, cells.values())) / len(cells))
        print(f"{f}: {m.group(1)} {m.group(2)}: geometric mean over {len(cells)} strata {geo:.3f}; "
              + ", ".join(f"{s} {v:.2f}" for s, v in cells.items()))
