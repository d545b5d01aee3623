"""GPU ms (H100) of call 1 (bench/h200/attn_blocks.sh): per variant, round 1 / round 2, T_single, T_verify(4),
T_verify(8) at the long position (KV 2,000) and at 64, with attn_o / ffn us of a one-row pass at 2,000 (one pass per
dispatch: the profile's sums exceed T_single).  python bench/h200/results/2026-12-06/table.py"""
import gzip
import json
from pathlib import Path


def load(name):
    out = {}
    for line in gzip.open(Path(__file__).with_name(name)):
        r = json.loads(line)
        out.setdefault(r["variant"], []).append(r["result"])
    return out


def pair(rs, f):
    return " / ".join(f(x) for x in rs)


long, short = load("call1_long.json.gz"), load("call1_short.json.gz")
print("| variant | KV 2,000: T_single | T_verify(4) | T_verify(8) | attn_o-ffn us | KV 64: T_single | T_verify(4) |")
print("|---|---|---|---|---|---|---|")
def ms(*keys):
    def f(x):
        for k in keys:
            x = x[k]
        return f"{x:.3f}"
    return f


def kinds(x):
    p = x["profile_n1_pos2000"]
    return f"{p['attn_o']:.0f}-{p['ffn']:.0f}"


for v, rs in long.items():
    s = short.get(v, [])
    print(f"| {v} | {pair(rs, ms('single', 'gpu'))} | {pair(rs, ms('verify', '4', 'gpu'))} | "
          f"{pair(rs, ms('verify', '8', 'gpu'))} | {pair(rs, kinds)} | {pair(s, ms('single', 'gpu')) or '-'} | "
          f"{pair(s, ms('verify', '4', 'gpu')) or '-'} |")
