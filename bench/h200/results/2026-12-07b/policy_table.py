"""Per stratum, each name's speedup over the champion alone (the median over its sides of each side's median, as
sides_summary.py's "per name" lines print it), "only while it pays" (adaptive) and forced, k = 3 and 4, one column
per call; then per setting the geometric mean over the 11 strata.
Usage: python3 policy_table.py call3/sides_summary.txt call4/sides_summary.txt"""
import re, statistics, sys

NAMES = {"A": "now (chains first)", "P": "before (f5e3e4d)"}
table = {}        # (name, k, setting) -> [ {stratum: value} per file ]
for path in sys.argv[1:]:
    lines = open(path).read().split("per name:", 1)[1].splitlines()[1:]
    for line in lines:
        m = re.match(r"\s+(\w+)\s+ngram k=(\d) (adaptive|forced): (.*)", line)
        if not m:
            continue
        vals = {s: float(v) for s, v in re.findall(r"(\w+) ([\d.]+) \(", m.group(4)) if s != "ALL"}
        table.setdefault((m.group(1), int(m.group(2)), m.group(3)), []).append(vals)
cols = [(n, k, s) for k in (4, 3) for s in ("adaptive", "forced") for n in ("A", "P") if (n, k, s) in table]
strata = sorted(next(iter(table.values()))[0])
print("| stratum | " + " | ".join(f"k={k} {s}, {NAMES[n]}" for n, k, s in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for st in strata:
    print(f"| {st} | " + " | ".join(" / ".join(f"{v[st]:.2f}" for v in table[c]) for c in cols) + " |")
print("| geometric mean over strata | " + " | ".join(
    " / ".join(f"{statistics.geometric_mean(v.values()):.3f}" for v in table[c]) for c in cols) + " |")
