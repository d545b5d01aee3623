"""The product's own speed: the champion alone vs speculation, through the page's code path, per workload stratum.

    python build.py bench product [--host chromium|node] [--backend cpu|webgpu|opengl|vulkan]
        [--strata casual_chat,summaries|all] [--per-stratum N] [--drafters none,ngram,model,head,grammar] [--ks 1,2,3,4]
        [--modes greedy,coupled] [--seeds 0,1] [--temperature 0.7] [--runs 3] [--max-new-tokens 64]
        [--adaptive off|on|both] [--head-copy] [--json-mode] [--timing-reps 5] [--champion GGUF] [--draft GGUF] [--head GGUF]
        [--workload JSONL]
        [--out FILE.json] [--table FILE.txt] [--quick] [--deadline S] [--node PATH]

Hosts (the decode loop is never re-implemented here: every answer is a `generate` of the product's own session):
- `chromium`: the real page in headless Chromium, driven through `window.exactspec` (the models are imported into
  OPFS as on a first visit). `--backend cpu` = the CPU fallback (`?cpu=1`), `webgpu` = Chromium's WebGPU
  (SwiftShader on a machine without a GPU).
- `node`: the page's worker core (app/core.js: Pyodide, exactspec's decode loop, bridge.py, app/gpu/engine.js) under
  Node (bench/product/node_host.mjs), on Dawn: `--backend opengl` (llvmpipe here), `vulkan` (a GPU host), or `cpu`
  (no GPU: the CPU fallback).
For each stratum, run and prompt (the first --per-stratum prompts of each stratum, in the workload's order), after a
warm-up answer that leaves the prompt in the KV caches (so no measured answer pays its prefill), it generates the
champion alone and, in the same process and run, with each drafter, k, adaptive setting, mode and seed (the order
rotates from run to run), and records per answer: tokens, text, tok/s, tau, rounds, target/draft passes,
submissions, readback bytes, wasted passes, ttft, and whether the tokens are identical to the champion alone's.
Drafter `head`: the draft head (`--head`, default static/models/head-smollm2.gguf) loaded beside the draft model (the
session keeps both); on the engine it runs on the GPU, its k passes inside the round's one submission.
Per run and stratum it also measures the pass times the break-even formula needs (exactspec.timing, through the
same models): T_single (per token of plain decoding, running ahead where the backend can), T_draft per proposal,
T_verify(k), and the on-device round where offered. Predicted speedup (forced speculation only):

    tau * (T_single + O) / (k * T_draft + T_verify(k) + O)      [or (T_round(k) + O) for an on-device round]

with O the decode loop's own time per round (measured: the alone answers' time per token minus T_single), i.e.
exactspec.schedule's formula with T_overhead = O, both sides paying it once per round (since 2026-12-04d: once per
answer, predicted_speedup). Answers made by the device's n-gram chains (predicted_chain_speedup): a chain round
costs the chain round as timed (exactspec.timing's chain_ms) with the answer's proposals' rows, plain decoding a pass
as the champion alone runs (runs ahead chained by continuations); before 2026-12-07b, T_single plus the rows.
Prints, per stratum, drafter, k, mode and adaptive setting: median [min-max] over runs of tok/s alone and with
speculation (stratum totals: tokens / seconds), the measured speedup next to the predicted one, tau, submissions
per round, readback bytes per token and "identical". Exit status 1 if any answer differed. Progress on stderr.
Figures need --runs >= 3.
`--json-mode`: the prompts that have a frozen schema (the strict JSON extraction stratum; tests/data/json_schemas.json)
answer in JSON mode, alone and with speculation: response_format {type: json_schema, schema}, the page's JSON mode
with its default grammar drafting (the grammar's forced tokens and copies first, then the drafter). The report's
meta lists the prompts that did. Drafter `grammar` (with --json-mode only): JSON mode's own proposals alone, i.e. the
product's drafter none with speculation on (forced runs verified, the rest decoded as the champion alone's), for
the JSON-mode prompts only (elsewhere it is the champion alone).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from exactspec import benchmatrix as bm  # noqa: E402
from exactspec.settings import DEFAULTS, DRAFTERS  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402
from bench.json_mode import SCHEMAS  # noqa: E402   # {"workload": {prompt id: schema}, ...}

MODELS = ROOT / "static" / "models"
CHAMPION = MODELS / "smollm2-135m-instruct-q4_1.gguf"
DRAFT = MODELS / "draft-smollm2-kd.gguf"
HEAD = MODELS / "head-smollm2.gguf"
WORKLOAD = ROOT / "tests" / "data" / "workload.jsonl"
NODE_HOST = ROOT / "bench" / "product" / "node_host.mjs"
HOST_BACKENDS = {"chromium": ("cpu", "webgpu"), "node": ("opengl", "vulkan", "cpu")}
MODES = ("greedy", "coupled")
QUICK = {"per_stratum": 1, "runs": 1, "max_new_tokens": 16, "ks": "1,4", "timing_reps": 2}


class HostError(RuntimeError):
    """The host (page or Node process) failed a request; the message says which and why."""


def progress(msg: str) -> None:
    print(f"[product] {msg}", file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ---- hosts ----------------------------------------------------------------------------------------------------------
def require_gpu(info: dict, what: str) -> None:
    """A GPU run must not quietly measure the CPU fallback: the champion (and draft) must be on the engine."""
    if info.get("backend") != "webgpu":
        raise HostError(f"{what} offers no usable WebGPU adapter here ({info.get('gpu_reason')})")
    on_cpu = [x["name"] for s in info.get("stages", []) if s["stage"] == "weights"
              for x in (s.get("loaded") or []) if isinstance(x, dict) and x.get("backend") != "webgpu"]
    if on_cpu:
        raise HostError(f"the engine could not load {', '.join(on_cpu)} (see the log): they run on the CPU fallback")


class NodeHost:
    """bench/product/node_host.mjs: the worker core under Node, one JSON line per request and reply."""

    name = "node"

    def __init__(self, backend: str, champion: Path, draft: Path | None, *, node: str = "node",
                 env: dict | None = None, engine_opts: dict | None = None, timeout: float = 1800,
                 head: Path | None = None):
        from exactspec_build.wheel import build_exactspec_wheel, write_rules
        write_rules()                      # static/rules.js: app/protocol.js imports it (a fresh checkout lacks it)
        self.backend = backend
        self.timeout = timeout
        env = dict(os.environ if env is None else env)
        if backend == "opengl":
            env.setdefault("XDG_RUNTIME_DIR", "/tmp")
            env.setdefault("EGL_PLATFORM", "surfaceless")
        self.proc = subprocess.Popen([node, str(NODE_HOST)], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.stderr: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self.logs: list[dict] = []
        self.next_id = 1
        self.info = self.request("boot", {"backend": backend, "champion": str(champion),
                                          "draft": str(draft) if draft else None,
                                          "head": str(head) if head else None,
                                          "wheel": str(build_exactspec_wheel()), "engine_opts": engine_opts or {}})
        self.info["host"] = "node"
        if backend != "cpu":
            try:
                require_gpu(self.info, f"Dawn's {backend} backend")
            except HostError:
                self.close()
                raise



    def _drain_stderr(self):
        for line in self.proc.stderr:
            if "artificially reduced" not in line:      # Dawn's notes about limits on llvmpipe
                self.stderr.append(line.rstrip())

    def request(self, kind: str, params: dict) -> dict:
        rid = self.next_id
        self.next_id += 1
        try:
            self.proc.stdin.write(json.dumps({"id": rid, "kind": kind, "params": params}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise HostError(f"the Node host has exited (rc={self.proc.poll()}): " + "\n".join(self.stderr[-20:]))
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(timeout=10)
                raise HostError(f"the Node host exited during {kind} (rc={self.proc.returncode}):\n"
                                + "\n".join(self.stderr[-30:]))
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue                                  # a stray line from a native library
            if msg.get("kind") == "event.log":
                self.logs.append(msg)
                if msg.get("level") in ("error", "warn"):     # a fallback the figures depend on is said
                    progress(f"host: {msg.get('message')}")
            if msg.get("id") == rid:
                if not msg.get("ok"):
                    raise HostError(f"{kind} failed: {msg.get('error')}")
                return msg["result"]

    def generate(self, params: dict) -> dict:
        return self.request("generate", params)

    def timings(self, params: dict) -> dict:
        return self.request("timings", params)

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()


class ChromiumHost:
    """The real page in headless Chromium: build.py's server with the champion and draft as the default models
    (imported into the fresh profile's OPFS as on a first visit), driven through window.exactspec."""

    name = "chromium"

    def __init__(self, backend: str, champion: Path, draft: Path | None, *, timeout: float = 1800,
                 head: Path | None = None, threads: int | None = None):
        sys.path.insert(0, str(ROOT))
        sys.path.insert(0, str(ROOT / "tests" / "browser"))
        import build
        from conftest import CHROMIUM_ARGS, chromium_path
        from playwright.sync_api import sync_playwright
        build.setup_pyodide()
        models = [{"name": Path(champion).stem, "path": Path(champion), "size": Path(champion).stat().st_size,
                   "sha256": sha256(Path(champion)), "role": "champion"}]
        if draft:
            models.append({"name": Path(draft).stem, "path": Path(draft), "size": Path(draft).stat().st_size,
                           "sha256": sha256(Path(draft)), "role": "draft"})
        if head:
            models.append({"name": Path(head).stem, "path": Path(head), "size": Path(head).stat().st_size,
                           "sha256": sha256(Path(head)), "role": "draft", "default": False})
        self.srv = build.make_server(0, models)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        query = (["cpu=1"] if backend == "cpu" else []) + ([f"threads={threads}"] if threads else [])
        url = f"http://127.0.0.1:{self.srv.server_address[1]}/" + ("?" + "&".join(query) if query else "")
        self.pw = sync_playwright().start()
        kw = {"headless": True, "args": CHROMIUM_ARGS}
        if chromium_path():
            kw["executable_path"] = chromium_path()
        self.browser = self.pw.chromium.launch(**kw)
        self.context = self.browser.new_context()
        self.page = self.context.new_page()
        self.page.set_default_timeout(timeout * 1000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        t0 = time.perf_counter()
        self.page.goto(url)
        r = self.page.evaluate("exactspec.ready()")
        if head:   # imported and loaded as on the page (the head slot: the draft model stays loaded)
            n = Path(head).stem
            self.page.evaluate(f"exactspec.importModel({{url: '/models/{n}.gguf', name: '{n}', role: 'draft'}})")
            out = self.page.evaluate(f"exactspec.loadModel('{n}', 'draft')")
            r = self.page.evaluate("exactspec.ready()")
            r.setdefault("stages", []).append({"stage": "weights", "loaded": [{"name": n, "role": "head",
                                                                               "backend": out.get("backend")}]})
        gpu = next((s for s in r["stages"] if s["stage"] == "gpu"), {})
        self.info = {**r, "host": "chromium", "boot_ms": (time.perf_counter() - t0) * 1000.0,
                     "adapter": gpu.get("adapter"), "chromium": self.browser.version}
        if backend == "webgpu":
            require_gpu(self.info, "the page")

    def generate(self, params: dict) -> dict:
        return self.page.evaluate("(p) => exactspec.generate(p)", params)

    def timings(self, params: dict) -> dict:
        return self.page.evaluate("(p) => exactspec.timings(p)", params)

    def close(self):
        for f in (self.context.close, self.browser.close, self.pw.stop, self.srv.shutdown):
            try:
                f()
            except Exception:
                pass


def open_host_b(a) -> NodeHost:
    """--ab-engine-opts: a second Node host, its engine given --engine-opts and then these (the engine A/B)."""
    base = json.loads(a.engine_opts) if a.engine_opts else {}
    return NodeHost(a.backend, Path(a.champion), None, node=a.node, engine_opts={**base, **json.loads(a.ab_engine_opts)})


def open_host(a) -> NodeHost | ChromiumHost:
    draft = Path(a.draft) if a.draft and "model" in a.drafters else None
    head = Path(a.head) if a.head and "head" in a.drafters else None
    if a.host == "node":
        return NodeHost(a.backend, Path(a.champion), draft, node=a.node, head=head,
                        engine_opts=json.loads(a.engine_opts) if a.engine_opts else None)
    return ChromiumHost(a.backend, Path(a.champion), draft, head=head, threads=a.threads)


# ---- the benchmark ----------------------------------------------------------------------------------------------
# --adaptive: speculation forced (off), "only while it pays" (on), or both, as the answers' `adaptive` settings
ADAPTIVES = {"off": [False], "on": [True], "both": [False, True]}


# drafter `grammar` (--json-mode): the settings a JSON-mode answer is sent with (speculation on, no drafter: the
# grammar's forced proposals alone; exactspec.settings.effective)
GRAMMAR_ONLY = {"drafter": "none", "k": 0, "adaptive": False, "speculation": True}
# the champion alone: speculation off (in JSON mode that also turns the grammar's own proposals off: drafter none
# alone leaves them on, exactspec.settings.effective)
ALONE = {"drafter": "none", "k": 0, "adaptive": False, "speculation": False}
BENCH_DRAFTERS = DRAFTERS + ("grammar",)     # --drafters: the product's, and `grammar`


def spec_configs(drafters, ks, adaptives) -> list[dict]:
    """Every speculative setting of one answer group: drafter x k x adaptive (drafter `grammar`: one, k 0)."""
    return [{"drafter": d, "k": k, "adaptive": ad} for d in drafters if d not in ("none", "grammar")
            for k in ks for ad in adaptives] + \
        ([{"drafter": "grammar", "k": 0, "adaptive": False}] if "grammar" in drafters else [])


def mode_settings(mode: str, seed: int, temperature: float) -> dict:
    if mode == "greedy":
        return {"temperature": 0.0, "seed": seed, "mode": "coupled"}
    return {"temperature": temperature, "seed": seed, "mode": "coupled", "top_k": 0, "top_p": 1.0}


RECORD_STATS = ("tokens_per_s", "elapsed_ms", "ttft_ms", "tau", "rounds", "target_passes", "draft_passes",
                "prefill_passes", "submissions", "readback_bytes", "ahead_passes", "wasted_passes", "proposed",
                "accepted", "acceptance_by_position", "spec_disabled_rounds", "reused_prefix_tokens", "backend",
                "chain_rounds", "chain_proposed", "device_wait_ms", "row_reads", "mask_ms")


def record(out: dict, **where) -> dict:
    st = out.get("stats", {})
    r = {**where, "n_tokens": len(out["token_ids"]), "token_ids": out["token_ids"], "text": out["text"],
         "finish_reason": out["finish_reason"], "prompt_tokens": out.get("prompt_tokens")}
    r.update({k: st.get(k) for k in RECORD_STATS})
    if out.get("error"):
        r["error"] = out["error"]
    return r


def run_bench(host, items: list[dict], a, log=progress, checkpoint=None, host_b=None) -> dict:
    """All runs over the chosen prompts; returns {"records", "timings", "warmups", "errors", "stopped", "ab"}.
    Strata one after another, each with all its runs (so a deadline leaves whole strata); checkpoint(res) is called
    after each run of each stratum (the report so far can be written); past a.deadline seconds no new stratum is
    started (res["stopped"] says so). host_b (--ab-engine-opts): each champion-alone answer is made on it too, right
    after the prompt's answers on `host` in even runs and right before them in odd ones, into res["ab"] (its record,
    with a_tok_s: the same answer's rate on `host`, and identical: the same tokens)."""
    configs = spec_configs(a.drafters, a.ks, a.adaptives)
    groups = [(m, s) for m in a.modes for s in (a.seeds if m == "coupled" else a.seeds[:1])]
    strata = list(dict.fromkeys(it["stratum"] for it in items))
    records, timings, warmups, errors = [], [], [], []
    ab = []
    res = {"records": records, "timings": timings, "warmups": warmups, "errors": errors, "stopped": None, "ab": ab}
    n_answers = a.runs * len(items) * len(groups) * (1 + len(configs))
    done = 0
    t_start = time.perf_counter()
    for stratum in strata:
        if a.deadline and time.perf_counter() - t_start > a.deadline:
            res["stopped"] = f"deadline of {a.deadline:g} s reached before stratum {stratum}"
            log(res["stopped"])
            break
        s_items = [it for it in items if it["stratum"] == stratum]
        for run in range(a.runs):
            for mode, seed in groups:
                try:
                    t = host.timings({"chat": workload_messages(s_items[0]), "ks": a.ks, "reps": a.timing_reps,
                                      "drafters": [d for d in a.drafters if d not in ("none", "grammar")],
                                      **mode_settings(mode, seed, a.temperature)})
                    timings.append({"run": run, "stratum": stratum, "prompt_id": s_items[0]["id"], "mode": mode,
                                    "seed": seed, **t})
                except HostError as e:
                    errors.append({"run": run, "stratum": stratum, "what": "timings", "error": str(e)})
                    log(f"timings failed: {e}")
            for it in s_items:
                chat = workload_messages(it)
                max_new = min(int(it["max_new_tokens"]), a.max_new_tokens)
                base = {"chat": chat, "max_new_tokens": max_new,
                        **({"head_copy": a.head_copy} if a.head_copy is not None else {})}
                # JSON mode (--json-mode) for the measured answers; the warm-up's 2 tokens are free text (the same
                # prefill: a schema's shortest document is longer than that)
                fmt = {"response_format": a.json_formats[it["id"]]} if it["id"] in a.json_formats else {}
                try:   # the warm-up answer: the prompt's prefill (and the drafts'), so measured answers reuse it
                    if "head" in a.drafters:
                        host.generate({**base, "max_new_tokens": 2, "temperature": 0.0, "drafter": "head", "k": 1,
                                       "adaptive": False})
                    w = host.generate({**base, "max_new_tokens": 2, "temperature": 0.0,
                                       **({"drafter": "model", "k": 1, "adaptive": False} if "model" in a.drafters
                                          else {"drafter": "none"})})
                    if host_b is not None:   # (its own prefill, so that its measured answers reuse it too)
                        host_b.generate({**base, "max_new_tokens": 2, "temperature": 0.0, "drafter": "none"})
                    warmups.append({"run": run, "stratum": stratum, "prompt_id": it["id"],
                                    "prompt_tokens": w.get("prompt_tokens"), "ttft_ms": w["stats"].get("ttft_ms"),
                                    "prefill_passes": w["stats"].get("prefill_passes"),
                                    "reused_prefix_tokens": w["stats"].get("reused_prefix_tokens")})
                except HostError as e:
                    errors.append({"run": run, "stratum": stratum, "prompt_id": it["id"], "what": "warm-up",
                                   "error": str(e)})
                    log(f"{it['id']}: {e}")
                    done += len(groups) * (1 + len(configs))
                    continue
                for mode, seed in groups:
                    settings = mode_settings(mode, seed, a.temperature)
                    order = [None] + configs
                    shift = run % len(order)
                    order = order[shift:] + order[:shift]     # rotate: no setting always runs first
                    alone, group = None, []

                    def where_of(spec, **more):   # an answer's place in the report
                        return {"run": run, "stratum": stratum, "prompt_id": it["id"], "mode": mode, "seed": seed,
                                "max_new_tokens": max_new, **spec, **({"json_mode": True} if fmt else {}), **more}
                    where_b = where_of(ALONE, side="B")

                    def alone_b():
                        try:
                            return record(host_b.generate({**base, **fmt, **settings, **ALONE}), **where_b)
                        except HostError as e:
                            errors.append({**where_b, "what": "generate (engine B)", "error": str(e)})
                            log(f"{it['id']} engine B: {e}")
                            return None
                    rb = alone_b() if host_b is not None and run % 2 == 1 else None
                    for c in order:
                        if c is not None and c["drafter"] == "grammar" and not fmt:
                            done += 1
                            continue             # (not a JSON-mode prompt: it would be the champion alone)
                        spec = ALONE if c is None else c
                        where = where_of(spec)
                        send = GRAMMAR_ONLY if spec["drafter"] == "grammar" else spec
                        try:
                            out = host.generate({**base, **fmt, **settings, **send})
                        except HostError as e:
                            errors.append({**where, "what": "generate", "error": str(e)})
                            log(f"{it['id']} {spec}: {e}")
                            continue
                        r = record(out, **where)
                        done += 1
                        if c is None:
                            alone = r
                        group.append(r)
                    for r in group:
                        r["identical"] = None if alone is None else r["token_ids"] == alone["token_ids"]
                        records.append(r)
                    if host_b is not None and run % 2 == 0:
                        rb = alone_b()
                    if rb is not None:
                        rb["a_tok_s"] = alone["tokens_per_s"] if alone else None
                        rb["identical"] = None if alone is None else rb["token_ids"] == alone["token_ids"]
                        ab.append(rb)
                    el = time.perf_counter() - t_start
                    eta = el / max(done, 1) * (n_answers - done)
                    spd = " ".join(f"{r['drafter'][0]}{r['k']}{'a' if r['adaptive'] else ''}:"
                                   f"{r['tokens_per_s'] / alone['tokens_per_s']:.2f}"
                                   for r in group if alone is not None and r is not alone)
                    same = all(r["identical"] for r in group)
                    eng_b = f"; engine B alone {rb['tokens_per_s']:.1f} tok/s" if rb is not None else ""
                    log(f"run {run + 1}/{a.runs} {stratum} {it['id']} {mode} seed {seed}: alone "
                        f"{alone['tokens_per_s']:.1f} tok/s ({alone['n_tokens']} tokens){eng_b}; x {spd}; identical "
                        f"{'yes' if same else 'NO'}  [{done}/{n_answers}, {el:.0f} s, ~{eta:.0f} s left]"
                        if alone else f"{it['id']}: the champion-alone answer failed")
            if checkpoint is not None:
                checkpoint(res)
    return res


# ---- summary ------------------------------------------------------------------------------------------------------
spread = bm.spread      # median / min / max / n (exactspec.benchmatrix: one definition)


def _rate(rs: list) -> float | None:
    """Tokens per second over a set of answers (their total tokens over their total time)."""
    ms = sum(r["elapsed_ms"] or 0 for r in rs)
    return sum(r["n_tokens"] for r in rs) / (ms / 1000.0) if ms > 0 else None


def verify_ms_at(t: dict, g: float):
    """T_verify(g) from the timings, interpolated between the measured whole g (T_verify(0) = one forward); None
    past what was measured."""
    ve = {0: t["forward_ms"]["median"], **{int(j): v["median"] for j, v in (t.get("verify_ms") or {}).items()}}
    lo, hi = int(g), min(int(g) + 1, max(ve))
    return ve[lo] + (ve[hi] - ve[lo]) * (g - lo) if lo in ve and hi in ve else None


def predicted_speedup(t: dict, drafter: str, k: int, g: float, tau: float, o_ms: float, ahead_share: float = 0.0):
    """(T_single + O) / (O + T_round / tau): the break-even formula, T_round = g * T_draft + T_verify(g) a verify
    round (g the mean proposals per verify round: k for a draft model, an n-gram lookup may find fewer; T_verify
    interpolated between the measured whole k, T_verify(0) = one forward), or T_round(k) for an on-device round;
    tau: tokens per verify round. O (ms a token of the answer): what the champion alone spends beyond its passes
    (first token, the answer's end, passes run past an EOS), measured as T_alone / N - T_single; it is the answer's,
    so speculation does not shrink it (charged per round, as before 2026-12-04d, it over-predicted where rounds are
    saved and under-predicted where the champion alone wastes passes: bench/h200/results/2026-12-04d/prediction_gap.md).
    ahead_share: the share of the answer's tokens that came from runs ahead (rounds whose drafter found nothing: the
    n-gram drafter's, mostly), priced as plain decoding, T_single a token; the verify rounds make the rest.
    Returns (speedup, its parts)."""
    single = t["single_ms"]["median"]
    rnd = (t.get("round_ms") or {}).get(drafter, {}).get(str(k))
    if rnd is not None:
        t_round = rnd["median"]
    else:
        dr = (t.get("draft_ms") or {}).get(drafter)
        ve_g = verify_ms_at(t, g)
        if dr is None or ve_g is None:
            return None, {}
        t_round = g * dr["median"] + ve_g
    parts = {"t_single_ms": single, "t_round_ms": t_round, "t_overhead_ms": o_ms, "tau": tau,
             "proposals_per_round": g, "ahead_share": ahead_share}
    # time per token: a share of plain decoding, the rest in verify rounds of tau tokens each
    per_token = o_ms + ahead_share * single + (1.0 - ahead_share) * t_round / tau
    return (single + o_ms) / per_token, parts


def chain_pass_ms(t: dict) -> float:
    """A pass of plain decoding as the decode loop runs the champion alone on a device (runs ahead chained by
    continuations: timings' ahead_chain), else T_single: what chain predictions price plain decoding at."""
    return (t.get("ahead_chain") or {}).get("ms_per_token", t["single_ms"])["median"]


def predicted_chain_speedup(t: dict, tokens: float, ahead: float, rounds: float, g: float, o_ms: float,
                            k: int | None = None):
    """The same prediction for answers made by chains (the n-gram drafter's rounds made by the device, several a
    submission: py/exactspec/decode.py), which the device runs back to back with the host's turnaround hidden by
    continuations. Plain decoding costs a pass as the champion alone runs (chain_pass_ms: chained runs ahead; it was
    T_single, one run ahead with its own turnaround, before 2026-12-07b: 1.08-1.13x the chained pass, median 1.10, in
    that lease's 528 timings on an H100, bench/h200/results/2026-12-07b/README.md). A chain round at k costs the
    measured chain round (timings' chain_ms[k]: the device's lookup and step work with the pass, at the proposals the
    prompt offered there) with the rows of the answer's g proposals in place of those (g the mean per chain round;
    rows(g) = T_verify(g) - T_verify(0), both timed with their readback, so the difference is the rows'; T_verify
    interpolated as in predicted_speedup); where chain_ms was not measured, a pass plus rows(g). Tokens of runs ahead
    a pass each; O per token of the answer. tokens: the answer's tokens; ahead: those from runs ahead; rounds: chain
    rounds. Returns (speedup, its parts)."""
    single = chain_pass_ms(t)
    c = (t.get("chain_ms") or {}).get(str(k)) if k is not None else None
    ve_g = verify_ms_at(t, g)
    ve_c = verify_ms_at(t, c["proposals_per_round"]) if c else t["forward_ms"]["median"]
    if ve_g is None or ve_c is None or tokens <= 0:
        return None, {}
    # the rows' own cost, T_verify(g) - T_verify(0), added to a pass; or swapped for the timed round's
    t_round = c["ms_per_round"]["median"] - ve_c + ve_g if c else single + ve_g - t["forward_ms"]["median"]
    per_token = o_ms + (ahead * single + rounds * t_round) / tokens
    parts = {"t_single_ms": single, "t_chain_round_ms": t_round, "chain_round_measured": c is not None,
             "t_overhead_ms": o_ms, "proposals_per_round": g, "ahead_share": ahead / tokens, "chain_rounds": rounds}
    return (single + o_ms) / per_token, parts


def summarise(res: dict, a) -> list[dict]:
    recs = res["records"]
    timings = {(t["run"], t["stratum"], t["mode"], t["seed"]): t for t in res["timings"]}
    rows = []
    strata = list(dict.fromkeys(r["stratum"] for r in recs))
    for stratum in strata:
        for mode in a.modes:
            for c in spec_configs(a.drafters, a.ks, a.adaptives):
                per_run = []
                spec_all = []
                for run in range(a.runs):
                    sel = [r for r in recs if r["run"] == run and r["stratum"] == stratum and r["mode"] == mode]
                    spec = [r for r in sel if r["drafter"] == c["drafter"] and r["k"] == c["k"]
                            and r["adaptive"] == c["adaptive"]]
                    keys = {(r["prompt_id"], r["seed"]) for r in spec}
                    alone = [r for r in sel if r["drafter"] == "none" and (r["prompt_id"], r["seed"]) in keys]
                    if not spec or len(alone) != len(spec):
                        continue
                    spec_all += spec
                    ra, rs = _rate(alone), _rate(spec)
                    emitted = sum((r["tau"] or 0) * (r["target_passes"] or 0) for r in spec)
                    tp = sum(r["target_passes"] or 0 for r in spec)
                    tau = emitted / tp if tp else None
                    pred, parts = None, {}
                    t = timings.get((run, stratum, mode, spec[0]["seed"]))
                    rounds = sum(r["rounds"] or 0 for r in spec)
                    # tokens of runs ahead (rounds that verified nothing) and the verify rounds that made the rest
                    # (max 0: records made before 638d8b7 counted a chain's unused rounds as wasted passes too)
                    ahead = sum(max(0, (r.get("ahead_passes") or 0) - (r.get("wasted_passes") or 0)) for r in spec)
                    cr = sum(r.get("chain_rounds") or 0 for r in spec)      # rounds made by the device's chains
                    vr = rounds - ahead
                    # (no prediction in JSON mode: its passes read whole rows back and mask them, the timings'
                    #  passes are free text's)
                    if t and ra and tau and rounds and not c["adaptive"] and not any(r.get("json_mode") for r in spec):
                        o_ms = max(0.0, 1000.0 / ra - t["single_ms"]["median"])
                        if cr and cr >= vr:             # every verify round a chain's
                            pred, parts = predicted_chain_speedup(
                                t, emitted, ahead, cr, sum(r.get("chain_proposed") or 0 for r in spec) / cr,
                                max(0.0, 1000.0 / ra - chain_pass_ms(t)), c["k"])
                        elif vr <= 0:
                            pred, parts = 1.0, {"ahead_share": 1.0}     # nothing verified: plain decoding all along
                        elif emitted > ahead:
                            g = sum(r["proposed"] or 0 for r in spec) / vr
                            pred, parts = predicted_speedup(t, c["drafter"], c["k"], g, (emitted - ahead) / vr,
                                                            o_ms, ahead / emitted)
                    per_run.append({"run": run, "alone_tok_s": ra, "spec_tok_s": rs,
                                    "speedup": rs / ra if ra and rs else None, "tau": tau, "predicted": pred,
                                    "prediction": parts})
                if not per_run:
                    continue
                rounds = sum(r["rounds"] or 0 for r in spec_all)
                toks = sum(r["n_tokens"] for r in spec_all)
                rows.append({
                    "stratum": stratum, "mode": mode, **c, "runs": len(per_run),
                    "answers": len(spec_all),
                    "alone_tok_s": spread([p["alone_tok_s"] for p in per_run]),
                    "spec_tok_s": spread([p["spec_tok_s"] for p in per_run]),
                    "speedup": spread([p["speedup"] for p in per_run]),
                    "predicted": spread([p["predicted"] for p in per_run]),
                    "tau": spread([p["tau"] for p in per_run]),
                    "submissions_per_round": sum(r["submissions"] or 0 for r in spec_all) / rounds if rounds else None,
                    "readback_bytes_per_token": sum(r["readback_bytes"] or 0 for r in spec_all) / toks if toks else None,
                    "wasted_passes": sum(r["wasted_passes"] or 0 for r in spec_all),
                    "spec_disabled_rounds": sum(r["spec_disabled_rounds"] or 0 for r in spec_all),
                    "identical": all(r["identical"] for r in spec_all),
                    "per_run": per_run,
                })
    return rows


def by_stratum_mode(recs: list[dict], modes) -> list[tuple[str, str, list[dict]]]:
    """(stratum, mode, its records) for every stratum (in the records' order) and mode that has records."""
    groups = ((s, m, [r for r in recs if r["stratum"] == s and r["mode"] == m])
              for s in dict.fromkeys(r["stratum"] for r in recs) for m in modes)
    return [g for g in groups if g[2]]


def alone_rows(res: dict, a) -> list[dict]:
    """The champion alone per stratum and mode: tok/s, submissions per token, readback bytes per token."""
    out = []
    for stratum, mode, sel in by_stratum_mode([r for r in res["records"] if r["drafter"] == "none"], a.modes):
        toks = sum(r["n_tokens"] for r in sel)
        out.append({"stratum": stratum, "mode": mode,
                    "tok_s": spread([_rate([r for r in sel if r["run"] == run]) for run in range(a.runs)]),
                    "submissions_per_token": sum(r["submissions"] or 0 for r in sel) / toks if toks else None,
                    "readback_bytes_per_token": sum(r["readback_bytes"] or 0 for r in sel) / toks if toks else None,
                    "ahead_passes": sum(r["ahead_passes"] or 0 for r in sel),
                    "wasted_passes": sum(r["wasted_passes"] or 0 for r in sel)})
    return out


def ab_rows(res: dict, a) -> list[dict]:
    """The engine A/B (--ab-engine-opts) per stratum and mode: the champion alone's tok/s on each engine (per run,
    the stratum's tokens over its seconds), B / A per answer pair (the same prompt, run, mode and seed, made one
    right after the other), and whether every pair's tokens were the same."""
    out = []
    alone = [r for r in res["records"] if r["drafter"] == "none"]
    for stratum, mode, sel in by_stratum_mode([r for r in res.get("ab") or [] if r.get("a_tok_s")], a.modes):
        keys = {(r["run"], r["prompt_id"], r["seed"]) for r in sel}
        sel_a = [r for r in alone if r["stratum"] == stratum and r["mode"] == mode
                 and (r["run"], r["prompt_id"], r["seed"]) in keys]
        out.append({"stratum": stratum, "mode": mode, "pairs": len(sel),
                    "a_tok_s": spread([_rate([r for r in sel_a if r["run"] == run]) for run in range(a.runs)]),
                    "b_tok_s": spread([_rate([r for r in sel if r["run"] == run]) for run in range(a.runs)]),
                    "ratio": spread([r["tokens_per_s"] / r["a_tok_s"] for r in sel]),
                    "identical": all(r["identical"] for r in sel)})
    return out


def _f(s: dict | None, fmt: str = "{:.2f}") -> str:
    if not s:
        return "-"
    if s["n"] == 1 or s["min"] == s["max"]:
        return fmt.format(s["median"])
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}-{fmt.format(s['max'])}]"


