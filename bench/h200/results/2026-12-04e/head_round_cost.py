"""A forced head round's time in the product's loop against the same round timed alone (bench product's round_ms),
call 2 (the copy-trained head), answers made of head rounds only (no runs ahead): elapsed / rounds - round_ms, per k.
    python bench/h200/results/2026-12-04e/head_round_cost.py"""
import collections
import gzip
import json
import statistics as st
from pathlib import Path

d = json.load(gzip.open(Path(__file__).resolve().parent / "call2_copy_product_head.json.gz"))
tims = {(t["run"], t["stratum"]): t for t in d["timings"]}
extra, iso = collections.defaultdict(list), collections.defaultdict(list)
for r in d["records"]:
    if r["drafter"] != "head" or r["adaptive"] or r["mode"] != "greedy" or r["ahead_passes"]:
        continue
    rnd = tims[(r["run"], r["stratum"])]["round_ms"]["head"][str(r["k"])]["median"]
    extra[r["k"]].append(r["elapsed_ms"] / r["rounds"] - rnd)
    iso[r["k"]].append(rnd)
for k in sorted(extra):
    print(f"k = {k}: a round in the loop {st.median(iso[k]) + st.median(extra[k]):.2f} ms, timed alone "
          f"{st.median(iso[k]):.2f} ms, +{st.median(extra[k]):.2f} ms (median over {len(extra[k])} answers)")
