"""Calls 13-15 (bench/h200/trace_call.sh, an H100): per call, the head's speedup per answer through the product's loop
(each prompt's champion-alone answer against its head answer, k = 1, same run) and the loops without Python
(head_bench: chains of 4 back to back against the champion alone's runs of 4).
    python bench/h200/results/2026-12-05b/trace_speedups.py
"""
import io
import json
import re
import statistics as st
import tarfile
from pathlib import Path

HERE = Path(__file__).parent
for c in (13, 14, 15):
    with tarfile.open(HERE / f"call{c}_traces.tgz") as t:
        d = json.load(t.extractfile("traces/product_ab_A.json"))
        js = t.extractfile("traces/js.txt").read().decode()
    by = {}
    for r in d["records"]:
        by.setdefault(r["prompt_id"], {})[r["drafter"]] = r
    sp = [(v["none"]["elapsed_ms"] / v["none"]["n_tokens"]) / (v["head"]["elapsed_ms"] / v["head"]["n_tokens"])
          for v in by.values() if "none" in v and "head" in v]
    alone = float(re.search(r"runs of 4 back to back with continuations: ([\d.]+) ms a token", js).group(1))
    chain = float(re.search(r"back to back with continuations: [\d.]+ ms a round, ([\d.]+) ms a token", js).group(1))
    print(f"call {c}: product, head k = 1 per answer: median {st.median(sp):.2f} [{min(sp):.2f}-{max(sp):.2f}] "
          f"({len(sp)} prompts); without Python: alone {alone:.3f}, head chains {chain:.3f} ms a token = "
          f"{alone / chain:.2f}x")