def table(report: dict) -> str:
    m = report["meta"]
    lines = [f"bench product: host {m['host']}, backend {m['backend']} ({m.get('adapter_text') or 'no GPU'}), "
             f"{m['runs']} run(s), {m['max_new_tokens']} new tokens at most, prompts per stratum {m['per_stratum']}",
             f"command: {m['command']}", ""]
    cpu = next((x for x in ((m.get("boot") or {}).get("stages") or []) if x.get("stage") == "cpu"), None)
    if cpu and cpu.get("threads"):
        lines[0] += f", CPU kernel threads {cpu['threads']}" + (f" ({cpu['why']})" if cpu.get("why") else "")
    if m.get("json_mode"):
        lines.insert(2, f"JSON mode (each prompt's frozen schema, alone and with speculation): {', '.join(m['json_mode'])}")
    lines.append("champion alone (median [min-max] over runs of the stratum's tokens / seconds)")
    lines.append(f"{'stratum':<18} {'mode':<8} {'tok/s':<24} {'sub/token':>9} {'readback B/token':>16}")
    for r in report["alone"]:
        lines.append(f"{r['stratum']:<18} {r['mode']:<8} {_f(r['tok_s'], '{:.1f}'):<24} "
                     f"{r['submissions_per_token'] or 0:>9.2f} {r['readback_bytes_per_token'] or 0:>16.0f}")
    lines.append("")
    lines.append("speculation vs the champion alone, same process and run (speedup: median [min-max] over runs)")
    hdr = (f"{'stratum':<18} {'drafter':<7} {'k':>2} {'mode':<8} {'adapt':<5} {'alone tok/s':<22} "
           f"{'spec tok/s':<22} {'speedup':<20} {'predicted':<20} {'tau':<18} {'sub/rnd':>7} {'B/token':>8} ident")
    lines.append(hdr)
    for r in report["summary"]:
        lines.append(f"{r['stratum']:<18} {r['drafter']:<7} {r['k']:>2} {r['mode']:<8} "
                     f"{'on' if r['adaptive'] else 'off':<5} {_f(r['alone_tok_s'], '{:.1f}'):<22} "
                     f"{_f(r['spec_tok_s'], '{:.1f}'):<22} {_f(r['speedup']):<20} {_f(r['predicted']):<20} "
                     f"{_f(r['tau']):<18} {r['submissions_per_round'] or 0:>7.2f} "
                     f"{r['readback_bytes_per_token'] or 0:>8.0f} {'yes' if r['identical'] else 'NO'}")
    if report.get("ab_summary"):
        lines.append("")
        lines.append(f"engine A/B, the champion alone: A the engine above, B with {m['ab_engine_opts']} (a second host "
                     "in the same run; each pair one answer after the other, the order alternating by run)")
        lines.append(f"{'stratum':<18} {'mode':<8} {'A tok/s':<24} {'B tok/s':<24} {'B / A per pair':<22} ident")
        for r in report["ab_summary"]:
            lines.append(f"{r['stratum']:<18} {r['mode']:<8} {_f(r['a_tok_s'], '{:.1f}'):<24} "
                         f"{_f(r['b_tok_s'], '{:.1f}'):<24} {_f(r['ratio'], '{:.3f}'):<22} "
                         f"{'yes' if r['identical'] else 'no'}")
    if m.get("stopped"):
        lines.append("")
        lines.append(f"stopped early: {m['stopped']}")
    if report["errors"]:
        lines.append("")
        lines.append(f"{len(report['errors'])} request(s) failed, e.g.: {report['errors'][0]}")
    lines.append("")
    if report["answers"]:
        lines.append(f"identical: {'yes' if report['all_identical'] else 'NO'} "
                     f"({report['answers']} answers, every speculative answer vs the champion alone)")
    else:
        lines.append("identical: no speculative answer to compare (none was made)")
    return "\n".join(lines)


