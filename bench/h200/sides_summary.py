"""Summarise bench/h200/product_sides.sh's sides (bench product, one side per engine option set): per side and
stratum the median [min-max] tok/s of the champion alone's answers and their median time to the first token; every
side's tokens / seconds over all its answers; and from each side's engine timeline (EXACTSPEC_TRACE) the answers'
first runs: for each run of >= 8 consecutive decodeAhead calls (an answer; bench product's timings make such runs
too), its first call's duration and whether that run came pre-encoded; then per stratum the median over each side
name's answers, each name against the first.
    python bench/h200/sides_summary.py DIR      (DIR: product_<i>_<name>.json and trace_<i>_<name>.jsonl)
"""
from __future__ import annotations

import json
import statistics as st
import sys
from pathlib import Path

from trace_summary import load   # (bench/h200: the timeline's records, .jsonl or .jsonl.gz)


def answers(report: dict) -> list[dict]:
    return [r for r in report["records"] if r["drafter"] == "none" and r.get("tokens_per_s")]


def first_runs(trace: Path) -> dict:
    """Over runs of >= 8 consecutive 'ahead' calls: the median duration of the first call (ms) and the share of first
    calls whose submission was pre-encoded."""
    calls, cur = [], None
    for r in load(str(trace)):
        if r["ev"] == "call":
            cur = {"t": r["t"], "kind": r["kind"], "pre": None}
        elif r["ev"] == "submit" and cur is not None and cur["pre"] is None:
            cur["pre"] = r["pre"]
        elif r["ev"] == "ret" and cur is not None:
            cur["ret"] = r["t"]
            calls.append(cur)
            cur = None
    seqs, s = [], []
    for c in calls + [{"kind": None}]:
        if c["kind"] == "ahead":
            s.append(c)
            continue
        if len(s) >= 8:
            seqs.append(s)
        s = []
    if not seqs:
        return {"runs": 0}
    return {"runs": len(seqs), "first_call_ms": round(st.median(x[0]["ret"] - x[0]["t"] for x in seqs), 2),
            "first_pre_encoded": f"{sum(bool(x[0]['pre']) for x in seqs)}/{len(seqs)}"}


def main(d: Path) -> None:
    sides = []   # (i, name, report, timeline)
    for p in d.glob("product_*_*.json"):
        _, i, name = p.stem.split("_", 2)
        tr = d / f"trace_{i}_{name}.jsonl"
        sides.append((int(i), name, json.loads(p.read_text()), first_runs(tr) if tr.exists() else {"runs": 0}))
    sides.sort()
    strata = sorted({r["stratum"] for _, _, rep, _ in sides for r in answers(rep)})
    print("the champion alone through the product's loop: tok/s median [min-max] over each side's answers, ttft ms")
    print(f"{'stratum':18} " + " ".join(f"{f'{i} {name}':>30}" for i, name, _, _ in sides))
    for s in strata:
        cells = []
        for _, _, rep, _ in sides:
            a = [r for r in answers(rep) if r["stratum"] == s]
            tps = [r["tokens_per_s"] for r in a]
            cells.append(f"{st.median(tps):7.1f} [{min(tps):6.1f}-{max(tps):6.1f}] {st.median(r['ttft_ms'] for r in a):5.2f}"
                         if a else "-")
        print(f"{s:18} " + " ".join(f"{c:>30}" for c in cells))
    print()
    names = []
    for i, name, rep, tr in sides:
        names += [name] if name not in names else []
        a = answers(rep)
        tok = sum(r["n_tokens"] for r in a)
        sec = sum(r["elapsed_ms"] for r in a) / 1000
        opts = rep["meta"].get("engine_opts") or {}
        print(f"side {i} {name} {opts}: {len(a)} answers, {tok} tokens in {sec:.3f} s = {tok / sec:.1f} tok/s; "
              f"ttft median {st.median(r['ttft_ms'] for r in a):.2f} ms; answers' first runs: {tr}")
    if len(names) > 1:
        per = {n: [r for i, name, rep, _ in sides if name == n for r in answers(rep)] for n in names}
        print(f"\nby stratum, median over each name's answers (tok/s; ttft ms), and x {names[0]}")
        for s in strata:
            cells = []
            for n in names:
                a = [r for r in per[n] if r["stratum"] == s]
                b = [r["tokens_per_s"] for r in per[names[0]] if r["stratum"] == s]
                if a and b:
                    cells.append(f"{n} {st.median(r['tokens_per_s'] for r in a):7.1f} ({st.median(r['ttft_ms'] for r in a):5.2f})"
                                 f" x{st.median(r['tokens_per_s'] for r in a) / st.median(b):.3f}")
            print(f"  {s:18} " + "   ".join(cells))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
