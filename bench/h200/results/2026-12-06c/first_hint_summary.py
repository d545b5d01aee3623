"""Summarise bench/h200/first_hint.sh's sides (the champion alone with the decode loop's hint after an answer's first
run, "after", and without, "before"): per side and stratum the median [min-max] tok/s of the answers and their median
time to the first token (bench product's reports), all answers' tokens / seconds; and from each side's engine timeline
(EXACTSPEC_TRACE) the answers' start: for each run of >= 8 consecutive decodeAhead calls (an answer; the timings'
chains too), the time from its first call to its third call and the host's gap after its first call (Python's first
confirmations), medians.
    python bench/h200/first_hint_summary.py DIR      (DIR: product_<i>_<side>.json and trace_<i>_<side>.jsonl)
"""
from __future__ import annotations

import json
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path


def answers(report: dict) -> list[dict]:
    return [r for r in report["records"] if r["drafter"] == "none" and r.get("tokens_per_s")]


def starts(trace: Path) -> dict:
    """Medians over runs of >= 8 consecutive 'ahead' calls: first call to third call (ms), host gap after the first."""
    calls, cur = [], None
    for line in trace.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r["ev"] == "call":
            cur = {"t": r["t"], "kind": r["kind"]}
        elif r["ev"] == "ret" and cur:
            cur["ret"] = r["t"]
            calls.append(cur)
            cur = None
    seqs, s = [], []
    for c in calls:
        if c["kind"] == "ahead":
            s.append(c)
        else:
            if len(s) >= 8:
                seqs.append(s)
            s = []
    if len(s) >= 8:
        seqs.append(s)
    if not seqs:
        return {"runs": 0}
    return {"runs": len(seqs), "first_to_third_ms": st.median(x[2]["t"] - x[0]["t"] for x in seqs),
            "gap_after_first_ms": st.median(x[1]["t"] - x[0]["ret"] for x in seqs)}


def main(d: Path) -> None:
    sides = defaultdict(list)   # side -> [(i, report, trace stats)]
    for p in sorted(d.glob("product_*_*.json")):
        _, i, side = p.stem.split("_")
        tr = d / f"trace_{i}_{side}.jsonl"
        sides[side].append((int(i), json.loads(p.read_text()), starts(tr) if tr.exists() else {"runs": 0}))
    strata = sorted({r["stratum"] for v in sides.values() for _, rep, _ in v for r in answers(rep)})
    print("the champion alone through the product's loop: tok/s median [min-max] over each side's answers; ttft ms")
    print(f"{'stratum':18} " + " ".join(f"{f'{side} {i}':>30}" for side, v in sorted(sides.items()) for i, _, _ in v))
    for s in strata:
        cells = []
        for side, v in sorted(sides.items()):
            for _, rep, _ in v:
                a = [r for r in answers(rep) if r["stratum"] == s]
                tps = [r["tokens_per_s"] for r in a]
                cells.append(f"{st.median(tps):7.1f} [{min(tps):6.1f}-{max(tps):6.1f}] {st.median(r['ttft_ms'] for r in a):5.2f}"
                             if a else f"{'-':>30}")
        print(f"{s:18} " + " ".join(f"{c:>30}" for c in cells))
    print()
    for side, v in sorted(sides.items()):
        for i, rep, tr in v:
            a = answers(rep)
            tok = sum(r["n_tokens"] for r in a)
            sec = sum(r["elapsed_ms"] for r in a) / 1000
            print(f"side {i} {side:6}: {len(a)} answers, {tok} tokens in {sec:.3f} s = {tok / sec:.1f} tok/s; "
                  f"ttft median {st.median(r['ttft_ms'] for r in a):.2f} ms; timeline: {tr}")
    per = {side: [] for side in sides}
    for side, v in sides.items():
        for _, rep, _ in v:
            per[side] += answers(rep)
    if {"after", "before"} <= per.keys():
        print("\nby stratum, median over both sides' answers: after / before")
        for s in strata:
            a = [r["tokens_per_s"] for r in per["after"] if r["stratum"] == s]
            b = [r["tokens_per_s"] for r in per["before"] if r["stratum"] == s]
            if a and b:
                print(f"  {s:18} {st.median(a):7.1f} / {st.median(b):7.1f} = {st.median(a) / st.median(b):.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
