"""Tables of this folder's in-process A/Bs (bench/gpu/ab_engines.mjs JSON): per call and KV position, each variant's
one-row pass (GPU ms: median of all passes [min-max of the round medians]) and chained decodeAhead runs of 4
(tok/s = 1 / the median ms a token).   python bench/h200/results/2026-12-06c/table.py"""
import json
from pathlib import Path

HERE = Path(__file__).parent
for call in ("call1", "call2", "call5"):
    files = sorted(HERE.glob(f"{call}/*.json"), key=lambda p: json.loads(p.read_text())["pos"])
    runs = [json.loads(p.read_text()) for p in files]
    names = [v["name"] for v in runs[0]["variants"]]
    print(call + ": " + ", ".join(v["name"] + " " + json.dumps(v["opts"]) for v in runs[0]["variants"]))
    print("| KV at | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for r in runs:
        cells = []
        for v in r["variants"]:
            g = v["round_medians"]["gpu"]
            cells.append(f"{v['single_gpu_ms']:.3f} [{min(g):.3f}-{max(g):.3f}], {1 / v['chain_ms_per_token'] * 1000:.0f}")
        print(f"| {r['pos']} | " + " | ".join(cells) + " |")
    print()
