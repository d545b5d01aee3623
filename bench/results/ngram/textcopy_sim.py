"""Would a lookup by TEXT (not by token ids) find the copies the token n-gram misses? (simulated, greedy)

The token n-gram drafter matches the last 2-3 token ids; a rewrite writes the prompt's words with other tokens
(` Lena` mid-sentence against `Lena` at a line start, a capital, a comma). Here, where the token lookup finds
nothing: the longest suffix of the text so far (prompt + answer, bytes; MAX .. --min-bytes long) found earlier in the
text proposes the tokens the tokenizer writes for the bytes that followed it there (up to 48 bytes, cut at the
last word start, as JSON mode's copies are written: exactspec.constrain.drafter). Compared with the champion's
tokens from every start t and replayed with exactspec_train.accept.simulate_runs (fixed k; tau = tokens per target
pass, an empty round a plain pass), over the answers of `python build.py bench ngram_tau` (.cache/ngram-bench/).

    python bench/results/ngram/textcopy_sim.py [--min-bytes 6,10,16]
"""
import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "py"))
from exactspec.drafters.ngram import NgramDrafter  # noqa: E402
from exactspec.tokenizer import Tokenizer  # noqa: E402
from exactspec_train.accept import lookup_runs, run_from, simulate_runs, tau_table  # noqa: E402
from exactspec_train.data import load_workload  # noqa: E402

KS, MAXB, SPAN = (1, 2, 4), 64, 48


def text_copy(tok, ctx_bytes: bytes, min_b: int, k: int) -> list[int]:
    L = len(ctx_bytes)
    for n in range(min(MAXB, L - 1), min_b - 1, -1):
        needle = ctx_bytes[L - n:]
        i = ctx_bytes.rfind(needle, 0, L - 1)          # the most recent earlier occurrence
        if i < 0:
            continue
        cont = ctx_bytes[i + n:i + n + SPAN]
        if not cont:
            continue
        if len(cont) == SPAN:                          # cut at the last word start (a cut word tokenizes otherwise)
            j = max(cont.rfind(b" "), cont.rfind(b"\n"))
            cont = cont[:j] if j > 0 else cont
        try:
            return tok.encode(cont.decode("utf-8"), allow_special=False)[:k]
        except UnicodeDecodeError:
            return []
    return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-bytes", default="6,10,16")
    a = ap.parse_args()
    tok = Tokenizer.from_gguf(ROOT / "static/models/smollm2-135m-instruct-q4_1.gguf")
    items = load_workload(ROOT / "tests/data/workload.jsonl")
    ng = NgramDrafter()
    mins = [int(x) for x in a.min_bytes.split(",")]
    names = ["ngram"] + [f"text{m}" for m in mins]
    res = defaultdict(list)
    for it in items:
        r = json.loads((ROOT / ".cache/ngram-bench" / f"{it['id']}_{min(64, it['max_new_tokens'])}.json").read_text())
        prompt, y, max_new = r["prompt"], r["y"], r["max_new"]
        nrun, has = lookup_runs(ng, prompt, y)
        runs = {"ngram": nrun}
        for m in mins:
            trun = nrun.copy()
            for t in range(len(y)):
                if not has[t]:
                    ctx = b"".join(tok.token_bytes(i) for i in list(prompt) + y[:t])
                    trun[t] = run_from(text_copy(tok, ctx, m, 8), y, t)
            runs[f"text{m}"] = trun
        eos = bool(y) and y[-1] == 2
        row = {(d, k): (lambda v: (v["emitted"], v["rounds"]))(simulate_runs(runs[d], k, max_new, eos))
               for d in names for k in KS}
        res[it["stratum"]].append(row)
        print(f"{it['id']}: " + " ".join(f"{d}/{k} {row[(d, k)][0] / row[(d, k)][1]:.2f}" for d in names for k in KS),
              flush=True)

    print(f"\ngreedy tau (tokens per target pass) at k = {', '.join(map(str, KS))}; ngram = the shipped drafter; textM = "
          f"the n-gram, else a text lookup of at least M bytes")
    print("\n".join(tau_table(res, names, KS)))


if __name__ == "__main__":
    main()
