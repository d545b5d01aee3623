"""The strict-JSON reports of this folder pooled: per report and setting, all answers' milliseconds over all their
tokens (every run and prompt together), with the device wait (the decode loop's time awaiting the device) and the
host's time (the rest), and the champion alone's run-ahead passes, those rolled back and submissions a token.
Usage: python bench/h200/results/2026-12-05d/json_pooled.py"""
import collections
import gzip
import json
from pathlib import Path

here = Path(__file__).resolve().parent
for call in (13, 17, 21):
    for side in ("A", "A2", "C", "free"):
        d = json.load(gzip.open(here / f"call{call}_json_{side}.json.gz", "rt"))
        groups = collections.defaultdict(list)
        for r in d["records"]:
            groups["alone" if r["drafter"] == "none" else f"{r['drafter']} k={r['k']}"].append(r)
        cells = []
        for name, rs in groups.items():
            tok = sum(r["n_tokens"] for r in rs)
            ms = sum(r["elapsed_ms"] for r in rs)
            wait = sum(r.get("device_wait_ms") or 0 for r in rs)
            cells.append(f"{name} {ms / tok:.2f} ms ({wait / tok:.2f} device wait + {(ms - wait) / tok:.2f} host)")
            if name == "alone":
                cells[-1] += (f", {sum(r['submissions'] for r in rs) / tok:.2f} submissions, "
                              f"{sum(r.get('ahead_passes') or 0 for r in rs)} passes run ahead, "
                              f"{sum(r.get('wasted_passes') or 0 for r in rs)} rolled back")
        print(f"call {call} {side:4}: a token: " + "; ".join(cells))
