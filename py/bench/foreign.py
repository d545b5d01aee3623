"""A draft on another vocabulary against SmolLM2 on the preregistered workload (CPython, reference backend): every
bridge that applies, through the product's own decode loop (exactspec.decode.generate).

    python build.py bench foreign [--draft static/models/draft-llama2.gguf] [--same static/models/draft-smollm2-kd.gguf]
        [--per-stratum N] [--max-new-tokens 64] [--k 4] [--bridges tli,slem] [--json OUT] [--shard I/N]
    python build.py bench foreign --merge SHARD.json ... [--json OUT]     # one report from the shards' prompts

For each sampled workload prompt (the first N of every stratum; all 136 with the default N = 99) the champion answers
alone, greedy and coupled at T = 0.7 (seed = prompt index); then the foreign draft through each bridge, greedy and
coupled, k = 4 fixed (adaptive off): the tokens must be the champion's own (any difference is printed and the exit
code is 1); tli also runs in rejection mode (T = 0.7: exact in distribution, not per seed). The same-vocabulary draft
runs beside it for comparison. Figures per bridge, mode and stratum: tau (tokens per champion pass), acceptance by
position, proposals held back at a boundary per round (slem), the draft's probability mass outside the intersection
(tli), draft passes per round, and the bridge's own cost per round (view of the committed text, alignment, row
mapping: not the draft's passes nor the mode's pick) in ms and as a fraction of one champion pass (a single-token
forward of the reference backend, timed in the same run). The champion's KV is reused across a prompt's runs.
--shard I/N runs only the chosen prompts whose index is I modulo N (each keeps its seed, its index among all the
chosen prompts), so N processes split the run; --merge reads the shards' --json files (every prompt once, the same
settings) and prints and writes the report of all of them, as one unsharded run would.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from exactspec.chat import encode_chat  # noqa: E402
from exactspec.decode import GenerateConfig, generate  # noqa: E402
from exactspec.kv import TrackedCache  # noqa: E402
from exactspec.session import load_model_files  # noqa: E402
from exactspec.vocab import TliDrafter, bridge_pair  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402
from bench._shard import in_shard, parse_shard  # noqa: E402

MODELS = ROOT / "static" / "models"
CHAMPION = MODELS / "smollm2-135m-instruct-q4_1.gguf"
TEMP = 0.7


class Timed:
    """Backend wrapper timing the single-token forwards (a champion pass without speculation)."""

    def __init__(self, inner):
        self.inner, self.config = inner, inner.config
        self.single: list = []

    @property
    def length(self):
        return self.inner.length

    def truncate(self, n):
        self.inner.truncate(n)

    def forward(self, tokens, start_pos, n_out=None):
        t0 = time.perf_counter()
        r = self.inner.forward(tokens, start_pos, n_out)
        if len(tokens) == 1:
            self.single.append(time.perf_counter() - t0)
        return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--champion", default=str(CHAMPION))
    ap.add_argument("--draft", default=str(MODELS / "draft-llama2.gguf"), help="the draft on another vocabulary")
    ap.add_argument("--same", default=str(MODELS / "draft-smollm2-kd.gguf"),
                    help="a draft with the champion's vocabulary, for comparison ('' to skip)")
    ap.add_argument("--workload", default=str(ROOT / "tests" / "data" / "workload.jsonl"))
    ap.add_argument("--per-stratum", type=int, default=99)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--bridges", default="tli,slem")
    ap.add_argument("--no-rejection", action="store_true", help="skip tli in rejection mode")
    ap.add_argument("--json", default=None)
    ap.add_argument("--shard", default=None, help="I/N: only the prompts whose index is I modulo N")
    ap.add_argument("--merge", nargs="+", default=None, help="the shards' --json files: report them as one run")
    a = ap.parse_args(argv)
    if a.merge:
        return merge(a.merge, a.json)
    shard = parse_shard(a.shard)
    if shard and not a.json:
        ap.error("--shard needs --json (the shard's file for --merge)")
    if not Path(a.draft).exists():
        print(f"no foreign draft at {a.draft}: train one (bench/h200/foreign_train.sh) or pass --draft", file=sys.stderr)
        return 2
    champ, tok, _t, ccfg, _s = load_model_files(a.champion)
    timed = Timed(champ)
    champion = TrackedCache(timed)
    fdraft, ftok, _t, fcfg, _s = load_model_files(a.draft)
    pair = bridge_pair(tok, ftok)
    TliDrafter.diagnostics = True                       # also measure the mass outside the intersection
    fcache = TrackedCache(fdraft)
    same = None
    if a.same and Path(a.same).exists():
        sd, stok, *_ = load_model_files(a.same)
        same = (TrackedCache(sd), stok)
    bridges = [b for b in a.bridges.split(",") if b]
    items = load_workload(a.workload)
    strata = list(dict.fromkeys(it["stratum"] for it in items))
    chosen = [it for s in strata for it in [x for x in items if x["stratum"] == s][:a.per_stratum]]
    print(json.dumps({"prompts": len(chosen), "k": a.k, "max_new_tokens": a.max_new_tokens, "bridges": bridges,
                      "draft": Path(a.draft).name, "same": Path(a.same).name if same else None,
                      "differences": pair.compat.differences}), flush=True)
    configs = []                                        # (label, drafter, bridge, mode, temperature, must match)
    for b in bridges:
        configs += [(f"{b}/greedy", "model", b, "coupled", 0.0, True), (f"{b}/coupled", "model", b, "coupled", TEMP,
                                                                          True)]
        if b == "tli" and not a.no_rejection:
            configs.append(("tli/rejection", "model", "tli", "rejection", TEMP, False))
    if same:
        configs += [("same/greedy", "same", "auto", "coupled", 0.0, True),
                    ("same/coupled", "same", "auto", "coupled", TEMP, True)]
    per, mismatches = [], []
    t_all = time.time()
    for n, it in enumerate(chosen):
        if not in_shard(n, shard):
            continue
        prompt = encode_chat(tok, workload_messages(it))
        rec = {"id": it["id"], "index": n, "stratum": it["stratum"], "prompt_tokens": len(prompt), "runs": {}}
        base = {}
        for temp in (0.0, TEMP):
            cfg = GenerateConfig(max_new_tokens=a.max_new_tokens, temperature=temp, seed=n, drafter="none", k=0,
                                 adaptive=False)
            timed.single.clear()
            r = generate(champion, prompt, cfg, tokenizer=tok)
            base[temp] = r.token_ids
            rec["runs"][f"champion/{'greedy' if temp == 0 else 'coupled'}"] = {"tokens": len(r.token_ids)}
            if timed.single:
                rec.setdefault("t_champion_ms", []).append(1000 * float(np.median(timed.single)))
        for label, kind, bridge, mode, temp, exact in configs:
            d, dtok = (fcache, ftok) if kind == "model" else same
            cfg = GenerateConfig(max_new_tokens=a.max_new_tokens, temperature=temp, seed=n, drafter="model", k=a.k,
                                 mode=mode, bridge=bridge, adaptive=False)
            r = generate(champion, prompt, cfg, draft=d, tokenizer=tok, draft_tokenizer=dtok)
            s = r.stats
            run = {"tau": s["tau"], "rounds": s["rounds"], "target_passes": s["target_passes"],
                   "draft_passes": s["draft_passes"], "proposed": s["proposed"], "accepted": s["accepted"],
                   "acceptance_by_position": s["acceptance_by_position"], "tokens": len(r.token_ids),
                   "bridge": s.get("bridge", "none"), "identical": r.token_ids == base[temp]}
            for key in ("bridge_ms_per_round", "bridge_held_back", "bridge_fallbacks", "bridge_outside_mass",
                        "bridge_refed_draft_tokens", "bridge_view_full_rounds"):
                if key in s:
                    run[key] = s[key]
            rec["runs"][label] = run
            if exact and not run["identical"]:
                mismatches.append((it["id"], label))
                print(f"MISMATCH {it['id']} {label}", flush=True)
        per.append(rec)
        print(json.dumps({"n": n + 1, "id": it["id"], "elapsed_s": round(time.time() - t_all),
                          **{k: round(v["tau"], 2) for k, v in rec["runs"].items() if "tau" in v}}), flush=True)
    exact_labels = [c[0] for c in configs if c[5]]
    summary = summarise(per, strata, [c[0] for c in configs], a.k)
    summary.update({"prompts": len(per), "k": a.k, "max_new_tokens": a.max_new_tokens, "mismatches": mismatches,
                    "identical_runs": sum(1 for r in per for lab in exact_labels if r["runs"][lab]["identical"]),
                    "exact_runs_checked": len(per) * len(exact_labels),
                    "draft": Path(a.draft).name, "differences": pair.compat.differences,
                    "elapsed_s": round(time.time() - t_all), "shard": a.shard,
                    "settings": {"labels": [c[0] for c in configs], "exact_labels": exact_labels, "strata": strata,
                                 "chosen": len(chosen), "per_stratum": a.per_stratum}})
    print_table(summary)
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": summary, "prompts": per}, indent=1))
    return 1 if mismatches else 0


def merge(files, out) -> int:
    """One report from the shards' JSON files: every chosen prompt exactly once, the same settings in each."""
    shards = [json.loads(Path(f).read_text()) for f in files]
    keys = ("k", "max_new_tokens", "draft", "settings")
    first = shards[0]["summary"]
    for f, d in zip(files, shards):
        for key in keys:
            if d["summary"].get(key) != first.get(key):
                raise SystemExit(f"{f}: {key} differs from {files[0]}'s ({d['summary'].get(key)!r} vs "
                                 f"{first.get(key)!r}): not shards of one run")
    per = sorted((r for d in shards for r in d["prompts"]), key=lambda r: r["index"])
    seen = [r["index"] for r in per]
    st = first["settings"]
    if seen != list(range(st["chosen"])):
        missing = sorted(set(range(st["chosen"])) - set(seen))
        dup = sorted({i for i in seen if seen.count(i) > 1})
        raise SystemExit(f"the shards hold {len(seen)} of {st['chosen']} prompts (missing {missing[:10]}, "
                         f"twice {dup[:10]})")
    mismatches = [m for d in shards for m in d["summary"]["mismatches"]]
    summary = summarise(per, st["strata"], st["labels"], first["k"])
    summary.update({"prompts": len(per), "k": first["k"], "max_new_tokens": first["max_new_tokens"],
                    "mismatches": mismatches,
                    "identical_runs": sum(1 for r in per for lab in st["exact_labels"] if r["runs"][lab]["identical"]),
                    "exact_runs_checked": len(per) * len(st["exact_labels"]), "draft": first["draft"],
                    "differences": first["differences"], "settings": st, "shards": len(files),
                    "elapsed_s_per_shard": [d["summary"]["elapsed_s"] for d in shards]})
    print_table(summary)
    if out:
        Path(out).write_text(json.dumps({"summary": summary, "prompts": per}, indent=1))
    return 1 if mismatches else 0


