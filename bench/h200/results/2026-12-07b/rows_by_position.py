"""The product's own pass timings (each report's `timings`: exactspec.timing at each prompt's end) split into long
context (~1,870 positions) and the other strata (40-122 positions): medians over every timing of every side of the
given folders of the chained pass (ahead_chain, ms a token), a forward of one row and T_verify(k) (k + 1 rows, k =
1..4), all with their readback; and the rows' own cost T_verify(k) - T_verify(0).
Usage: python3 rows_by_position.py DIR [DIR ...]   (DIR: product_sides.sh's sides/)"""
import glob, json, statistics, sys
from collections import defaultdict

d = defaultdict(list)
for folder in sys.argv[1:]:
    for f in glob.glob(f"{folder}/product_*.json"):
        for t in json.load(open(f))["timings"]:
            v = t["verify_ms"]
            d["long context" if t["stratum"] == "long_context" else "other strata"].append(
                [t["position"], t["ahead_chain"]["ms_per_token"]["median"], t["forward_ms"]["median"]] +
                [v[str(k)]["median"] for k in (1, 2, 3, 4)])
print("| | timings | position | chained pass | forward (1 row) | T_verify(1..4) | rows' cost T_verify(k) - T_verify(0), k = 1..4 |")
print("|---|---|---|---|---|---|---|")
for key, rows in d.items():
    med = [statistics.median(c) for c in zip(*rows)]
    print(f"| {key} | {len(rows)} | {med[0]:.0f} | {med[1]:.3f} | {med[2]:.3f} | " + " / ".join(f"{x:.3f}" for x in med[3:])
          + " | " + " / ".join(f"{x - med[2]:.3f}" for x in med[3:]) + " |")
