"""The preregistered bench matrix (bench/matrix/spec.json, issue 15): its subsets, and its summary and figures from
the answer records of a run.

Pure Python (no numpy, no `js`): the CLI (py/bench/matrix.py, CPython) and the page's "Benchmark this machine"
panel (the worker's Python, reached through exactspec.benchFigures) compute the same summary and the same figures
from the same JSON fields, so the report's plots and the panel's plots are one computation drawn twice.

A matrix document (DIR/matrix.json, or the page's receipt):
    {"spec": {"name", "version", "sha256", "subset", "definition": {...}, "departures": [...]},
     "meta": {...},                       # machine, backend, adapter, versions, artifacts' sha256 (never read here)
     "records": [answer],                 # one per measured answer (py/bench/product.py: record), fields below
     "ttft": [answer],                    # the cold time-to-first-token phase: same fields, "phase": "ttft"
     "memory": [sample]}                  # exactspec.memory() after each run of each stratum
answer: run, stratum, prompt_id, mode, seed, drafter, k, adaptive, n_tokens, tokens_per_s, elapsed_ms, ttft_ms, tau,
        rounds, target_passes, draft_passes, proposed, accepted, acceptance_by_position, identical (vs the
        champion alone's answer of the same run, prompt, mode and seed; None for the champion alone)
sample: {"models": {role: {"backend", "weights", "kv", "features", "scratch", "total"}}, "wasm_heap", "cpu_pool",
         "js_heap_used", "js_heap_total" (the worker's), "page_js_heap_used" (the page's), "gpu_buffers"}  (bytes;
         None where the host cannot tell)

    summary = summarise(doc)       -> {"strata", "modes", "configs", "rows", "alone", "ttft_cold", "lengths",
                                       "memory_peak", "exactness", "all_identical"}
    figs = figures(doc, summary)   -> [figure]
figure: {"id", "title", "kind": "bars" | "lines" | "scatter", "x_label", "y_label", "unit", "categories",
         "series": [{"name", "values", "lo", "hi"}] (bars, lines: one value per category; None = no data)
                   | [{"name", "points": [[x, y], ...]}] (scatter),
         "ref": y of a reference line or None, "flags": {category: why} (strata whose exactness check failed),
         "table": {"columns": [...], "rows": [[...]]}  (every figure also as a table, cells already formatted)}
"""
from __future__ import annotations

import hashlib
import json

SPEC_KEYS = ("strata", "per_stratum", "drafters", "ks", "modes", "seeds", "temperature", "max_new_tokens", "runs",
             "timing_reps", "ttft")
MODES = ("greedy", "coupled")
ALL = "all"
LENGTH_BINS = (8, 16, 32, 64, 128, 256)     # upper edges of the answer-length bins of "tok/s over answer length"


# ---- the spec ------------------------------------------------------------------------------------------------------
def load_spec(path) -> tuple[dict, str]:
    """(the spec, the sha256 of its file's bytes)."""
    with open(path, "rb") as f:
        raw = f.read()
    spec = json.loads(raw.decode("utf-8"))
    for name, sub in spec.get("subsets", {}).items():
        check_subset(sub, name)
    return spec, hashlib.sha256(raw).hexdigest()


def check_subset(sub: dict, name: str = "subset") -> dict:
    missing = [k for k in SPEC_KEYS if k not in sub]
    if missing:
        raise ValueError(f"matrix subset {name!r} lacks {', '.join(missing)}")
    if sub["strata"] != "all" and not (isinstance(sub["strata"], list) and sub["strata"]):
        raise ValueError(f"matrix subset {name!r}: strata must be 'all' or a list")
    if not sub["drafters"] or sub["drafters"][0] != "none":
        raise ValueError(f"matrix subset {name!r}: drafters must start with 'none' (the champion alone)")
    if not sub["ks"] or any(int(k) < 1 for k in sub["ks"]):
        raise ValueError(f"matrix subset {name!r}: ks must be whole numbers >= 1")
    if any(m not in MODES for m in sub["modes"]) or not sub["modes"]:
        raise ValueError(f"matrix subset {name!r}: modes must be among {', '.join(MODES)}")
    for key in ("per_stratum", "max_new_tokens", "runs"):
        if int(sub[key]) < 1:
            raise ValueError(f"matrix subset {name!r}: {key} must be at least 1")
    t = sub["ttft"]
    if t and (int(t.get("k", 0)) < 1 or int(t.get("max_new_tokens", 0)) < 2):
        raise ValueError(f"matrix subset {name!r}: ttft needs k >= 1 and max_new_tokens >= 2 (a round to propose in)")
    if t and (int(t.get("runs", 1)) < 1 or not (t.get("strata", "all") == "all" or isinstance(t.get("strata"), list))):
        raise ValueError(f"matrix subset {name!r}: ttft runs must be >= 1 and its strata 'all' or a list")
    return sub