def summarise(per, strata, labels, k) -> dict:
    """Per stratum and overall: tau = emitted / champion passes over the prompts (tokens-weighted), acceptance by
    position, and per-round averages of the bridge counters; the champion's pass time (median of the per-prompt
    medians) for the cost fraction."""
    t_c = float(np.median([t for r in per for t in r.get("t_champion_ms", [])])) if per else None
    out = {"t_champion_pass_ms": t_c, "by_stratum": {}}
    for s in strata + ["ALL"]:
        recs = [r for r in per if s == "ALL" or r["stratum"] == s]
        if not recs:
            continue
        row = {}
        for lab in labels:
            runs = [r["runs"][lab] for r in recs]
            rounds = sum(x["rounds"] for x in runs)
            acc = np.zeros(k)
            prop = np.zeros(k)
            for x in runs:                          # acceptance_by_position is per run: weight by rounds
                acc += np.asarray(x["acceptance_by_position"]) * x["rounds"]
                prop += x["rounds"]
            v = {"tau": sum(x["tokens"] for x in runs) / max(1, sum(x["target_passes"] for x in runs)),
                 "acceptance_by_position": (acc / np.maximum(prop, 1)).round(3).tolist(),
                 "draft_passes_per_round": sum(x["draft_passes"] for x in runs) / max(1, rounds)}
            if any("bridge_ms_per_round" in x for x in runs):
                ms = float(np.mean([x["bridge_ms_per_round"] for x in runs]))
                v["bridge_ms_per_round"] = ms
                v["bridge_cost_fraction_of_champion_pass"] = ms / t_c if t_c else None
            if any("bridge_held_back" in x for x in runs):
                v["held_back_per_round"] = sum(x.get("bridge_held_back", 0) for x in runs) / max(1, rounds)
            if any("bridge_outside_mass" in x for x in runs):
                v["outside_mass"] = float(np.mean([x["bridge_outside_mass"] for x in runs if "bridge_outside_mass"
                                                   in x]))
            row[lab] = v
        out["by_stratum"][s] = row
    return out


