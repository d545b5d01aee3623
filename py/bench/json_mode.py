"""JSON mode on the workload's strict-JSON-extraction stratum (SmolLM2, the frozen schemas of tests/data/json_schemas.json):

- tau at k = 4, greedy: grammar-forced drafting alone, the shipped draft alone ("draft-only"; "draft" adds the
  JSON-mode drafter's lookup of the text so far before the draft), both ("combined", the product's JSON mode with
  the draft; "forced+draft-only" without the lookup), and the n-gram drafter with forcing; every answer checked
  identical to plain decoding and valid for its schema;
- the bound behind those figures, simulated along the champion's answers under the decode loop's round rules: tau
  if every free proposal were the champion's own token (checked: the simulation of forced drafting alone gives the
  measured passes on every prompt);
- coupled sampling (T = 0.7, --coupled-seeds seeds per prompt): plain and combined answers identical and valid;
- the constraint engine's cost per emitted token as a fraction of a champion pass, first answer per schema (cold
  caches) and later answers (warm), in CPython and in Pyodide 0.27.7 under Node (the page's CPU fallback);
- tokens/s in JSON mode vs free text on the same prompts (plain decoding and with the draft + forcing), decode only
  (each prompt's prefill is timed apart: JSON answers are short, so a prefill inside the figure would dominate).

    python build.py bench json_mode [--runs 3] [--prompts 12] [--speed-prompts 6] [--coupled-seeds 1]
                                    [--configs plain,forced,...] [--pyodide-prompts 4] [--no-pyodide] [--out FILE]
                                    [--dev | --prompts-file FILE]

--dev measures bench/json_mode/dev_prompts.json instead of the workload's prompts: the DEV set on which drafting
ideas are tuned, so that the workload's figure is not fitted to the prompts it is reported on.

Everything goes through exactspec.session.Session.generate, the page's own code path. Each answer starts from an
empty KV cache, prefilled apart, so timings compare like with like. Timing figures: median and range
over --runs runs; tau is deterministic (greedy) and checked equal across runs.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
DRAFT = ROOT / "static" / "models" / "draft-smollm2-kd.gguf"
WORKLOAD = ROOT / "tests" / "data" / "workload.jsonl"
SCHEMAS = ROOT / "tests" / "data" / "json_schemas.json"

# greedy throughout; k = 4; adaptive off so that k is what it says (the tau figures)
# ("_lookup": False turns off the JSON-mode drafter's text-so-far lookup before the draft model: the draft alone)
TAU_CONFIGS = {
    "plain": {"speculation": False},
    "forced": {"drafter": "none", "grammar_draft": True},
    "draft-only": {"drafter": "model", "k": 4, "grammar_draft": False, "adaptive": False, "_lookup": False},
    "draft": {"drafter": "model", "k": 4, "grammar_draft": False, "adaptive": False},
    "combined": {"drafter": "model", "k": 4, "grammar_draft": True, "adaptive": False},
    "forced+draft-only": {"drafter": "model", "k": 4, "grammar_draft": True, "adaptive": False, "_lookup": False},
    "ngram+forced": {"drafter": "ngram", "k": 4, "grammar_draft": True, "adaptive": False},
}
K = 4
SPEED_CONFIGS = ("plain", "forced", "combined")   # timed in JSON mode and in free text, --runs times


DEV_PROMPTS = ROOT / "bench" / "json_mode" / "dev_prompts.json"
PROMPTS_FILE = None      # --prompts-file: a DEV set ({"prompts": [{"id", "text", "schema"}]}) instead of the workload's
SYSTEM = "Reply with strict JSON only: no prose, no code fences."     # the workload's strict-JSON system message


def stratum(n: int | None = None):
    if PROMPTS_FILE is not None:
        # drafting ideas are tuned on these, so that the workload's figure is not fitted to its own prompts; each
        # is asked as the workload asks (its system message, its answer budget)
        rows = [({"id": p["id"], "stratum": "json_extraction", "max_new_tokens": p.get("max_new_tokens", 96),
                  "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p["text"]}]},
                 p["schema"]) for p in json.loads(Path(PROMPTS_FILE).read_text())["prompts"]]
        return rows[:n]
    rows = [json.loads(x) for x in WORKLOAD.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r["stratum"] == "json_extraction"]
    schemas = json.loads(SCHEMAS.read_text())["workload"]
    return [(r, schemas[r["id"]]) for r in rows[:n]]


def make_session(champion: str, draft: str | None, max_len: int = 1024):
    from exactspec.reference import ReferenceModel
    from exactspec.session import Session
    s = Session()
    s.load("champion", champion, role="champion", backend=ReferenceModel.from_file(champion, max_len=max_len),
           backend_name="cpu")
    if draft:
        s.load("draft", draft, role="draft", backend=ReferenceModel.from_file(draft, max_len=max_len),
               backend_name="cpu")
    return s


async def answer(s, row, rf, conf: dict) -> dict:
    """One answer from empty caches. The champion's prefill runs first, timed on its own (prefill_s); the answer's
    wall time (wall_s) is then the decode alone (generate reuses the prefilled prefix), draft catch-up included."""
    from exactspec.constrain.drafter import GrammarDrafter
    for m in s.models.values():
        m.cache.truncate(0)
    conf = dict(conf)
    lookup = conf.pop("_lookup", True)
    req = {"chat": row["messages"], "max_new_tokens": row["max_new_tokens"], "temperature": 0.0, **conf}
    if rf is not None:
        req["response_format"] = rf
    ids = s.prompt_ids(req)
    t0 = time.perf_counter()
    r = s.models[s.champion].cache.forward(ids[:-1], 0, 1)
    if asyncio.iscoroutine(r):
        await r
    t1 = time.perf_counter()
    GrammarDrafter.lookup_with_draft = lookup
    try:
        out = await s.generate(req)
    finally:
        GrammarDrafter.lookup_with_draft = True
    out["wall_s"] = time.perf_counter() - t1
    out["prefill_s"] = t1 - t0
    return out


def simulate_passes(c, answer, max_new_tokens: int, k: int, free: str, forced_split: str = "tokenizer",
                    use_forced: bool = True, draft_rows=None, prompt=(), lookup: bool = True,
                    splits: dict | None = None, trace: list | None = None) -> int:
    """Target passes of a greedy JSON-mode answer under the decode loop's round rules (exactspec.decode with
    exactspec.constrain.drafter.GrammarDrafter, adaptive off), simulated along the champion's own answer: greedy
    accepts a proposal iff it is the champion's token, so only the proposals up to the first wrong one matter, and
    each of those sees the champion's own prefix.
    free: "none" (no free proposals: forced drafting alone), "draft" (GrammarDrafter's free proposals: inside a
    string value its copy of the prompt's text, then the lookup of the text so far, when `lookup`; else the
    draft's masked argmax from draft_rows (len(answer) + 1, vocab), its rows along prompt + answer) or "oracle" (every free proposal is the champion's own token: the most any draft can give
    at k = 4 with these forced runs). forced_split: "tokenizer" (forced runs as Constraint.forced proposes them) or
    "champion" (the champion's own tokens where the grammar forces the bytes: a perfect guess of its tokenisation);
    a round holds at most k free proposals, copies and lookups included (GrammarDrafter's rule);
    splits: the learned splits of forced tokens the answer started with (GrammarDrafter's, updated as it learns);
    trace: a list that gets, for every round, (position, why it ended, proposed id or None, the champion's id or
    None) with why one of "forced", "copy", "lookup", "draft", "oracle" (that proposal was wrong), "k" (k free
    proposals made), "cap" (the round's cap or the answer's end), "eos".
    The bench checks the simulation against the measured passes of every configuration it also measures."""
    import numpy as np
    from exactspec.constrain.drafter import MAX_ROUND, apply_splits, copy_proposal, learn_split
    from exactspec.drafters.ngram import NgramDrafter
    vocab = c.vocab
    splits = {} if splits is None else splits
    eos = vocab.eos_ids[0]
    A = list(answer) + [eos]        # after the last token the champion's row allows only EOS (or the budget is out)
    look = NgramDrafter(max_ngram=3, min_ngram=2) if (free == "draft" and lookup) else None
    pos = passes = 0
    st = c.start
    while pos < len(answer) and not c.done(st):
        remaining = max_new_tokens - pos
        kk = 0 if free == "none" else min(k, remaining - 1)
        cap = min(remaining - 1, MAX_ROUND)
        n = 0                           # proposals so far, all equal to the champion's tokens
        s = st
        n_free = 0
        why = ("cap", None, None)
        while n < cap and not c.done(s):
            f = apply_splits(splits, c.forced(s)) if use_forced else []
            if f and forced_split == "champion":
                fb, got, f = b"".join(vocab.token_bytes[t] for t in f), b"", []
                while pos + n + len(f) < len(answer) and \
                        fb.startswith(got + (vocab.token_bytes[A[pos + n + len(f)]] or b"\0")):
                    got += vocab.token_bytes[A[pos + n + len(f)]]
                    f.append(A[pos + n + len(f)])
                f = f or [A[pos + n]]       # its token runs past the forced bytes: a perfect guess proposes it
            if f:
                f = f[:cap - n]
                m = next((i for i, t in enumerate(f) if t != A[pos + n + i]), len(f))
                for t in f[:m]:
                    s = c.advance(s, t)
                n += m
                if m < len(f):
                    why = ("forced", f[m], A[pos + n])
                    if forced_split != "champion":
                        learn_split(vocab, splits, f[m], A[pos + n])
                    break                   # a forced proposal the champion writes otherwise: the round ends
                continue
            if n_free >= kk:
                why = ("k", None, None)
                break
            if free == "oracle":
                tok, kind = A[pos + n], "oracle"
            else:
                mask = c.mask(s, remaining - n)                            # (vocab,) bool
                got = copy_proposal(c, list(prompt) + A[:pos + n], s, len(prompt)) \
                    if look is not None else []                           # its copy first
                kind = "copy"
                if not got or not mask[got[0]]:
                    got = look.lookup(list(prompt) + A[:pos + n], 1) if look is not None else []
                    kind = "lookup"
                if got and mask[got[0]]:
                    tok = int(got[0])
                else:
                    tok, kind = int(np.argmax(np.where(mask, draft_rows[pos + n], -np.inf))), "draft"
                if not mask[tok]:
                    break
            if tok != A[pos + n]:
                why = (kind, tok, A[pos + n])
                break                       # the round's first wrong proposal
            n += 1
            n_free += 1
            if tok == eos:
                why = ("eos", None, None)
                break
            s = c.advance(s, tok)
        if trace is not None:
            trace.append((pos + n,) + why)
        emitted = A[pos:pos + n + 1]
        for t in emitted:
            if t != eos:
                st = c.advance(st, t)
        pos += len(emitted)
        passes += 1
    return passes


def pass_ms(s, n: int = 12) -> list[float]:
    """Champion single-token passes (ms) at the end of a typical prompt, through the session's backend."""
    m = s.models[s.champion]
    be = m.backend
    be.truncate(0)
    be.forward(list(range(100, 160)), 0, 1)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        be.forward([200 + i], 60 + i, 1)
        out.append((time.perf_counter() - t0) * 1000)
    be.truncate(0)
    m.cache.truncate(0)
    return out


def mask_apply_us(V: int, n: int = 200) -> dict:
    """Applying a mask to a logits row (sampling.scaled_logits, greedy): microseconds with and without a mask."""
    import numpy as np
    from exactspec.sampling import SamplingParams, scaled_logits
    rng = np.random.default_rng(0)
    row = rng.standard_normal(V).astype(np.float32)           # (vocab,)
    mask = rng.random(V) < 0.01                               # (vocab,) bool
    params = SamplingParams(0.0)
    out = {}
    for name, mk in (("no_mask", None), ("mask", mask)):
        t0 = time.perf_counter()
        for _ in range(n):
            scaled_logits(row, params, mk)
        out[name] = (time.perf_counter() - t0) / n * 1e6
    return out


async def measure(champion: str, draft: str | None, n_prompts: int | None, runs: int, tau_configs, check=None,
                  log=print, speed_prompts: int | None = None, simulate: bool = False, coupled_seeds: int = 0) -> dict:
    """Runs in CPython and in Pyodide (no imports beyond exactspec, numpy and the standard library)."""
    rows = stratum(n_prompts)
    from exactspec.constrain import Constraint, Grammar, TokenVocab, parse_response_format
    t0 = time.perf_counter()
    s = make_session(champion, draft)
    load_s = time.perf_counter() - t0
    m = s.models[s.champion]
    t0 = time.perf_counter()
    m.json_vocab = TokenVocab.from_tokenizer(m.tokenizer, m.config.vocab_size)   # what the first JSON request builds
    res = {"prompts": [r["id"] for r, _ in rows], "load_s": load_s, "vocab_s": time.perf_counter() - t0, "tau": {},
           "answers": {}, "runs": []}
    rfs = {r["id"]: {"type": "json_schema", "schema": sch} for r, sch in rows}
    # tau configurations, once (greedy: deterministic); the first JSON answer per schema runs on cold caches
    per = {name: {"tokens": 0, "passes": 0, "forced_proposed": 0, "forced_accepted": 0, "mask_ms": 0.0,
                  "draft_passes": 0} for name in tau_configs}
    cold, warm = [], []
    res["pass_ms_before"] = statistics.median(pass_ms(s))
    answers_ids: dict = {}
    forced_passes: dict = {}
    snaps: dict = {}
    # each configuration learns the champion's splits from its own answers only (as a session of that setting
    # would), so that no configuration's figure depends on which ran before it on the same prompt
    learned: dict = {name: {} for name in tau_configs}
    for i, (row, _sch) in enumerate(rows):
        ref = None
        for name in tau_configs:
            m.json_splits = learned[name]
            snaps[(row["id"], name)] = dict(m.json_splits)          # the splits learned so far (the simulation's)
            out = await answer(s, row, rfs[row["id"]], TAU_CONFIGS[name])
            st = out["stats"]
            forced_passes.setdefault(name, {})[row["id"]] = st["target_passes"]
            if ref is None:
                ref = out
                answers_ids[row["id"]] = list(out["token_ids"])
                doc = json.loads(out["text"])
                if check is not None:
                    check(doc, rfs[row["id"]]["schema"])
                res["answers"][row["id"]] = {"text": out["text"], "finish_reason": out["finish_reason"],
                                             "tokens": len(out["token_ids"])}
                cold.append(st["mask_ms"] / max(1, st["new_tokens"]))
            elif out["token_ids"] != ref["token_ids"]:
                raise AssertionError(f"{row['id']} {name}: speculation changed the answer")
            else:
                warm.append(st["mask_ms"] / max(1, st["new_tokens"]))
            p = per[name]
            p["tokens"] += st["new_tokens"]
            p["passes"] += st["target_passes"]
            p["forced_proposed"] += st["forced_proposed"]
            p["forced_accepted"] += st["forced_accepted"]
            p["draft_passes"] += st["draft_passes"]
            p["mask_ms"] += st["mask_ms"]
            log(json.dumps({"prompt": row["id"], "config": name, "tokens": st["new_tokens"],
                            "passes": st["target_passes"], "tau": round(st["tau"], 3),
                            "forced": [st["forced_accepted"], st["forced_proposed"]],
                            "mask_ms_per_token": round(st["mask_ms"] / max(1, st["new_tokens"]), 3)}))
    m.json_splits = learned.get("combined", {})   # the later answers (coupled, timed) start where combined ended
    for name, p in per.items():
        p["tau"] = p["tokens"] / max(1, p["passes"])
    res["tau"] = per
    res["mask_ms_per_token_cold"] = cold
    res["mask_ms_per_token_warm"] = warm
    if simulate:
        # the bound behind the combined figure, simulated along the answers; the simulation of each measured
        # configuration must give its measured passes on every prompt (checked here)
        dm = s.models.get(s.draft) if draft else None
        sim = {"forced": dict(free="none"), "draft-only": dict(free="draft", use_forced=False, lookup=False),
               "draft": dict(free="draft", use_forced=False), "combined": dict(free="draft"),
               "forced+draft-only": dict(free="draft", lookup=False),
               "combined, the champion's splits of forced text": dict(free="draft", forced_split="champion"),
               "oracle free proposals": dict(free="oracle"),
               "oracle free proposals and the champion's splits": dict(free="oracle", forced_split="champion")}
        if dm is None:
            sim = {name: kw for name, kw in sim.items() if kw["free"] != "draft"}
        tot = {name: 0 for name in sim}
        for row, _sch in rows:
            c = Constraint(Grammar(parse_response_format(rfs[row["id"]])), m.json_vocab)
            ids = answers_ids[row["id"]]
            rows_d = None
            if dm is not None:
                p_ids = s.prompt_ids({"chat": row["messages"]})
                dm.backend.truncate(0)
                rows_d = dm.backend.forward(p_ids + ids, 0, len(ids) + 1)      # (len(ids) + 1, vocab)
                dm.backend.truncate(0)
                dm.cache.truncate(0)
            else:
                p_ids = ()
            for name, kw in sim.items():
                sp = dict(snaps.get((row["id"], name), snaps.get((row["id"], "combined"), {})))
                got = simulate_passes(c, ids, row["max_new_tokens"], K, draft_rows=rows_d, prompt=p_ids, splits=sp,
                                      **kw)
                tot[name] += got
                if name in forced_passes and got != forced_passes[name][row["id"]]:
                    raise AssertionError(f"{row['id']} {name}: simulated {got} passes, measured "
                                         f"{forced_passes[name][row['id']]}")
        n_tok = sum(len(v) for v in answers_ids.values())
        res["simulated_tau"] = {name: n_tok / max(1, v) for name, v in tot.items()}
        res["simulated_checked"] = [name for name in sim if name in forced_passes]
    if coupled_seeds:
        # coupled sampling (T = 0.7): plain and combined answers identical, every answer valid
        res["coupled"] = {"answers": 0, "identical": 0, "valid": 0, "tokens": 0, "passes": 0}
        for row, _sch in rows:
            for seed in range(coupled_seeds):
                outs = [await answer(s, row, rfs[row["id"]], {**TAU_CONFIGS[name], "temperature": 0.7, "seed": seed})
                        for name in ("plain", "combined" if draft else "forced")]
                cp = res["coupled"]
                cp["answers"] += 1
                cp["identical"] += outs[0]["token_ids"] == outs[1]["token_ids"]
                cp["tokens"] += outs[1]["stats"]["new_tokens"]
                cp["passes"] += outs[1]["stats"]["target_passes"]
                try:
                    doc = json.loads(outs[0]["text"])
                    if check is not None:
                        check(doc, rfs[row["id"]]["schema"])
                    cp["valid"] += 1
                except Exception as e:      # counted, and shown
                    log(json.dumps({"prompt": row["id"], "seed": seed, "invalid": str(e)[:200]}))
                log(json.dumps({"prompt": row["id"], "seed": seed, "coupled_identical":
                                outs[0]["token_ids"] == outs[1]["token_ids"], "tau": round(outs[1]["stats"]["tau"], 3)}))
        res["coupled"]["tau"] = res["coupled"]["tokens"] / max(1, res["coupled"]["passes"])
    res["mask_apply_us"] = mask_apply_us(m.config.vocab_size)
    # speed: JSON mode vs free text, --runs times; per prompt the configurations run back to back, their order
    # rotating (the machine's load changes by the minute: ratios come from neighbouring answers)
    keys = [(mode, name) for mode in ("json", "free") for name in SPEED_CONFIGS
            if not (mode == "free" and name == "forced")]          # forced without a grammar = plain
    for run in range(runs):
        one = {"pass_ms": statistics.median(pass_ms(s))}
        acc = {f"{mode}/{name}": [0, 0.0, 0.0] for mode, name in keys}     # tokens, wall s, mask ms
        for j, (row, _sch) in enumerate(rows[:speed_prompts]):
            r = (run + j) % len(keys)
            for mode, name in keys[r:] + keys[:r]:
                out = await answer(s, row, rfs[row["id"]] if mode == "json" else None, TAU_CONFIGS[name])
                a = acc[f"{mode}/{name}"]
                a[0] += len(out["token_ids"])
                a[1] += out["wall_s"]
                a[2] += out["stats"]["mask_ms"]
        one["pass_ms_after"] = statistics.median(pass_ms(s))
        for key, (toks, wall, mask) in acc.items():
            one[key] = {"tokens": toks, "tok_s": toks / wall, "mask_ms_per_token": mask / max(1, toks)}
        res["runs"].append(one)
        log(json.dumps({"run": run, **{k: (round(v, 2) if isinstance(v, float) else
                                          {a: round(b, 3) for a, b in v.items()}) for k, v in one.items()}}))
    return res


def spread(xs) -> str:
    xs = sorted(xs)
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):.3g} ({xs[0]:.3g}-{xs[-1]:.3g})"


def report(label: str, res: dict) -> None:
    print(f"\n== {label}: {len(res['prompts'])} strict-JSON prompts, SmolLM2 greedy, k = 4 ==")
    print(f"models load {res['load_s']:.1f} s; the JSON vocabulary (first JSON-mode request) {res['vocab_s']:.2f} s")
    print("| configuration | tau | forced accepted / proposed | draft passes | tokens | target passes |")
    print("|---|---|---|---|---|---|")
    for name, p in res["tau"].items():
        print(f"| {name} | {p['tau']:.2f} | {p['forced_accepted']} / {p['forced_proposed']} | {p['draft_passes']} | "
              f"{p['tokens']} | {p['passes']} |")
    for name, v in res.get("simulated_tau", {}).items():
        ok = " (= measured, every prompt)" if name in res.get("simulated_checked", ()) else ""
        print(f"simulated along the answers, k = {K}: {name}: tau {v:.2f}{ok}")
    if res.get("coupled"):
        cp = res["coupled"]
        print(f"coupled T = 0.7: {cp['identical']} / {cp['answers']} answers identical (plain vs combined), "
              f"{cp['valid']} / {cp['answers']} valid, tau {cp['tau']:.2f}")
    runs = res["runs"]
    pm = [(r["pass_ms"] + r.get("pass_ms_after", r["pass_ms"])) / 2 for r in runs] or [res["pass_ms_before"]]
    print(f"champion pass: {spread(pm)} ms (12 single-token passes before and after each run, {len(runs)} runs; before the "
          f"tau answers: {res['pass_ms_before']:.3g} ms)")
    cold, warm = res["mask_ms_per_token_cold"], res["mask_ms_per_token_warm"]
    p0 = statistics.median(pm)
    print(f"constraint engine per emitted token, first answer per schema (new caches; the first prompt also builds "
          f"the vocabulary's string tables): {spread(cold)} ms = {spread([c / p0 for c in cold])} of a champion pass "
          "(over prompts)")
    print(f"the same, later answers with the schema (cached states; every other configuration): {spread(warm)} ms = "
          f"{spread([c / p0 for c in warm])} of a pass")
    ap = res.get("mask_apply_us")
    if ap:
        print(f"applying a mask to a logits row (scaled_logits, greedy): {ap['mask']:.0f} us vs {ap['no_mask']:.0f} "
              "us without (per verified row)")
    if not runs:
        return
    for key in [k for k in runs[0] if "/" in k]:
        tps = [r[key]["tok_s"] for r in runs]
        mk = [r[key]["mask_ms_per_token"] for r in runs]
        rel = [r[key]["mask_ms_per_token"] / p for r, p in zip(runs, pm)]
        print(f"{key:16s} tok/s {spread(tps)}; mask {spread(mk)} ms/token = {spread(rel)} of a pass (timed runs: "
              "the first may rebuild caches of schemas the session dropped, it keeps 4)")
    for name in SPEED_CONFIGS:
        if f"json/{name}" not in runs[0]:
            continue
        free = "plain" if name == "forced" else name
        ratio = [r[f"json/{name}"]["tok_s"] / r[f"free/{free}"]["tok_s"] for r in runs]
        print(f"tok/s JSON mode ({name}) / free text ({free}): {spread(ratio)}")


PYODIDE_RUNNER = r"""
import { loadPyodide } from '%(rt)s/pyodide.mjs';
const py = await loadPyodide({ indexURL: '%(rt)s/' });
await py.loadPackage(['numpy']);
py.FS.mkdir('/host'); py.FS.mount(py.FS.filesystems.NODEFS, { root: '/' }, '/host');
const out = await py.runPythonAsync(`
import sys, json, traceback
sys.path.insert(0, '/host' + %(py)s)
import bench.json_mode as jm
from pathlib import Path
jm.WORKLOAD = Path('/host' + %(workload)s)
jm.SCHEMAS = Path('/host' + %(schemas)s)
jm.PROMPTS_FILE = %(prompts_file)s and '/host' + %(prompts_file)s
try:
    res = await jm.measure('/host' + %(champion)s, %(draft)s and '/host' + %(draft)s, %(n)d, %(runs)d, %(configs)s,
                           log=lambda s: print('LOG ' + s, flush=True))
    out = json.dumps({'python': sys.version.split()[0], **res})
except BaseException:
    out = json.dumps({'error': traceback.format_exc()})
out
`);
console.log('RESULT ' + out);
process.exit(0);
"""


def run_pyodide(n: int, runs: int, configs, draft: str | None) -> dict | None:
    rt_src = ROOT / "static" / "pyodide" / "0.27.7"
    node = shutil.which("node")
    if node is None or not (rt_src / "pyodide.mjs").exists():
        print("Pyodide runtime or node missing: run `python build.py setup`; skipping the Pyodide figures")
        return None
    with tempfile.TemporaryDirectory() as d:
        rt = Path(d) / "rt"   # outside the repo: its package.json would make node load pyodide.asm.js as ESM
        shutil.copytree(rt_src, rt)
        script = Path(d) / "run.mjs"
        script.write_text(PYODIDE_RUNNER % {
            "rt": rt, "py": json.dumps(str(ROOT / "py")), "workload": json.dumps(str(WORKLOAD)),
            "schemas": json.dumps(str(SCHEMAS)), "champion": json.dumps(str(CHAMPION.resolve())),   # no symlinks
            "prompts_file": json.dumps(str(Path(PROMPTS_FILE).resolve())) if PROMPTS_FILE else "None",
            "draft": json.dumps(str(Path(draft).resolve())) if draft else "None", "n": n, "runs": runs, "configs": json.dumps(configs)})
        proc = subprocess.Popen([node, "--max-old-space-size=4096", str(script)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=d)
        result = None
        for line in proc.stdout:
            if line.startswith("LOG "):
                print("[pyodide] " + line[4:].rstrip(), flush=True)
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
        proc.wait()
        if result is None or "error" in result:
            print("Pyodide run failed:", result["error"] if result else proc.stderr.read()[-3000:])
            return None
        return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3, help="timed repetitions (median and range)")
    ap.add_argument("--prompts", type=int, default=None, help="first N prompts of the stratum (default all 12)")
    ap.add_argument("--speed-prompts", type=int, default=6, help="prompts per timed run (JSON and free text)")
    ap.add_argument("--pyodide-prompts", type=int, default=4)
    ap.add_argument("--pyodide-runs", type=int, default=3)
    ap.add_argument("--no-pyodide", action="store_true")
    ap.add_argument("--no-draft", action="store_true", help="skip the draft-model configurations")
    ap.add_argument("--out", default=None, help="write every figure as JSON here")
    ap.add_argument("--coupled-seeds", type=int, default=1, help="coupled T = 0.7 answers per prompt (0: none)")
    ap.add_argument("--configs", default=None, help="comma-separated tau configurations (default all)")
    ap.add_argument("--prompts-file", default=None,
                    help="prompts {\"prompts\": [{\"id\", \"text\", \"schema\"}]} instead of the workload's 12 strict-JSON "
                         "prompts (the figures of record)")
    ap.add_argument("--dev", action="store_true", help=f"--prompts-file {DEV_PROMPTS.relative_to(ROOT)}: the DEV set "
                    "that drafting ideas are tuned on")
    a = ap.parse_args()
    global PROMPTS_FILE
    PROMPTS_FILE = str(DEV_PROMPTS) if a.dev else a.prompts_file
    if PROMPTS_FILE:
        print(f"prompts: {PROMPTS_FILE}")
    try:
        import jsonschema

        def check(doc, schema):
            jsonschema.Draft202012Validator(schema).validate(doc)
    except ImportError:
        print("jsonschema not installed: answers are checked to parse, not validated")
        check = None
    draft = None if a.no_draft else str(DRAFT)
    configs = [c for c in (a.configs.split(",") if a.configs else TAU_CONFIGS)
               if not (a.no_draft and TAU_CONFIGS[c].get("drafter") == "model")]
    if configs[0] != "plain":
        configs.insert(0, "plain")
    res = asyncio.run(measure(str(CHAMPION), draft, a.prompts, a.runs, configs, check, speed_prompts=a.speed_prompts,
                              simulate=True, coupled_seeds=a.coupled_seeds))
    report("CPython", res)
    out = {"cpython": res, "prompts_file": PROMPTS_FILE and str(Path(PROMPTS_FILE).resolve().relative_to(ROOT))}
    if not a.no_pyodide:
        pres = run_pyodide(a.pyodide_prompts, a.pyodide_runs, ["plain", "combined"] if draft else ["plain", "forced"],
                           draft)
        if pres is not None:
            report(f"Pyodide {pres.get('python')} under Node", pres)
            out["pyodide"] = pres
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
