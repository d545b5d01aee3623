"""JSON mode on the workload's strict-JSON-extraction stratum (SmolLM2, the frozen schemas of tests/data/json_schemas.json):

- tau at k = 4, greedy: grammar-forced drafting alone, the shipped draft alone, both (and the n-gram drafter with
  forcing), every answer checked identical to plain decoding and valid for its schema;
- the constraint engine's cost per emitted token as a fraction of a champion pass, first answer per schema (cold
  caches) and later answers (warm), in CPython and in Pyodide 0.27.7 under Node (the page's CPU fallback);
- tokens/s in JSON mode vs free text on the same prompts (plain decoding and with the draft + forcing), decode only
  (each prompt's prefill is timed apart: JSON answers are short, so a prefill inside the figure would dominate).

    python build.py bench json_mode [--runs 3] [--prompts 12] [--pyodide-prompts 4] [--no-pyodide] [--out FILE]

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
TAU_CONFIGS = {
    "plain": {"speculation": False},
    "forced": {"drafter": "none", "grammar_draft": True},
    "draft": {"drafter": "model", "k": 4, "grammar_draft": False, "adaptive": False},
    "combined": {"drafter": "model", "k": 4, "grammar_draft": True, "adaptive": False},
    "ngram+forced": {"drafter": "ngram", "k": 4, "grammar_draft": True, "adaptive": False},
}
SPEED_CONFIGS = ("plain", "forced", "combined")   # timed in JSON mode and in free text, --runs times


def stratum(n: int | None = None):
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
    for m in s.models.values():
        m.cache.truncate(0)
    req = {"chat": row["messages"], "max_new_tokens": row["max_new_tokens"], "temperature": 0.0, **conf}
    if rf is not None:
        req["response_format"] = rf
    ids = s.prompt_ids(req)
    t0 = time.perf_counter()
    r = s.models[s.champion].cache.forward(ids[:-1], 0, 1)
    if asyncio.iscoroutine(r):
        await r
    t1 = time.perf_counter()
    out = await s.generate(req)
    out["wall_s"] = time.perf_counter() - t1
    out["prefill_s"] = t1 - t0
    return out


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


async def measure(champion: str, draft: str | None, n_prompts: int | None, runs: int, tau_configs, check=None,
                  log=print, speed_prompts: int | None = None) -> dict:
    """Runs in CPython and in Pyodide (no imports beyond exactspec, numpy and the standard library)."""
    rows = stratum(n_prompts)
    from exactspec.constrain import TokenVocab
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
    cold = []
    for i, (row, _sch) in enumerate(rows):
        ref = None
        for name in tau_configs:
            out = await answer(s, row, rfs[row["id"]], TAU_CONFIGS[name])
            st = out["stats"]
            if ref is None:
                ref = out
                doc = json.loads(out["text"])
                if check is not None:
                    check(doc, rfs[row["id"]]["schema"])
                res["answers"][row["id"]] = {"text": out["text"], "finish_reason": out["finish_reason"],
                                             "tokens": len(out["token_ids"])}
                cold.append(st["mask_ms"] / max(1, st["new_tokens"]))
            elif out["token_ids"] != ref["token_ids"]:
                raise AssertionError(f"{row['id']} {name}: speculation changed the answer")
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
    for name, p in per.items():
        p["tau"] = p["tokens"] / max(1, p["passes"])
    res["tau"] = per
    res["mask_ms_per_token_cold"] = cold
    # speed: JSON mode vs free text, --runs times
    for run in range(runs):
        one = {"pass_ms": statistics.median(pass_ms(s))}
        for mode in ("json", "free"):
            for name in SPEED_CONFIGS:
                if mode == "free" and name == "forced":
                    continue                     # the same as plain without a grammar
                toks = wall = mask = 0.0
                for row, _sch in rows[:speed_prompts]:
                    out = await answer(s, row, rfs[row["id"]] if mode == "json" else None, TAU_CONFIGS[name])
                    toks += len(out["token_ids"])
                    wall += out["wall_s"]
                    mask += out["stats"]["mask_ms"]
                one[f"{mode}/{name}"] = {"tokens": toks, "tok_s": toks / wall, "mask_ms_per_token": mask / max(1, toks)}
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
    runs = res["runs"]
    if not runs:
        return
    pm = [r["pass_ms"] for r in runs]
    print(f"champion pass: {spread(pm)} ms (median of 12 single-token passes per run, {len(runs)} runs)")
    cold = res["mask_ms_per_token_cold"]
    print(f"mask cost per token, first answer per schema (cold caches): {spread(cold)} ms = "
          f"{spread([c / statistics.median(pm) for c in cold])} of a champion pass (over prompts)")
    for key in [k for k in runs[0] if "/" in k]:
        tps = [r[key]["tok_s"] for r in runs]
        mk = [r[key]["mask_ms_per_token"] for r in runs]
        rel = [r[key]["mask_ms_per_token"] / r["pass_ms"] for r in runs]
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
    a = ap.parse_args()
    try:
        import jsonschema

        def check(doc, schema):
            jsonschema.Draft202012Validator(schema).validate(doc)
    except ImportError:
        print("jsonschema not installed: answers are checked to parse, not validated")
        check = None
    draft = None if a.no_draft else str(DRAFT)
    configs = [c for c in TAU_CONFIGS if not (a.no_draft and "drafter" in TAU_CONFIGS[c]
                                               and TAU_CONFIGS[c]["drafter"] == "model")]
    res = asyncio.run(measure(str(CHAMPION), draft, a.prompts, a.runs, configs, check, speed_prompts=a.speed_prompts))
    report("CPython", res)
    out = {"cpython": res}
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