def print_table(summary):
    rows = summary["by_stratum"]
    if not rows:
        return
    labels = list(next(iter(rows.values())).keys())
    print(f"\ntau at k = {summary['k']} (tokens per champion pass), {summary['prompts']} prompts, "
          f"{summary['max_new_tokens']} new tokens at most; champion pass {summary['t_champion_pass_ms']:.1f} ms")
    print("| stratum | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for s, row in rows.items():
        print(f"| {s} | " + " | ".join(f"{row[lab]['tau']:.2f}" for lab in labels) + " |")
    allrow = rows.get("ALL", {})
    print("\nper round (all strata): held back at a boundary / draft passes / bridge ms (fraction of a champion pass)"
          " / mass outside the intersection")
    for lab, v in allrow.items():
        print(f"  {lab}: {v.get('held_back_per_round', 0):.2f} / {v['draft_passes_per_round']:.2f} / "
              f"{v.get('bridge_ms_per_round', 0):.2f} ms ({(v.get('bridge_cost_fraction_of_champion_pass') or 0):.3f})"
              + (f" / {v['outside_mass']:.3f}" if "outside_mass" in v else ""))
    print(f"\nidentical to the champion alone: {summary['identical_runs']} runs (checked: greedy and coupled, "
          f"{summary['exact_runs_checked']}); mismatches: {summary['mismatches'] or 'none'}")


if __name__ == "__main__":
    raise SystemExit(main())
