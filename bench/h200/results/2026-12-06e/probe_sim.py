"""Where should a copy probe start a chain? Over the workload prompts' greedy answers found in the bench product
reports under bench/h200/results (the longest of each prompt's; the prompt tokenized as the product does), at each
answer's first n-gram match and then at most one per 8 tokens (a probe's gap), the tokens a chain of 4 rounds at k = 4
would emit from there (each round: the lookup's proposals, the accepted ones and the champion's token), grouped by the
length of the suffix the lookup matched (2 or 3 tokens), where the match is (the answer, the prompt, its last 12
tokens), and the kind of stratum. net: the sum of (tokens - 8), a chain of 4 rounds and two switches priced as 8
plain tokens (H100 timelines: a continued chain call costs what a continued plain run of 4 does; a switch ~2 tokens).
    python bench/h200/results/2026-12-06e/probe_sim.py"""
import collections
import glob
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "py"))
from exactspec.chat import encode_chat  # noqa: E402
from exactspec.drafters.ngram import NgramDrafter  # noqa: E402
from exactspec.tokenizer import Tokenizer  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402

GROUNDED = ("summaries", "rewrites", "repetitive", "json_extraction", "untrusted_memory", "multilingual")


def answers():
    best = {}
    for f in sorted(glob.glob(str(ROOT / "bench/h200/results/**/*.json*"), recursive=True)):
        try:
            d = json.load(gzip.open(f, "rt") if f.endswith(".gz") else open(f))
        except Exception:
            continue
        for r in d.get("records", []) if isinstance(d, dict) else []:
            if r.get("mode") == "greedy" and "token_ids" in r and \
                    len(r["token_ids"]) > len(best.get(r["prompt_id"], {}).get("token_ids", [])):
                best[r["prompt_id"]] = r
    return best


def main():
    ng = NgramDrafter()
    tok = Tokenizer.from_gguf(ROOT / "static/models/smollm2-135m-instruct-q4_1.gguf")
    items = {it["id"]: it for it in load_workload(ROOT / "tests/data/workload.jsonl")}

    def chain(seq, t, end, k=4, rounds=4):
        pos, emitted = t, 0
        for _ in range(rounds):
            if pos >= end:
                break
            a = 0
            for j, p in enumerate(ng.lookup(seq[:pos], k)):
                if pos + j < end and seq[pos + j] == p:
                    a += 1
                else:
                    break
            emitted += a + 1
            pos += a + 1
        return emitted

    def source(seq, t):
        s = seq[:t]
        for n in range(ng.max_ngram, ng.min_ngram - 1, -1):
            for i in range(len(s) - n - 1, -1, -1):
                if s[i:i + n] == s[len(s) - n:]:
                    return i, n
        return None, 0

    tab = collections.defaultdict(list)
    got = answers()
    for pid, r in sorted(got.items()):
        p = encode_chat(tok, workload_messages(items[pid]))
        assert r.get("prompt_tokens") in (None, len(p)), pid
        seq, last = p + r["token_ids"], -99
        for t in range(len(p), len(seq) - 1):
            if not ng.lookup(seq[:t], 4) or t - last < 8:
                continue
            last = t
            i, n = source(seq, t)
            where = "answer" if i >= len(p) else "prompt's last 12" if i >= len(p) - 12 else "prompt"
            tab[("grounded" if r["stratum"] in GROUNDED else "chat-like", n, where)].append(chain(seq, t, len(seq)))
    print(f"{len(got)} answers; per group, matched suffix length, where the match is: probes, mean tokens, net")
    for key in sorted(tab):
        v = tab[key]
        print(f"  {key[0]:9s} {key[1]}-token match in the {key[2]:16s} {len(v):4d} probes  mean {sum(v) / len(v):5.2f}"
              f"  net {sum(e - 8 for e in v):+5d}")
    for n in (2, 3):
        v = [e for k, vs in tab.items() if k[1] == n for e in vs]
        print(f"  all {n}-token matches: {len(v)} probes, mean {sum(v) / len(v):.2f}, net {sum(e - 8 for e in v):+d}")


if __name__ == "__main__":
    main()
