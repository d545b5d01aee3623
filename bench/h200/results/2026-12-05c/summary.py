"""This folder's two summaries (2026-12-05, third session; README.md lists the calls):

    python bench/h200/results/2026-12-05c/summary.py

1. The tile policies (call1_tiles.json.gz, bench/h200/verify_rows.sh): per variant and round, GPU time of T_single
   and T_verify(k) / T_single for k = 2, 4, 8, and the GPU us of the FFN and qkv dispatches for 1 and 5 rows.
2. The head's chains forced and with "only while it pays" (call4_head_k2_pays.json.gz: k = 2; call5_head_k14_pays:
   k = 1 and 4; bench product, all strata x 2 prompts, 3 runs): per k and setting, each stratum's median speedup over
   the 3 runs (a run's speedup: tok/s with the head over the champion alone's in the same run), their median and
   range over the 11 strata, and how many strata reach 1.0 and 0.95.
3. The head's chains without and with copies (call9_head_A / call9_head_copy_D: head_copy, the n-gram's copies
   first), forced, k = 1, 2, 4, the same reading, and each stratum's speedup side by side.
"""
import gzip
import json
import statistics as st
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent


def tiles():
    print("tile policy        round  T_single GPU ms   T_verify(2) / (4) / (8) / T_single   FFN us n=1 / n=5   qkv us n=1 / n=5")
    with gzip.open(HERE / "call1_tiles.json.gz", "rt") as f:
        for line in f:
            d = json.loads(line)
            r = d["result"]
            s = r["single"]["gpu"]
            v = " / ".join(f"{r['verify'][str(k)]['gpu'] / s:.3f}" for k in (2, 4, 8))
            p1, p5 = r["profile_n1_pos64"], r["profile_n5_pos64"]
            print(f"{d['variant']:<18} {d['round']:>5}  {s:15.3f}   {v:>34}   {p1['ffn']:6.0f} / {p5['ffn']:6.0f}    "
                  f"{p1['qkv']:6.0f} / {p5['qkv']:6.0f}")


def speedups(name):
    """(k, adaptive) -> stratum -> per-run speedups; (k, adaptive) -> taus."""
    with gzip.open(HERE / name, "rt") as f:
        d = json.load(f)
    runs = defaultdict(lambda: defaultdict(list))      # (stratum, run) -> (k, adaptive) -> records
    for r in d["records"]:
        runs[(r["stratum"], r["run"])][(r["k"], bool(r.get("adaptive")))].append(r)
    speed = defaultdict(lambda: defaultdict(list))
    taus = defaultdict(list)
    for (stratum, _), g in runs.items():
        alone = g.get((0, False))
        if not alone:
            continue
        t_alone = sum(r["n_tokens"] for r in alone) / sum(r["elapsed_ms"] for r in alone)
        for key, rs in g.items():
            if key[0] == 0:
                continue
            speed[key][stratum].append(sum(r["n_tokens"] for r in rs) / sum(r["elapsed_ms"] for r in rs) / t_alone)
            taus[key] += [r["tau"] for r in rs if r.get("tau")]
    return speed, taus, all(r["identical"] for r in d["records"] if r["k"])


def copies():
    sa, ta, ia = speedups("call9_head_A.json.gz")
    sd, td, idd = speedups("call9_head_copy_D.json.gz")
    print(f"\nhead chains, forced      median speedup over the strata [min-max]  strata >= 1.0   tau (median)"
          f"   (all answers identical: {ia and idd})")
    for key in sorted(sa):
        for label, sp, ta_ in (("without copies", sa, ta), ("with copies", sd, td)):
            med = [st.median(v) for v in sp[key].values()]
            print(f"k = {key[0]}, {label:<15} {st.median(med):6.2f} [{min(med):.2f}-{max(med):.2f}]"
                  f"                      {sum(m >= 1.0 for m in med):>2} of {len(med)}       {st.median(ta_[key]):.2f}")
    print("\nper stratum, without -> with copies (median over the 3 runs), k = 1 / 2 / 4")
    for s in sa[(1, False)]:
        print(f"  {s:<18} " + "   ".join(f"{st.median(sa[(k, False)][s]):.2f} -> {st.median(sd[(k, False)][s]):.2f}"
                                          for k in (1, 2, 4)))


def pays():
    print("\nhead chains   setting              median speedup over the strata [min-max]   strata >= 1.0   >= 0.95   tau (median)")
    for name in ("call5_head_k14_pays.json.gz", "call4_head_k2_pays.json.gz"):
        speed, taus, _ = speedups(name)
        for key in sorted(speed):
            med = [st.median(v) for v in speed[key].values()]
            print(f"k = {key[0]}         {'only while it pays' if key[1] else 'forced':<20} {st.median(med):6.2f} "
                  f"[{min(med):.2f}-{max(med):.2f}]                       {sum(m >= 1.0 for m in med):>2} of {len(med)}"
                  f"       {sum(m >= 0.95 for m in med):>2}        {st.median(taus[key]) if taus[key] else float('nan'):.2f}")


if __name__ == "__main__":
    tiles()
    pays()
    copies()
