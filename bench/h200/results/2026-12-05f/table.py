"""Per variant and round of call 1's verify_rows.sh: GPU ms of T_single, T_verify(4), T_verify(8), and the head's
(logits) GPU us per pass for 1 / 5 rows.  python bench/h200/results/2026-12-05f/table.py"""
import gzip
import json
from pathlib import Path

rows = [json.loads(l) for l in gzip.open(Path(__file__).with_name("call1_verify_rows.json.gz"))]
print("| variant | round | T_single | T_verify(4) | T_verify(8) | logits us, 1 / 5 rows |")
print("|---|---|---|---|---|---|")
for r in sorted(rows, key=lambda r: (r["variant"], r["round"])):
    x = r["result"]
    print(f"| {r['variant']} | {r['round']} | {x['single']['gpu']:.3f} | {x['verify']['4']['gpu']:.3f} | "
          f"{x['verify']['8']['gpu']:.3f} | {x['profile_n1_pos64']['logits']:.0f} / {x['profile_n5_pos64']['logits']:.0f} |")