def ttft_items(items: list[dict], sub: dict) -> list[dict]:
    """The cold time-to-first-token phase's prompts: those of the matrix in the strata ttft.strata."""
    t = sub.get("ttft") or {}
    want = t.get("strata", "all")
    return [it for it in items if want == "all" or it["stratum"] in want] if t else []


def ttft_runs(sub: dict) -> int:
    t = sub.get("ttft") or {}
    return int(t.get("runs", sub["runs"])) if t else 0


def select_items(items: list[dict], sub: dict) -> list[dict]:
    """The subset's prompts: the first per_stratum items of each of its strata, in the workload's order."""
    have = list(dict.fromkeys(it["stratum"] for it in items))
    want = have if sub["strata"] == "all" else list(sub["strata"])
    unknown = [s for s in want if s not in have]
    if unknown:
        raise ValueError(f"unknown strata {unknown}; the workload has {', '.join(have)}")
    n = int(sub["per_stratum"])
    return [it for s in want for it in [x for x in items if x["stratum"] == s][:n]]


def mode_settings(mode: str, seed: int, temperature: float) -> dict:
    """A mode group's sampling settings (the same as py/bench/product.py's)."""
    if mode == "greedy":
        return {"temperature": 0.0, "seed": seed, "mode": "coupled"}
    return {"temperature": temperature, "seed": seed, "mode": "coupled", "top_k": 0, "top_p": 1.0}


def mode_groups(sub: dict) -> list[tuple[str, int]]:
    seeds = [int(s) for s in sub["seeds"]]
    return [(m, s) for m in sub["modes"] for s in (seeds if m == "coupled" else seeds[:1])]


