"""Would "the n-gram's copy when it has one, else the head" raise tau? (CPython, numpy reference; greedy)

For each workload prompt (--per-stratum N of each stratum; answers capped at 64 tokens) the champion answers alone
(exactspec.decode.generate, greedy) and keeps its features; from EVERY start t along the answer:
  head run[t]   the head's own chain of 8 proposals (exactspec_train.accept.head_chains, as bench head_acceptance),
                compared with the champion's tokens: how many a round starting at t gets accepted;
  n-gram run[t] the n-gram drafter's lookup over prompt + answer[:t] (exactspec.drafters.ngram, min 2, max 3),
                compared the same way; None where it finds no match (the product then runs the champion ahead).
A greedy round's proposals depend only on the committed prefix (the head re-makes positions it predicted from
the champion's features), so the combined drafter's run is the n-gram's where it has a match, else the head's, and
exactspec_train.accept.simulate_runs replays the decode loop's rounds over each (fixed k). Prints per stratum the
greedy tau at k = 1, 2, 4 (emitted / rounds over the stratum's prompts, as bench head_acceptance) of the head, of
the combined drafter, and the mean share of the combined drafter's rounds that were the n-gram's.

    python bench/results/head/combined_sim.py [--per-stratum 2] [--head static/models/head-smollm2.gguf] [--min-ngram 2,3]
        [--max-ngram 3] [--validate adv-11,ml-02]

--validate IDS: those prompts also run through the real loop (exactspec.decode.generate, drafter head, greedy, k = 1,
2, 4, head_copy off and on, the decode loop's own rounds): its tau must equal the simulation's (head and comb2).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "py"))
from exactspec.chat import encode_chat  # noqa: E402
from exactspec.decode import GenerateConfig, generate  # noqa: E402
from exactspec.drafters.head import HeadModel  # noqa: E402
from exactspec.drafters.ngram import NgramDrafter  # noqa: E402
from exactspec.formats import sha256_file  # noqa: E402
from exactspec.reference import ReferenceModel  # noqa: E402
from exactspec.tokenizer import Tokenizer  # noqa: E402
from exactspec_train.accept import head_chains, lookup_runs, simulate_runs, tau_table  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402

EOS, KS, MAXNEW = 2, (1, 2, 4), 64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-stratum", type=int, default=2)
    ap.add_argument("--head", default=str(ROOT / "static/models/head-smollm2.gguf"))
    ap.add_argument("--min-ngram", default="2", help="comma-separated: one combined drafter per n-gram minimum")
    ap.add_argument("--max-ngram", type=int, default=3, help="the longest match tried first (at least the minimum)")
    ap.add_argument("--validate", default="", help="comma-separated workload ids: the real loop against the simulation")
    a = ap.parse_args()
    C = ROOT / "static/models/smollm2-135m-instruct-q4_1.gguf"
    tok = Tokenizer.from_gguf(C)
    champ = ReferenceModel.from_file(C, max_len=4096, keep_features=True)
    head = HeadModel.from_file(a.head, champ, sha256_file(C), max_len=4096)
    items = load_workload(ROOT / "tests/data/workload.jsonl")
    strata = list(dict.fromkeys(it["stratum"] for it in items))
    check = [x for x in a.validate.split(",") if x]
    items = [it for s in strata for it in [x for x in items if x["stratum"] == s][:a.per_stratum]
             if it["id"] not in check] + [it for it in items if it["id"] in check]
    mins = [int(x) for x in a.min_ngram.split(",")]
    drafters = {m: NgramDrafter(max(a.max_ngram, m), m) for m in mins}
    names = ["head"] + [f"comb{m}" for m in mins]
    res = {}
    for it in items:
        prompt = encode_chat(tok, workload_messages(it))
        max_new = min(MAXNEW, it["max_new_tokens"])
        champ.truncate(0)
        r = generate(champ, prompt, GenerateConfig(max_new_tokens=max_new, temperature=0.0, adaptive=False, k=0,
                                                   drafter="none"), eos_ids=[EOS])
        y = r.token_ids + ([EOS] if r.finish_reason == "eos" else [])
        feats = champ.feature_rows(0, len(prompt) + len(y) - 2).copy()
        ch = head_chains(head, feats, prompt, y, 8, lambda z, pos: int(np.argmax(z)), full=False)
        runs, has = {"head": np.asarray(ch["run"])}, {}
        for m, ng in drafters.items():
            nrun, hs = lookup_runs(ng, prompt, y)
            runs[f"comb{m}"], has[f"comb{m}"] = np.where(hs, nrun, runs["head"]), hs
        eos = y[-1] == EOS
        sims = {(d, k): simulate_runs(runs[d], k, max_new, eos) for d in names for k in KS}
        row = {key: (v["emitted"], v["rounds"]) for key, v in sims.items()}
        for d in names[1:]:       # share of the combined drafter's rounds (k = 2) that were the n-gram's
            t, n_ng, n_r = 0, 0, 0
            while t < len(y):
                n_r += 1
                n_ng += int(has[d][t])
                t += min(int(runs[d][t]), 2, len(y) - t) + 1
            row[d] = n_ng / n_r
        if it["id"] in check:     # the real loop, head_copy off (head) and on (comb2)
            for d, hc in (("head", False), ("comb2", True)):
                if d not in names:
                    continue
                for k in KS:
                    champ.truncate(0)
                    head.truncate(0)
                    g = generate(champ, prompt, GenerateConfig(max_new_tokens=max_new, temperature=0.0, k=k,
                                                               drafter="head", adaptive=False, head_copy=hc),
                                 draft=head, eos_ids=[EOS])
                    ok = abs(g.stats["tau"] - sims[(d, k)]["tau"]) < 1e-9 and g.token_ids == [t for t in y if t != EOS]
                    print(f"validate {it['id']} {d} k={k}: loop tau {g.stats['tau']:.4f}, simulated "
                          f"{sims[(d, k)]['tau']:.4f}: {'equal' if ok else 'DIFFERENT'}", flush=True)
            continue          # (not counted in the tables: they hold the --per-stratum prompts)
        res.setdefault(it["stratum"], []).append(row)
        print(f"{it['id']}: " + " ".join(f"{d}/{k} {sims[(d, k)]['tau']:.2f}" for d in names for k in KS), flush=True)

    if not res:
        return
    print(f"\ngreedy tau at k = {', '.join(map(str, KS))}; head = the head alone, combM = the n-gram (minimum M) where it"
          f" has a match, else the head; last: the share of combM's rounds (k = 2) that were the n-gram's")
    print("\n".join(tau_table(res, names, KS, extra=lambda rows: "   " + " ".join(
        f"{np.mean([r[d] for r in rows]):4.2f}" for d in names[1:]))))

if __name__ == "__main__":
    main()
