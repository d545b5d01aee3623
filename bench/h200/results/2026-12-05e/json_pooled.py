"""Calls 16 and 20's strict-JSON reports pooled, as bench/h200/results/2026-12-05d/json_pooled.py does for that folder: per
report and setting, all answers' milliseconds over all their tokens (every run and prompt together), with the device
wait and the host's time, and the speedup of each setting over the champion alone of the same report.
Usage: python bench/h200/results/2026-12-05e/json_pooled.py"""
import collections
import gzip
import json
from pathlib import Path

here = Path(__file__).resolve().parent
for call, side in ((16, "A"), (16, "A2"), (16, "free"), (20, "A"), (20, "A2")):
    d = json.load(gzip.open(here / f"call{call}_json_{side}.json.gz", "rt"))
    groups = collections.defaultdict(list)
    for r in d["records"]:
        if r.get("n_tokens"):
            groups["alone" if r["drafter"] == "none" else f"{r['drafter']} k={r['k']}"].append(r)
    per = {name: sum(r["elapsed_ms"] for r in rs) / sum(r["n_tokens"] for r in rs) for name, rs in groups.items()}
    cells = []
    for name, rs in groups.items():
        tok = sum(r["n_tokens"] for r in rs)
        wait = sum(r.get("device_wait_ms") or 0 for r in rs)
        cells.append(f"{name} {per[name]:.2f} ms ({wait / tok:.2f} device wait + {per[name] - wait / tok:.2f} host)"
                     + ("" if name == "alone" else f" = {per['alone'] / per[name]:.2f}x"))
    print(f"call {call} {side:4}: a token: " + "; ".join(cells))