# ---- small statistics ---------------------------------------------------------------------------------------------
def spread(xs) -> dict | None:
    ys = sorted(x for x in xs if x is not None)
    if not ys:
        return None
    n = len(ys)
    med = ys[n // 2] if n % 2 else 0.5 * (ys[n // 2 - 1] + ys[n // 2])
    return {"median": med, "min": ys[0], "max": ys[-1], "n": n}


def rate(recs) -> float | None:
    """Tokens per second over a set of answers (their total tokens over their total time)."""
    ms = sum(r.get("elapsed_ms") or 0 for r in recs)
    return sum(r["n_tokens"] for r in recs) / (ms / 1000.0) if ms > 0 else None


def _med(xs):
    s = spread(xs)
    return s["median"] if s else None


def _tau(recs):
    tp = sum(r.get("target_passes") or 0 for r in recs)
    return sum((r.get("tau") or 0) * (r.get("target_passes") or 0) for r in recs) / tp if tp else None


def config_name(drafter: str, k: int) -> str:
    return "champion alone" if drafter == "none" else f"{drafter} k={k}"


# ---- the summary --------------------------------------------------------------------------------------------------
def summarise(doc: dict) -> dict:
    recs = [r for r in doc.get("records", []) if not r.get("adaptive")]
    cold = list(doc.get("ttft", []))
    strata = list(dict.fromkeys(r["stratum"] for r in recs + cold))
    modes = [m for m in MODES if any(r["mode"] == m for r in recs)]
    configs = list(dict.fromkeys((r["drafter"], int(r["k"])) for r in recs if r["drafter"] != "none"))
    runs = sorted({r["run"] for r in recs})
    rows, alone_rows = [], []
    for stratum in strata + [ALL]:
        in_s = [r for r in recs if stratum == ALL or r["stratum"] == stratum]
        for mode in modes:
            sel = [r for r in in_s if r["mode"] == mode]
            alone = [r for r in sel if r["drafter"] == "none"]
            if alone:
                alone_rows.append({"stratum": stratum, "mode": mode, "answers": len(alone),
                                   "tok_s": spread([rate([r for r in alone if r["run"] == run]) for run in runs]),
                                   "ttft_ms": spread([r.get("ttft_ms") for r in alone])})
            for d, k in configs:
                spec = [r for r in sel if r["drafter"] == d and int(r["k"]) == k]
                if not spec:
                    continue
                per_run = []
                for run in runs:
                    s = [r for r in spec if r["run"] == run]
                    keys = {(r["stratum"], r["prompt_id"], r["seed"]) for r in s}
                    a = [r for r in alone if r["run"] == run and (r["stratum"], r["prompt_id"], r["seed"]) in keys]
                    if not s or len(a) != len(s):
                        continue
                    ra, rs = rate(a), rate(s)
                    per_run.append({"run": run, "alone_tok_s": ra, "spec_tok_s": rs,
                                    "speedup": rs / ra if ra and rs else None, "tau": _tau(s)})
                toks = sum(r["n_tokens"] for r in spec)
                rounds = sum(r.get("rounds") or 0 for r in spec)
                acc = [0.0] * k
                w = 0
                for r in spec:     # per-answer rates weighted by the answer's rounds
                    ab = r.get("acceptance_by_position") or []
                    n = r.get("rounds") or 0
                    if not ab or not n:
                        continue
                    w += n
                    for i in range(min(k, len(ab))):
                        acc[i] += n * (ab[i] or 0.0)
                keys = {(r["run"], r["stratum"], r["prompt_id"], r["seed"]) for r in spec}
                twin = [r for r in alone if (r["run"], r["stratum"], r["prompt_id"], r["seed"]) in keys]
                rows.append({
                    "stratum": stratum, "mode": mode, "drafter": d, "k": k, "answers": len(spec),
                    "runs": len(per_run),
                    "speedup": spread([p["speedup"] for p in per_run]),
                    "tau": spread([p["tau"] for p in per_run]),
                    "alone_tok_s": spread([p["alone_tok_s"] for p in per_run]),
                    "spec_tok_s": spread([p["spec_tok_s"] for p in per_run]),
                    "acceptance_by_position": [a / w for a in acc] if w else None,
                    "ttft_ms": spread([r.get("ttft_ms") for r in spec]),
                    "alone_ttft_ms": spread([r.get("ttft_ms") for r in twin]),
                    "target_per_token": sum(r.get("target_passes") or 0 for r in spec) / toks if toks else None,
                    "draft_per_token": sum(r.get("draft_passes") or 0 for r in spec) / toks if toks else None,
                    "draft_per_target": (sum(r.get("draft_passes") or 0 for r in spec)
                                         / max(1, sum(r.get("target_passes") or 0 for r in spec))),
                    "rounds": rounds,
                    "identical": sum(1 for r in spec if r.get("identical") is True),
                    "per_run": per_run,
                })
    # cold time to first token: per stratum and setting, and whether each answer equals the alone one's
    cold_cfgs = list(dict.fromkeys((r["drafter"], int(r["k"])) for r in cold))
    cold_rows = []
    for stratum in strata + [ALL]:
        for d, k in cold_cfgs:
            sel = [r for r in cold if (stratum == ALL or r["stratum"] == stratum) and r["drafter"] == d
                   and int(r["k"]) == k]
            if sel:
                cold_rows.append({"stratum": stratum, "drafter": d, "k": k, "answers": len(sel),
                                  "ttft_ms": spread([r.get("ttft_ms") for r in sel]),
                                  "prompt_tokens": _med([r.get("prompt_tokens") for r in sel]),
                                  "identical": sum(1 for r in sel if r.get("identical") is not False)})
    # tok/s over answer length
    lengths = []
    for d, k in [("none", 0)] + configs:
        for mode in modes:
            sel = [r for r in recs if r["drafter"] == d and (d == "none" or int(r["k"]) == k) and r["mode"] == mode]
            if sel:
                lengths.append({"drafter": d, "k": k, "mode": mode,
                                "points": [[r["n_tokens"], r.get("tokens_per_s")] for r in sel
                                           if r.get("tokens_per_s") is not None]})
    # exactness per stratum: every speculative answer (matrix and cold phase) against the champion alone's
    exact = {}
    for stratum in strata:
        spec = [r for r in recs + cold if r["stratum"] == stratum and r["drafter"] != "none"]
        bad = [r for r in spec if r.get("identical") is False]
        exact[stratum] = {"answers": len(spec), "identical": sum(1 for r in spec if r.get("identical") is True),
                          "failed": [f"{r['prompt_id']} {r['mode']} seed {r['seed']} {config_name(r['drafter'], r['k'])}"
                                     f" run {r['run'] + 1}" + (" (cold)" if r.get("phase") == "ttft" else "")
                                     for r in bad]}
    return {"strata": strata, "modes": modes, "configs": [list(c) for c in configs], "runs": len(runs),
            "rows": rows, "alone": alone_rows, "ttft_cold": cold_rows, "lengths": lengths,
            "memory_peak": memory_peak(doc.get("memory", [])), "exactness": exact,
            "all_identical": all(not e["failed"] for e in exact.values())}


MEMORY_PARTS = ("weights", "kv", "features", "scratch")


def memory_peak(samples: list[dict]) -> dict:
    """The largest value of each reported quantity over the samples: {"models": {role: {part: bytes}}, "wasm_heap", "cpu_pool",
    "js_heap_used", "js_heap_total", "gpu_buffers", "backend": {role: backend}}."""
    peak = {"models": {}, "backend": {}}
    for s in samples:
        for role, m in (s.get("models") or {}).items():
            if not m:
                continue
            p = peak["models"].setdefault(role, {})
            peak["backend"][role] = m.get("backend")
            for part in MEMORY_PARTS + ("total",):
                if m.get(part) is not None:
                    p[part] = max(p.get(part, 0), m[part])
        for key in ("wasm_heap", "cpu_pool", "js_heap_used", "js_heap_total", "page_js_heap_used", "gpu_buffers"):
            if s.get(key) is not None:
                peak[key] = max(peak.get(key) or 0, s[key])
    return peak


# ---- the figures --------------------------------------------------------------------------------------------------
def _fmt(x, d=2) -> str:
    return "–" if x is None else f"{x:.{d}f}"


def _fs(s: dict | None, d=2) -> str:
    """A spread as 'median [min-max]' ('median' alone when they agree)."""
    if not s:
        return "–"
    if s["n"] == 1 or s["min"] == s["max"]:
        return _fmt(s["median"], d)
    return f"{_fmt(s['median'], d)} [{_fmt(s['min'], d)}-{_fmt(s['max'], d)}]"


def _flags(summary: dict, categories) -> dict:
    return {c: "exactness check failed: " + "; ".join(summary["exactness"][c]["failed"][:3])
            for c in categories if c in summary["exactness"] and summary["exactness"][c]["failed"]}


def _per_stratum_bars(summary, mode, key, fid, title, y_label, unit, ref=None, digits=2):
    cats = summary["strata"] + [ALL]
    series, table_rows = [], []
    by = {(r["stratum"], r["drafter"], r["k"]): r for r in summary["rows"] if r["mode"] == mode}
    for d, k in summary["configs"]:
        vals, lo, hi = [], [], []
        for c in cats:
            s = (by.get((c, d, k)) or {}).get(key)
            vals.append(s["median"] if s else None)
            lo.append(s["min"] if s else None)
            hi.append(s["max"] if s else None)
        series.append({"name": config_name(d, k), "values": vals, "lo": lo, "hi": hi})
    for c in cats:
        table_rows.append([c] + [_fs((by.get((c, d, k)) or {}).get(key), digits) for d, k in summary["configs"]])
    return {"id": fid, "title": title, "kind": "bars", "x_label": "stratum", "y_label": y_label, "unit": unit,
            "categories": cats, "series": series, "ref": ref, "flags": _flags(summary, cats),
            "table": {"columns": ["stratum"] + [s["name"] for s in series], "rows": table_rows}}


def figures(doc: dict, summary: dict | None = None) -> list[dict]:
    s = summary or summarise(doc)
    figs = []
    runs = s["runs"]
    over = f"median over {runs} run{'s' if runs != 1 else ''}, bars show the range" if runs > 1 else "one run"
    for mode in s["modes"]:
        figs.append(_per_stratum_bars(s, mode, "speedup", f"speedup-{mode}",
                                      f"Speedup over the champion alone, {mode} ({over})", "speedup (x)", "x",
                                      ref=1.0))
        figs.append(_per_stratum_bars(s, mode, "tau", f"tau-{mode}",
                                      f"Tokens per target pass (tau), {mode} ({over})", "tau", "", ref=1.0))
    # acceptance by position per stratum, one figure per drafter at its largest k (greedy if measured)
    mode = "greedy" if "greedy" in s["modes"] else (s["modes"][0] if s["modes"] else None)
    for d in dict.fromkeys(c[0] for c in s["configs"]):
        k = max(c[1] for c in s["configs"] if c[0] == d)
        by = {r["stratum"]: r for r in s["rows"] if r["mode"] == mode and r["drafter"] == d and r["k"] == k}
        cats = [str(i + 1) for i in range(k)]
        series = [{"name": st, "values": list(by[st]["acceptance_by_position"] or [None] * k)}
                  for st in s["strata"] + [ALL] if st in by]
        figs.append({"id": f"acceptance-{d}-k{k}", "title": f"Acceptance by draft position, {d} drafter, k = {k}, {mode}",
                     "kind": "lines", "x_label": "draft position", "y_label": "acceptance rate", "unit": "",
                     "categories": cats, "series": series, "ref": None, "y_max": 1.0,
                     "flags": _flags(s, [x["name"] for x in series]),
                     "table": {"columns": ["stratum"] + [f"position {c}" for c in cats],
                               "rows": [[x["name"]] + [_fmt(v) for v in x["values"]] for x in series]}})
    # time to first token: cold (the prompt's prefill paid, the draft's too) and warm (the prompt cached)
    cold = s["ttft_cold"]
    if cold:
        ccfg = list(dict.fromkeys((r["drafter"], r["k"]) for r in cold))
        by = {(r["stratum"], r["drafter"], r["k"]): r for r in cold}
        cats = s["strata"] + [ALL]
        series = []
        for d, k in ccfg:
            sp = [(by.get((c, d, k)) or {}).get("ttft_ms") for c in cats]
            series.append({"name": config_name(d, k), "values": [x["median"] if x else None for x in sp],
                           "lo": [x["min"] if x else None for x in sp], "hi": [x["max"] if x else None for x in sp]})
        figs.append({"id": "ttft-cold", "title": "Time to first token with the prompt's prefill (cold), "
                                                 "without and with speculation", "kind": "bars",
                     "x_label": "stratum", "y_label": "ms", "unit": "ms", "categories": cats, "series": series,
                     "ref": None, "flags": _flags(s, cats),
                     "table": {"columns": ["stratum", "prompt tokens"] + [x["name"] for x in series],
                               "rows": [[c, _fmt(next((by[(c, d, k)]["prompt_tokens"] for d, k in ccfg
                                                       if (c, d, k) in by), None), 0)]
                                        + [_fs((by.get((c, d, k)) or {}).get("ttft_ms"), 0) for d, k in ccfg]
                                        for c in cats]}})
    if mode:
        by = {(r["stratum"], r["drafter"], r["k"]): r for r in s["rows"] if r["mode"] == mode}
        alone = {r["stratum"]: r for r in s["alone"] if r["mode"] == mode}
        cats = s["strata"] + [ALL]
        series = [{"name": "champion alone",
                   "values": [((alone.get(c) or {}).get("ttft_ms") or {}).get("median") for c in cats]}]
        for d, k in s["configs"]:
            series.append({"name": config_name(d, k),
                           "values": [((by.get((c, d, k)) or {}).get("ttft_ms") or {}).get("median") for c in cats]})
        figs.append({"id": "ttft-warm", "title": f"Time to first token with the prompt already cached (warm), {mode}",
                     "kind": "bars", "x_label": "stratum", "y_label": "ms", "unit": "ms", "categories": cats,
                     "series": series, "ref": None, "flags": _flags(s, cats),
                     "table": {"columns": ["stratum"] + [x["name"] for x in series],
                               "rows": [[c] + [_fmt(x["values"][i], 0) for x in series] for i, c in enumerate(cats)]}})
    # tok/s over answer length
    if s["lengths"]:
        series = [{"name": config_name(x["drafter"], x["k"]) + ("" if len(s["modes"]) < 2 else f", {x['mode']}"),
                   "points": x["points"]} for x in s["lengths"]]
        longest = max([p[0] for x in series for p in x["points"]] + [1])
        bins = [b for b in LENGTH_BINS if b < longest] + [next((b for b in LENGTH_BINS if b >= longest), longest)]
        lo_edges = [0] + bins[:-1]
        rows = []
        for x in series:
            row = [x["name"]]
            for lo, hi in zip(lo_edges, bins):
                ys = [p[1] for p in x["points"] if lo < p[0] <= hi]
                row.append(f"{_fmt(_med(ys), 1)} (n={len(ys)})" if ys else "–")
            rows.append(row)
        figs.append({"id": "toks-length", "title": "Tokens per second over answer length (one point per answer)",
                     "kind": "scatter", "x_label": "answer length (tokens)", "y_label": "tokens/s", "unit": "tok/s",
                     "categories": [], "series": series, "ref": None, "flags": {},
                     "table": {"columns": ["setting"] + [f"{lo + 1}-{hi} tokens" for lo, hi in zip(lo_edges, bins)],
                               "rows": rows}})
    # peak memory
    mp = s["memory_peak"]
    cats, vals = [], []
    for role in ("champion", "draft"):
        m = mp["models"].get(role)
        if not m:
            continue
        for part in MEMORY_PARTS:
            if m.get(part):
                cats.append(f"{role} {part} ({mp['backend'].get(role) or '?'})")
                vals.append(m[part] / 1e6)
    for key, label in (("gpu_buffers", "GPU buffers, all"), ("wasm_heap", "WebAssembly heap"),
                       ("cpu_pool", "CPU kernel shared memory"),
                       ("js_heap_used", "JS heap used (worker)"), ("page_js_heap_used", "JS heap used (page)")):
        if mp.get(key):
            cats.append(label)
            vals.append(mp[key] / 1e6)
    if cats:
        rows = [[c, f"{v:.4g}"] for c, v in zip(cats, vals)]
        ch, dr = mp["models"].get("champion") or {}, mp["models"].get("draft") or {}
        for what, x, y in (("draft / champion, total bytes", dr.get("total"), ch.get("total")),
                           ("draft / champion, weight bytes", dr.get("weights"), ch.get("weights")),
                           ("champion KV / champion weights", ch.get("kv"), ch.get("weights")),
                           ("draft KV / draft weights", dr.get("kv"), dr.get("weights"))):
            if x and y:
                rows.append([what, f"ratio {x / y:.3f}"])
        figs.append({"id": "memory", "title": "Peak memory over the run (MB)", "kind": "bars",
                     "x_label": "", "y_label": "MB", "unit": "MB", "categories": cats,
                     "series": [{"name": "peak MB", "values": vals}], "ref": None, "flags": {}, "horizontal": True,
                     "table": {"columns": ["what", "peak MB"], "rows": rows}})
    # target and draft calls per emitted token
    rows_all = [r for r in s["rows"] if r["stratum"] == ALL]
    if rows_all:
        cats = [config_name(r["drafter"], r["k"]) + ("" if len(s["modes"]) < 2 else f", {r['mode']}") for r in rows_all]
        figs.append({"id": "calls", "title": "Target and draft calls per emitted token (all strata)", "kind": "bars",
                     "x_label": "setting", "y_label": "passes per token", "unit": "", "categories": cats,
                     "series": [{"name": "target passes / token", "values": [r["target_per_token"] for r in rows_all]},
                                {"name": "draft passes / token", "values": [r["draft_per_token"] for r in rows_all]}],
                     "ref": 1.0, "flags": {},
                     "table": {"columns": ["stratum", "setting", "target / token", "draft / token", "draft / target"],
                               "rows": [[r["stratum"], config_name(r["drafter"], r["k"]) + f", {r['mode']}",
                                         _fmt(r["target_per_token"], 3), _fmt(r["draft_per_token"], 3),
                                         _fmt(r["draft_per_target"], 2)] for r in s["rows"]]}})
    return figs


def figures_json(doc_json: str) -> str:
    """The worker's entry (exactspec.benchFigures): a matrix document in, {"summary", "figures"} out."""
    doc = json.loads(doc_json)
    s = summarise(doc)
    return json.dumps({"summary": s, "figures": figures(doc, s)})
