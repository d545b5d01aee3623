"""What a fresh run's continuation costs the host, from engine timelines (EXACTSPEC_TRACE of bench product; calls 10-11
here): per kind of batched call (ahead, ngram_chain), whether it was continued and whether its first submission was
pre-encoded, the medians of the intervals between the call, its submissions, its readback ('mapped') and its return.
A fresh call with two submissions is a run whose continuation was submitted after its readback.
    tar xzf call10/sides.tgz; python bench/h200/results/2026-12-06d/fresh_cont.py sides/trace_1_A.jsonl [...]
"""
import collections
import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # bench/h200
from trace_summary import load  # noqa: E402  (the timeline's records, .jsonl or .jsonl.gz)


def calls_of(path):
    """The timeline's calls in order: {kind, t, ev: the records up to the next call}."""
    calls, cur = [], None
    for r in load(path):
        if r["ev"] == "call":
            cur = {"kind": r["kind"], "t": r["t"], "ev": []}
            calls.append(cur)
        elif cur is not None:
            cur["ev"].append(r)
    return calls


def main(paths):
    agg = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in paths:
        for c in calls_of(f):
            ret = [e for e in c["ev"] if e["ev"] == "ret"]
            subs = [e for e in c["ev"] if e["ev"] == "submit"]
            maps = [e for e in c["ev"] if e["ev"] == "mapped"]
            if not ret or c["kind"] == "forward":
                continue
            if not ret[0].get("continued") and len(subs) == 2 and maps:   # fresh, continuation after the readback
                a = agg[(c["kind"], "fresh+cont", subs[0].get("pre"))]
                a["call->submit"].append(subs[0]["t"] - c["t"])
                a["submit->mapped"].append(maps[0]["t"] - subs[0]["t"])
                a["mapped->cont submitted"].append(subs[1]["t"] - maps[0]["t"])
                a["cont submitted->ret"].append(ret[0]["t"] - subs[1]["t"])
                a["call"].append(ret[0]["t"] - c["t"])
            elif ret[0].get("continued") and subs:
                a = agg[(c["kind"], "continued", subs[0].get("pre"))]
                a["call->cont submitted"].append(subs[0]["t"] - c["t"])
                a["call"].append(ret[0]["t"] - c["t"])
    for k, a in sorted(agg.items(), key=str):
        print(k, len(a["call"]), "; ".join(f"{m} {st.median(v):.2f}" for m, v in a.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
