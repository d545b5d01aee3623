"""Summarise an engine timeline (createEngine's `trace`, written by bench/product/node_host.mjs or
bench/gpu/head_bench.mjs with EXACTSPEC_TRACE=FILE): per kind of batched call of the champion (spec_chain, ahead,
round, ngram_chain), the median over calls of
  host gap   the time from the previous call's return to this call (the caller's own work: Python, the bridge)
  in call    the call's own time (its submissions' encode + submit, then waiting for its readback)
  continued  the share of calls that took the continuation the call before submitted
and over all submissions the median time of queue.submit.
    python bench/h200/trace_summary.py TRACE.jsonl [...]
"""
import gzip
import json
import statistics as st
import sys
from collections import defaultdict


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [json.loads(x) for x in f if x.strip()]


def summary(recs):
    kinds = defaultdict(lambda: defaultdict(list))
    open_calls = {}
    last_ret = None
    for r in recs:
        if r["ev"] == "call" and r["kind"] != "forward":
            open_calls[r["model"]] = r
            if last_ret is not None and last_ret["model"] == r["model"]:
                kinds[r["kind"]]["host_gap"].append(r["t"] - last_ret["t"])
        elif r["ev"] == "ret" and r["model"] in open_calls and r["kind"] != "forward":
            c = open_calls.pop(r["model"])
            kinds[r["kind"]]["in_call"].append(r["t"] - c["t"])
            kinds[r["kind"]]["continued"].append(1.0 if r.get("continued") else 0.0)
            last_ret = r
        elif r["ev"] == "ret" and r["kind"] == "forward":
            last_ret = None
    for r in recs:
        if r["ev"] == "submit":
            kinds["(all submissions)"]["submit"].append(r["submit_ms"])
    out = {}
    for k, v in kinds.items():
        out[k] = {m: (st.median(x), len(x)) for m, x in v.items() if x}
    return out


def main(argv):
    for p in argv:
        print(f"== {p}")
        for k, v in summary(load(p)).items():
            print(f"  {k}: " + ", ".join(f"{m} {x:.3f}" + ("" if m == "continued" else " ms") + f" (n {n})"
                                         for m, (x, n) in v.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
