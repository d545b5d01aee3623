"""The head's speedup per stratum, k and setting (forced / "only while it pays") in call 7 (before 6422c10: a model's or
head's rounds with speculation off never hinted the device's next run) and call 8 (after it); medians over the
strata per k and setting.   python bench/h200/results/2026-12-04e/head_adaptive.py"""
import statistics as st
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse(f):
    out = {}
    for line in open(f):
        p = line.split()
        if len(p) > 10 and p[1] == "head":
            out[(p[0], p[2], p[4])] = (float(p[9]), p[10])     # (stratum, k, adapt) -> (speedup median, [range])
    return out


a, b = parse(HERE / "call7_before_product_head.txt"), parse(HERE / "call8_after_product_head.txt")
for key in b:
    print(f"{key[0]:18s} k={key[1]} {key[2]:4s} before {a[key][0]:.2f} {a[key][1]:12s} after {b[key][0]:.2f} {b[key][1]}")
for k in ("2", "4"):
    for ad in ("off", "on"):
        ks = [x for x in b if x[1] == k and x[2] == ad]
        print(f"median over strata, k = {k}, adapt {ad}: before {st.median(a[x][0] for x in ks):.2f}, "
              f"after {st.median(b[x][0] for x in ks):.2f}")