# ---- command line -------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python build.py bench product", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", choices=sorted(HOST_BACKENDS), default="chromium")
    ap.add_argument("--backend", default=None, help="chromium: cpu | webgpu (default cpu); node: opengl | vulkan | "
                                                    "cpu (default opengl)")
    ap.add_argument("--threads", type=int, default=None,
                    help="chromium, CPU fallback: the kernel's threads (the page's ?threads=; default its own choice)")
    ap.add_argument("--strata", default="all", help="comma list of workload strata, or all")
    ap.add_argument("--per-stratum", type=int, default=None, help="prompts per stratum (default 2)")
    ap.add_argument("--drafters", default="none,ngram,model",
                    help="comma list of none, ngram, model, head, grammar (JSON mode's own proposals: --json-mode)")
    ap.add_argument("--ks", default=None, help="comma list (default 1,2,3,4)")
    ap.add_argument("--modes", default="greedy", help="comma list of greedy, coupled")
    ap.add_argument("--seeds", default="0", help="comma list (coupled answers run once per seed)")
    ap.add_argument("--temperature", type=float, default=0.7, help="coupled mode's temperature")
    ap.add_argument("--runs", type=int, default=None, help="default 3 (>= 3 for figures)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="cap on each answer (default 64)")
    ap.add_argument("--head-copy", action=argparse.BooleanOptionalAction, default=None,
                    help="every answer with head_copy on / off (drafter head: the n-gram's copies first; default: the "
                         "product's setting, on); an A/B runs twice")
    ap.add_argument("--json-mode", action="store_true",
                    help="prompts with a frozen schema (strict JSON extraction) answer in JSON mode, alone and with "
                         "speculation")
    ap.add_argument("--adaptive", choices=list(ADAPTIVES), default="off",
                    help="speculation forced (off), 'only while it pays' (on), or both")
    ap.add_argument("--timing-reps", type=int, default=None, help="repetitions per pass timing (default 5)")
    ap.add_argument("--champion", default=str(CHAMPION))
    ap.add_argument("--draft", default=str(DRAFT))
    ap.add_argument("--head", default=str(HEAD), help="the draft head GGUF (drafter head)")
    ap.add_argument("--workload", default=str(WORKLOAD))
    ap.add_argument("--out", help="write the JSON report here")
    ap.add_argument("--table", help="write the text table here too")
    ap.add_argument("--quick", action="store_true",
                    help="a fast slice: 1 prompt per stratum, 1 run, 16 tokens, k 1 and 4 (unless given)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds: start no new stratum after this (the report covers what was done)")
    ap.add_argument("--node", default="node", help="node binary (host node)")
    ap.add_argument("--engine-opts", default=None, help="createEngine options as JSON (host node)")
    ap.add_argument("--ab-engine-opts", default=None,
                    help="host node: a second host whose engine also takes these createEngine options (JSON); every "
                         "champion-alone answer is made on both, one right after the other (the order alternating by "
                         "run), and the report gives B / A per stratum: engine options compared within one run")
    ap.add_argument("--redraw", default=None, metavar="REPORT.json[.gz]",
                    help="summarise an earlier run's report again with this code (its answers and timings) and print "
                         "its table (--table writes it too); nothing runs")
    a = ap.parse_args(argv)
    defaults = {"per_stratum": 2, "runs": 3, "max_new_tokens": 64, "ks": "1,2,3,4", "timing_reps": 5}
    for key, v in (QUICK if a.quick else defaults).items():
        if getattr(a, key) is None:
            setattr(a, key, v)
    for key, v in defaults.items():
        if getattr(a, key) is None:
            setattr(a, key, v)
    a.backend = a.backend or HOST_BACKENDS[a.host][0]
    if a.backend not in HOST_BACKENDS[a.host]:
        ap.error(f"--backend for host {a.host} must be one of {', '.join(HOST_BACKENDS[a.host])}")

    def ints(name, s, lo):
        try:
            xs = [int(x) for x in str(s).split(",") if x.strip()]
        except ValueError:
            ap.error(f"--{name}: a comma list of whole numbers, got {s!r}")
        if not xs or any(x < lo for x in xs):
            ap.error(f"--{name}: every value must be at least {lo}")
        return xs
    a.ks = ints("ks", a.ks, 1)
    a.seeds = ints("seeds", a.seeds, 0)
    a.drafters = [d.strip() for d in a.drafters.split(",") if d.strip()]
    bad = [d for d in a.drafters if d not in BENCH_DRAFTERS]
    if bad or not a.drafters:
        ap.error(f"--drafters: each must be one of {', '.join(BENCH_DRAFTERS)} (got {a.drafters})")
    if "grammar" in a.drafters and not a.json_mode:
        ap.error("--drafters grammar (JSON mode's own proposals) needs --json-mode")
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not a.modes or any(m not in MODES for m in a.modes):
        ap.error(f"--modes: each must be one of {', '.join(MODES)}")
    for name in ("per_stratum", "runs", "max_new_tokens", "timing_reps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if not (0 < a.temperature <= 10):
        ap.error("--temperature must be in (0, 10]")
    a.adaptives = ADAPTIVES[a.adaptive]
    a.json_formats = {}          # prompt id -> response_format (--json-mode)
    if a.json_mode:
        a.json_formats = {pid: {"type": "json_schema", "schema": sch}
                          for pid, sch in json.loads(SCHEMAS.read_text())["workload"].items()}
    for p in (a.champion, a.workload) + ((a.draft,) if "model" in a.drafters else ()) + \
            ((a.head,) if "head" in a.drafters else ()):
        if not Path(p).is_file():
            ap.error(f"{p} does not exist")
    for flag, v in (("--engine-opts", a.engine_opts), ("--ab-engine-opts", a.ab_engine_opts)):
        if v:
            try:
                if not isinstance(json.loads(v), dict):
                    raise ValueError("not an object")
            except ValueError as e:
                ap.error(f"{flag} must be a JSON object ({e})")
    if a.ab_engine_opts and a.host != "node":
        ap.error("--ab-engine-opts needs --host node (a second host beside the first)")
    return a


def select_items(a) -> list[dict]:
    items = load_workload(a.workload)
    have = list(dict.fromkeys(it["stratum"] for it in items))
    want = have if a.strata == "all" else [s.strip() for s in a.strata.split(",") if s.strip()]
    unknown = [s for s in want if s not in have]
    if unknown:
        raise SystemExit(f"error: unknown strata {unknown}; the workload has {', '.join(have)}")
    return [it for s in want for it in [x for x in items if x["stratum"] == s][: a.per_stratum]]


def machine() -> dict:
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"node": platform.node(), "platform": platform.platform(), "cpu": cpu, "cpus": os.cpu_count(),
            "python": platform.python_version()}


def git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def boot_host(a, t0: float):
    """(host, boot seconds) with the boot said, or (None, None) with why it failed said (bench matrix boots the same)."""
    try:
        host = open_host(a)
    except (HostError, OSError) as e:
        print(f"error: could not start the {a.host} host: {e}", file=sys.stderr)
        return None, None
    boot_s = time.perf_counter() - t0
    info = host.info
    progress(f"booted in {boot_s:.1f} s: backend {info.get('backend')}, adapter "
             f"{(info.get('adapter') or {}).get('description') or (info.get('adapter') or {}).get('device') or '-'}")
    return host, boot_s


def artifact_sha256s(a) -> dict:
    """sha256 of every file the run's answers depend on (the report's artifacts; bench matrix takes the same)."""
    return {"champion": sha256(Path(a.champion)), "workload": sha256(Path(a.workload)),
            "draft": sha256(Path(a.draft)) if "model" in a.drafters else None,
            "head": sha256(Path(a.head)) if "head" in a.drafters else None}


def build_report(res: dict, a, info: dict, argv, t0: float, boot_s: float) -> dict:
    adapter = info.get("adapter") or {}
    meta = {
        "command": " ".join(["python build.py bench product"] + (sys.argv[1:] if argv is None else list(argv))),
        "host": a.host, "backend": a.backend, "backend_active": info.get("backend"), "adapter": adapter,
        "adapter_text": adapter.get("description") or adapter.get("device") or None,
        "boot": {"wall_s": boot_s, "stages": info.get("stages")},
        "versions": {"node": info.get("node"), "pyodide": info.get("pyodide"), "chromium": info.get("chromium")},
        "machine": machine(), "git_commit": git_commit(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - (time.perf_counter() - t0))),
        "wall_s": time.perf_counter() - t0, "stopped": res.get("stopped"),
        "artifacts": {"champion": {"path": a.champion, "sha256": a.sha["champion"]},
                      "draft": ({"path": a.draft, "sha256": a.sha["draft"]} if "model" in a.drafters else None),
                      "head": ({"path": a.head, "sha256": a.sha["head"]} if "head" in a.drafters else None),
                      "workload": {"path": a.workload, "sha256": a.sha["workload"]}},
        "strata": list(dict.fromkeys(i["stratum"] for i in a.items)), "prompts": [i["id"] for i in a.items],
        "per_stratum": a.per_stratum, "drafters": a.drafters, "ks": a.ks, "modes": a.modes, "seeds": a.seeds,
        "temperature": a.temperature, "runs": a.runs, "max_new_tokens": a.max_new_tokens, "adaptive": a.adaptive,
        "head_copy": DEFAULTS["head_copy"] if a.head_copy is None else a.head_copy,
        "json_mode": sorted(i["id"] for i in a.items if i["id"] in a.json_formats),
        "timing_reps": a.timing_reps, "deadline_s": a.deadline,
        "engine_opts": json.loads(a.engine_opts) if getattr(a, "engine_opts", None) else None,
        "ab_engine_opts": json.loads(a.ab_engine_opts) if getattr(a, "ab_engine_opts", None) else None,
        "ab_adapter": getattr(a, "ab_info", {}).get("adapter"),
    }
    spec_recs = [r for r in res["records"] if r["drafter"] != "none"]
    return {"meta": meta, **res, "alone": alone_rows(res, a), "summary": summarise(res, a), "ab_summary": ab_rows(res, a),
            "answers": len(spec_recs), "all_identical": all(r["identical"] for r in spec_recs)}


