"""Would a datastore of the champion's own answers (a REST-like retrieval drafter) raise the n-gram drafter's tau?

Simulated exactly over the champion's greedy answers to the 136 workload prompts (64 tokens at most; the answers of
`python build.py bench ngram_tau`, cached in .cache/ngram-bench/): from every start t along an answer, the drafter's
proposals are compared with the champion's tokens (how many a round starting at t gets accepted), and
exactspec_train.accept.simulate_runs replays the decode loop's rounds (fixed k, greedy; a round without proposals is a
plain pass: tau is tokens per target pass, as on the CPU fallback).

  ngram      exactspec's NgramDrafter (min 2, max 3) over prompt + answer so far: the shipped drafter
  +store     where the n-gram finds no match, the longest suffix (max 4 .. min M tokens) of prompt + answer that
             occurs in the datastore proposes, token by token, the continuation most occurrences agree on
The datastore holds the OTHER prompts' answers (leave-one-out: `loo-prompt`), or only other strata's answers
(`loo-stratum`: the pessimistic case, no stratum's own phrasing). A real datastore would be the champion's answers to
prompts like the users', shipped beside the model.

    python bench/results/ngram/datastore_sim.py [--min-store 2,3] [--fraction 1.0]
"""
import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "py"))
from exactspec.drafters.ngram import NgramDrafter  # noqa: E402
from exactspec_train.accept import lookup_runs, run_from, simulate_runs, tau_table  # noqa: E402
from exactspec_train.data import load_workload  # noqa: E402

KS, MAXN = (1, 2, 4), 4


class Store:
    """n-gram -> {next token: [occurrence ids]} over a corpus of token sequences (n = 1 .. MAXN)."""

    def __init__(self, seqs, min_n):
        self.seqs, self.min_n = seqs, min_n
        self.index = defaultdict(list)          # (n-gram) -> [(seq, end position)]
        for s, seq in enumerate(seqs):
            for n in range(min_n, MAXN + 1):
                for i in range(len(seq) - n):
                    self.index[tuple(seq[i:i + n])].append((s, i + n))

    def propose(self, ctx, k):
        for n in range(MAXN, self.min_n - 1, -1):
            occ = self.index.get(tuple(ctx[-n:]))
            if not occ:
                continue
            out = []
            while occ and len(out) < k:        # token by token: the next token most occurrences agree on
                c = Counter(self.seqs[s][p] for s, p in occ if p < len(self.seqs[s]))
                if not c:
                    break
                tok, _ = c.most_common(1)[0]
                out.append(tok)
                occ = [(s, p + 1) for s, p in occ if p < len(self.seqs[s]) and self.seqs[s][p] == tok]
            return out
        return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-store", default="2,3")
    ap.add_argument("--fraction", type=float, default=1.0, help="the datastore keeps this share of its answers "
                    "(a fixed random subset): how tau grows with the datastore's size")
    a = ap.parse_args()
    items = load_workload(ROOT / "tests/data/workload.jsonl")
    recs = []
    for it in items:
        f = ROOT / ".cache/ngram-bench" / f"{it['id']}_{min(64, it['max_new_tokens'])}.json"
        r = json.loads(f.read_text())
        recs.append((it, r["prompt"], r["y"], r["max_new"]))
    ng = NgramDrafter()
    sub = np.random.default_rng(0).random(len(recs)) < a.fraction    # (len(recs),) answers the datastore keeps
    mins = [int(x) for x in a.min_store.split(",")]
    names = ["ngram"] + [f"{m}{w}" for m in mins for w in ("P", "S")]
    res = defaultdict(list)
    stores = {}
    for i, (it, prompt, y, max_new) in enumerate(recs):
        nrun, has = lookup_runs(ng, prompt, y)
        runs = {"ngram": nrun}
        for m in mins:
            for w in ("P", "S"):
                keep = [r[2] for j, r in enumerate(recs) if j != i and (w == "P" or r[0]["stratum"] != it["stratum"])
                        and sub[j]]
                key = (m, w, it["stratum"] if w == "S" else it["id"])
                if key not in stores:
                    stores.clear() if len(stores) > 4 else None
                    stores[key] = Store(keep, m)
                st = stores[key]
                srun = nrun.copy()
                for t in range(len(y)):
                    if not has[t]:
                        srun[t] = run_from(st.propose(list(prompt) + y[:t], 8), y, t)
                runs[f"{m}{w}"] = srun
        eos = bool(y) and y[-1] == 2
        row = {(d, k): (lambda v: (v["emitted"], v["rounds"], v["proposed"]))(simulate_runs(runs[d], k, max_new, eos))
               for d in names for k in KS}
        res[it["stratum"]].append(row)
        print(f"{it['id']}: " + " ".join(f"{d}/{k} {row[(d, k)][0] / row[(d, k)][1]:.2f}" for d in names for k in KS),
              flush=True)

    print(f"\ngreedy tau (tokens per target pass) at k = {', '.join(map(str, KS))}; ngram = the shipped drafter; MP / MS "
          f"= the n-gram, else the datastore (suffix of MAXN .. M tokens) of the other prompts' answers (P) or of other "
          f"strata's answers (S)")
    print("\n".join(tau_table(res, names, KS)))


if __name__ == "__main__":
    main()
