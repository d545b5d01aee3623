"""The n-gram drafter over the workload: its rounds replayed along the champion's greedy answers, per setting.

    python build.py bench ngram_tau [--per-stratum N] [--max-new-tokens 64] [--validate 1] [--json OUT]

For every workload prompt the champion's greedy answer (the numpy reference, cached in .cache/ngram-bench/) is
replayed through the decode loop's rounds on a device that runs ahead (exactspec.decode: a round looks the sequence's
suffix up; proposals are verified in one forward of g + 1 rows; a round without proposals runs the champion ahead
`ahead` passes and, with hints, has the device queue the next run, which the next round takes even if its lookup
then finds proposals). Settings: the shortest match (min_ngram), k, the passes an empty round runs ahead, hints on or
off; the drafter is exactspec's NgramDrafter. Per stratum it prints tokens per target pass (tau), tokens per verify
round, the share of rounds that verify, and the speedup the timings predict over the champion alone:

    alone  = tokens x PASS (+ one round trip)        runs of AHEAD_MAX with the next run always queued
    spec   = sum over rounds: a verify of g proposals VERIFY[g] (wall, its round trip included); a fresh run of n
             passes n x PASS + RTT; a run the device had queued n x PASS

with PASS, VERIFY and RTT (ms) from the H200 through the product's loop by default (2026-12-04, call 4:
bench/h200/results/2026-12-04/final_product_ab_A.json, medians of the first timing set: a pass running ahead 1.063,
a verify of 1..4 proposals with its readback 1.568 / 1.713 / 1.675 / 1.900, beyond 4 +0.125 a row as the GPU's
T_verify(8) - T_verify(4); RTT = VERIFY[1] - its GPU time ~1.17 = 0.4). `--validate N` runs the real decode loop on
the first N prompts of each stratum (the reference behind a run-ahead device, default settings) and checks that the
replay's rounds, proposals, acceptances, submissions and passes run ahead equal the loop's.

What the predictions leave out: the loop's own turnaround per run (Pyodide, bridge.py, the map), which the H200
measurements show exceeds a pass: there runs of 1 and 2 did worse than predicted and runs of 4 are the default
(exactspec.decode.AHEAD_WITH_DRAFTER; bench/h200/results/2026-12-04c/).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from exactspec import decode as D  # noqa: E402
from exactspec.backend import RunsAhead  # noqa: E402
from exactspec.chat import encode_chat  # noqa: E402
from exactspec.decode import GenerateConfig, generate  # noqa: E402
from exactspec.drafters.ngram import MIN_NGRAM, NgramDrafter  # noqa: E402
from exactspec.reference import ReferenceModel  # noqa: E402
from exactspec.settings import DEFAULTS  # noqa: E402
from exactspec.tokenizer import Tokenizer  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402

CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
EOS = 2
AHEAD_MAX = 4            # the engine's aheadMax on GPUs (app/gpu/options.js)
GROUNDED = ("summaries", "rewrites", "json_extraction", "repetitive")


def answers(items, max_new, cache: Path, log):
    """(item, prompt ids, the champion's greedy answer with its EOS when it ended on one) per workload item."""
    cache.mkdir(parents=True, exist_ok=True)
    champ = tok = None
    out = []
    for n, it in enumerate(items):
        mx = min(max_new, it["max_new_tokens"])
        f = cache / f"{it['id']}_{mx}.json"
        if f.exists():
            rec = json.loads(f.read_text())
        else:
            if champ is None:
                tok = Tokenizer.from_gguf(CHAMPION)
                champ = ReferenceModel.from_file(CHAMPION, max_len=4096)
            t0 = time.time()
            prompt = encode_chat(tok, workload_messages(it))
            champ.truncate(0)
            r = generate(champ, prompt, GenerateConfig(max_new_tokens=mx, temperature=0.0, drafter="none", k=0,
                                                       adaptive=False), eos_ids=[EOS])
            rec = {"prompt": prompt, "y": r.token_ids + ([EOS] if r.finish_reason == "eos" else []), "max_new": mx}
            f.write_text(json.dumps(rec))
            log(f"[{n + 1}/{len(items)}] {it['id']}: prompt {len(prompt)}, answer {len(rec['y'])}, "
                f"{time.time() - t0:.1f} s")
        out.append((it, rec["prompt"], rec["y"], rec["max_new"]))
    return out


def replay(prompt, y, max_new, drafter: NgramDrafter, k: int, run: int, hints: bool, t: dict) -> dict:
    """The decode loop's rounds (greedy, fixed k, a device that runs ahead) along the answer y; counters as the loop
    keeps them, and the predicted time (ms). run: the most passes an empty round runs ahead."""
    seq, i, ahead, hinted = list(prompt), 0, 4, 0
    c = {"rounds": 0, "verify_rounds": 0, "proposed": 0, "accepted": 0, "submissions": 0, "ahead_passes": 0,
         "ms": 0.0}
    while i < len(y):
        remaining = max_new - i
        kk = max(0, min(k, remaining - 1))
        props = drafter.lookup(seq, kk)[:kk] if kk > 0 else []
        take, hinted = hinted, 0
        found = bool(props)
        if take and found:
            props = []
        if not props:
            def ahead_n(a, rem):
                return max(1, min(a if kk == 0 else min(a, run), rem))
            n_ahead = take or ahead_n(ahead, remaining)
            then = ahead_n(min(2 * ahead, AHEAD_MAX), remaining - n_ahead) \
                if hints and not found and c["ahead_passes"] and remaining > n_ahead else 0
            used = min(n_ahead, len(y) - i)
            c["ms"] += n_ahead * t["pass"] + (0.0 if take else t["rtt"])
            c["submissions"] += 1
            c["ahead_passes"] += n_ahead
            c["rounds"] += used
            ahead = min(2 * ahead, AHEAD_MAX) if used == n_ahead else max(2, ahead // 2)
            if used == n_ahead and y[i + used - 1] != EOS:
                hinted = then
            emitted = y[i:i + used]
        else:
            a = 0
            while a < len(props) and i + a < len(y) and props[a] == y[i + a]:
                a += 1
            emitted = y[i:i + min(a + 1, len(y) - i)]
            g = len(props)
            c["ms"] += t["verify"](g)
            c["rounds"] += 1
            c["verify_rounds"] += 1
            c["submissions"] += 1
            c["proposed"] += g
            c["accepted"] += y[i:i + a].index(EOS) + 1 if EOS in y[i:i + a] else a   # (stops at an accepted EOS)
        seq += emitted
        i += len(emitted)
    return c


def validate(recs, per_stratum: int, log) -> list[dict]:
    champ = RunsAhead(ReferenceModel.from_file(CHAMPION, max_len=4096), AHEAD_MAX)   # the reference behind a device
    seen, out = {}, []
    timing = {"pass": 1.0, "rtt": 0.0, "verify": lambda g: 1.0}
    k = DEFAULTS["k"]
    for it, prompt, y, mx in recs:
        if seen.get(it["stratum"], 0) >= per_stratum:
            continue
        seen[it["stratum"]] = seen.get(it["stratum"], 0) + 1
        champ.truncate(0)
        r = asyncio.run(D.generate_async(champ, prompt, GenerateConfig(
            max_new_tokens=mx, temperature=0.0, drafter="ngram", k=k, adaptive=False), eos_ids=[EOS]))
        want = replay(prompt, y, mx, NgramDrafter(), k, D.AHEAD_WITH_DRAFTER, True, timing)
        got = {key: r.stats[key] for key in ("rounds", "proposed", "accepted", "submissions", "ahead_passes")}
        same_tokens = r.token_ids + ([EOS] if r.finish_reason == "eos" else []) == y
        ok = same_tokens and all(got[key] == want[key] for key in got)
        out.append({"id": it["id"], "ok": ok, "same_tokens": same_tokens, "loop": got,
                    "replay": {key: want[key] for key in got}})
        log(f"validate {it['id']}: {'equal' if ok else 'DIFFERENT'} {got}" + ("" if ok else f" replay {out[-1]['replay']}"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default=str(ROOT / "tests" / "data" / "workload.jsonl"))
    ap.add_argument("--per-stratum", type=int, default=0, help="first N prompts of each stratum (0: all 136)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--cache", default=str(ROOT / ".cache" / "ngram-bench"))
    ap.add_argument("--validate", type=int, default=1, help="prompts per stratum run through the real loop")
    ap.add_argument("--pass-ms", type=float, default=1.063)
    ap.add_argument("--verify-ms", default="1.568,1.713,1.675,1.900", help="g = 1, 2, ... proposals")
    ap.add_argument("--verify-slope-ms", type=float, default=0.125, help="each proposal past the list")
    ap.add_argument("--rtt-ms", type=float, default=0.4)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:6.1f}s] {msg}", flush=True)

    vms = [float(x) for x in a.verify_ms.split(",")]
    timing = {"pass": a.pass_ms, "rtt": a.rtt_ms,
              "verify": lambda g: vms[g - 1] if g <= len(vms) else vms[-1] + (g - len(vms)) * a.verify_slope_ms}
    items = load_workload(a.workload)
    if a.per_stratum:
        strata = list(dict.fromkeys(it["stratum"] for it in items))
        items = [it for s in strata for it in [x for x in items if x["stratum"] == s][:a.per_stratum]]
    recs = answers(items, a.max_new_tokens, Path(a.cache), log)
    checks = validate(recs, a.validate, log) if a.validate else []
    strata = sorted({it["stratum"] for it, *_ in recs})
    settings = [(mn, k, run, hints) for mn in (1, 2, 3) for k in (2, 4, 6) for run, hints in
                ((4, False), (2, False), (1, True), (2, True), (4, True), (8, True))]
    default = (MIN_NGRAM, DEFAULTS["k"], D.AHEAD_WITH_DRAFTER, True)
    rows = []
    for mn, k, run, hints in settings:
        dr = NgramDrafter(min_ngram=mn)
        per = {}
        for s in strata:
            cs = [replay(p, y, mx, dr, k, run, hints, timing) for it, p, y, mx in recs if it["stratum"] == s]
            tokens = sum(len(y) for it, p, y, mx in recs if it["stratum"] == s)
            tot = {key: sum(x[key] for x in cs) for key in cs[0]}
            alone = tokens * a.pass_ms + len(cs) * a.rtt_ms
            vr_tokens = tot["accepted"] + tot["verify_rounds"]
            per[s] = {"tokens": tokens, "tau": tokens / tot["rounds"], "verify_share": tot["verify_rounds"] / tot["rounds"],
                      "tokens_per_verify": vr_tokens / tot["verify_rounds"] if tot["verify_rounds"] else 0.0,
                      "speedup": alone / tot["ms"], **tot}
        rows.append({"min_ngram": mn, "k": k, "run": run, "hints": hints, "default": (mn, k, run, hints) == default,
                     "strata": per})
    print(f"\npredicted speedup over the champion alone per stratum (tokens per verify round; share of rounds that "
          f"verify), greedy, {len(recs)} prompts, answers of at most {a.max_new_tokens} tokens; * the defaults")
    print(f"{'min k run hints':<17} " + " ".join(f"{s[:10]:>17}" for s in strata) + "   grounded min / all min")
    for r in rows:
        per = r["strata"]
        cells = " ".join(f"{per[s]['speedup']:5.2f} ({per[s]['tokens_per_verify']:4.2f};{per[s]['verify_share']:4.2f})"
                         for s in strata)
        g = min(per[s]["speedup"] for s in strata if s in GROUNDED)
        al = min(per[s]["speedup"] for s in strata)
        tag = f"{r['min_ngram']}  {r['k']}  {r['run']}  {'yes' if r['hints'] else 'no '}{' *' if r['default'] else ''}"
        print(f"{tag:<17} {cells}   {g:.2f} / {al:.2f}")
    bad = [c for c in checks if not c["ok"]]
    print(f"\nreplay vs the real loop: {len(checks) - len(bad)} of {len(checks)} prompts equal" if checks else "")
    if a.json:
        Path(a.json).write_text(json.dumps({"command": " ".join(sys.argv), "timing_ms": {
            "pass": a.pass_ms, "rtt": a.rtt_ms, "verify": vms, "verify_slope": a.verify_slope_ms},
            "prompts": len(recs), "max_new_tokens": a.max_new_tokens, "rows": rows, "validate": checks}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