def write_report(report: dict, a) -> str:
    text = table(report)
    if a.out:
        tmp = Path(str(a.out) + ".part")
        tmp.write_text(json.dumps(report, indent=1))
        os.replace(tmp, a.out)
    if a.table:
        Path(a.table).write_text(text + "\n")
    return text


def redraw(path: str, table_out: str | None) -> int:
    """The table of an earlier report, its summary computed again by this code (bench product --redraw)."""
    import gzip
    from types import SimpleNamespace
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rep = json.load(f)
    m = rep["meta"]
    for r in rep["records"]:            # (records made before they said so: the meta's list of JSON-mode prompts)
        if r["prompt_id"] in (m.get("json_mode") or ()):
            r["json_mode"] = True
    a = SimpleNamespace(modes=m["modes"], drafters=m["drafters"], ks=m["ks"], runs=m["runs"],
                        adaptives=ADAPTIVES[m["adaptive"]])
    rep["summary"], rep["alone"], rep["ab_summary"] = summarise(rep, a), alone_rows(rep, a), ab_rows(rep, a)
    m["command"] += f"  (summarised again: python build.py bench product --redraw {path})"
    text = table(rep)
    print(text)
    if table_out:
        Path(table_out).write_text(text + "\n")
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.redraw:
        return redraw(a.redraw, a.table)
    a.items = select_items(a)
    a.sha = artifact_sha256s(a)
    progress(f"{len(a.items)} prompt(s) in {len(dict.fromkeys(i['stratum'] for i in a.items))} strata; host "
             f"{a.host} ({a.backend}); drafters {a.drafters}, k {a.ks}, modes {a.modes}, runs {a.runs}")
    t0 = time.perf_counter()
    host, boot_s = boot_host(a, t0)
    if host is None:
        return 2
    info = host.info
    host_b = None
    if a.ab_engine_opts:
        try:
            host_b = open_host_b(a)
        except (HostError, OSError) as e:
            host.close()
            print(f"error: could not start the second host (--ab-engine-opts): {e}", file=sys.stderr)
            return 2
        a.ab_info = host_b.info
        progress(f"engine B booted: {a.ab_engine_opts}")
    try:   # the report so far is written after every stratum: a run cut short still leaves its figures
        res = run_bench(host, a.items, a,
                        checkpoint=lambda r: write_report(build_report(r, a, info, argv, t0, boot_s), a), host_b=host_b)
    finally:
        host.close()
        if host_b is not None:
            host_b.close()
    report = build_report(res, a, info, argv, t0, boot_s)
    print(write_report(report, a))
    if a.out:
        progress(f"wrote {a.out}")
    if res["errors"]:
        return 2
    return 0 if report["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
