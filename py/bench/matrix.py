"""The preregistered bench matrix (issue 15): bench/matrix/spec.json's workload matrix through the real product, written
as DIR/matrix.json and a self-contained DIR/report.html with plots.

    python build.py bench matrix [--subset full|panel|gpu] [--host chromium|node] [--backend cpu|webgpu|opengl|vulkan]
        [--strata A,B|all] [--drafters none,ngram,model[,head]] [--ks 2,4] [--per-stratum N] [--runs N]
        [--max-new-tokens N] [--modes greedy,coupled] [--seeds 0] [--head HEAD.gguf] [--champion GGUF] [--draft GGUF]
        [--out DIR] [--deadline S] [--node PATH] [--engine-opts JSON]
    python build.py bench matrix --redraw DIR      (report.html again from DIR/matrix.json, e.g. after a device run)
    python build.py bench matrix --subset S --host H --backend B --ttft-into DIR   (only the cold-TTFT phase, added
        to DIR/matrix.json of a run of the same subset, host and backend that stopped before it; a named departure)

The answers come from py/bench/product.py's hosts and loop (no other harness): `--host chromium` is the real page in
headless Chromium (`--backend cpu` = the CPU fallback, `webgpu` = Chromium's WebGPU), `--host node` the worker's own
core (app/core.js) under Node with Dawn (`--backend vulkan` on a GPU host: the only way the product reaches an H200).
The subset (default full) fixes strata, prompts per stratum, drafters, k, modes, seeds, temperature, answer cap, runs,
pass-timing repetitions and the cold time-to-first-token phase; any option given here that changes it is recorded
in the report as a departure from the preregistered matrix. The drafter 'head' (a draft head on the champion's
features) is taken where bench product takes it (`--head FILE` is handed to it).

Writes DIR/matrix.json (spec + sha256, meta: machine, adapter, versions, artifacts' sha256; every answer record, the
cold-TTFT records, warm-ups, pass timings, memory samples, the summary and figures of exactspec.benchmatrix, and
bench product's own summary of the same answers with the break-even prediction), DIR/report.html, and bench
product's report of the same answers: DIR/product.json and DIR/product.txt. The files are rewritten after every run
of every stratum, so a run cut short leaves its figures. Progress (with time left) on stderr.
Exit status: 0; 1 if any speculative answer differed from the champion alone's; 2 if a request failed.
Default DIR: build/matrix/<subset>-<host>-<backend>.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from bench import product  # noqa: E402
from bench.matrix_report import render  # noqa: E402
from exactspec import benchmatrix as bm  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402

SPEC = ROOT / "bench" / "matrix" / "spec.json"


def progress(msg: str) -> None:
    print(f"[matrix] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python build.py bench matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--subset", default="full", help="the spec's subset: panel, full or gpu (default full)")
    ap.add_argument("--spec", default=str(SPEC), help=argparse.SUPPRESS)
    ap.add_argument("--host", choices=sorted(product.HOST_BACKENDS), default="chromium")
    ap.add_argument("--backend", default=None, help="chromium: cpu | webgpu (default cpu); node: opengl | vulkan | cpu")
    ap.add_argument("--strata", default=None, help="comma list (default: the subset's)")
    ap.add_argument("--per-stratum", type=int, default=None)
    ap.add_argument("--drafters", default=None, help="comma list starting with none (default: the subset's)")
    ap.add_argument("--ks", default=None, help="comma list of k (default: the subset's)")
    ap.add_argument("--modes", default=None)
    ap.add_argument("--seeds", default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--timing-reps", type=int, default=None, help="0: no pass timings (no predicted speedup)")
    ap.add_argument("--no-ttft", action="store_true", help="skip the cold time-to-first-token phase")
    ap.add_argument("--champion", default=str(product.CHAMPION))
    ap.add_argument("--draft", default=str(product.DRAFT))
    ap.add_argument("--head", default=None, help="a draft head GGUF for drafter 'head' (handed to bench product)")
    ap.add_argument("--workload", default=str(product.WORKLOAD))
    ap.add_argument("--out", default=None, help="output folder (default build/matrix/<subset>-<host>-<backend>)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds: start no new stratum (nor cold-TTFT run) after this; the report says where it stopped")
    ap.add_argument("--node", default="node")
    ap.add_argument("--engine-opts", default=None)
    ap.add_argument("--redraw", default=None, metavar="DIR", help="only redraw DIR/report.html from DIR/matrix.json")
    ap.add_argument("--ttft-into", default=None, metavar="DIR",
                    help="only the cold-TTFT phase, added to DIR/matrix.json: a run of the same subset, host and "
                         "backend that stopped before that phase (a departure the report names)")
    a = ap.parse_args(argv)
    if a.redraw:
        return a
    spec, sha = bm.load_spec(a.spec)
    if a.subset not in spec["subsets"]:
        ap.error(f"--subset must be one of {', '.join(spec['subsets'])}")
    sub = dict(spec["subsets"][a.subset])
    departures = []

    def override(key, value, conv):
        if value is None:
            return
        v = conv(value)
        if v != sub[key]:
            departures.append(f"{key} {v} instead of {sub[key]}")
            sub[key] = v
    lst = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    ints = lambda s: [int(x) for x in lst(s)]  # noqa: E731
    override("strata", a.strata, lambda s: "all" if s == "all" else lst(s))
    override("per_stratum", a.per_stratum, int)
    if a.drafters is not None:
        want = lst(a.drafters)
        pre = sub["drafters"]
        if want == pre + ["head"]:
            departures.append("drafter 'head' added (an optional drafter of the spec)")
        elif want != pre:
            departures.append(f"drafters {want} instead of {pre}")
        sub["drafters"] = want
    override("ks", a.ks, ints)
    override("modes", a.modes, lst)
    override("seeds", a.seeds, ints)
    override("runs", a.runs, int)
    override("max_new_tokens", a.max_new_tokens, int)
    override("timing_reps", a.timing_reps, int)
    if a.no_ttft and sub.get("ttft"):
        departures.append("no cold time-to-first-token phase")
        sub["ttft"] = None
    try:
        bm.check_subset(sub, a.subset)
    except ValueError as e:
        ap.error(str(e))
    if a.deadline:
        departures.append(f"deadline {a.deadline:g} s")
    a.spec_doc, a.spec_sha, a.sub, a.departures = spec, sha, sub, departures
    a.backend = a.backend or product.HOST_BACKENDS[a.host][0]
    a.out = Path(a.out or ROOT / "build" / "matrix" / f"{a.subset}-{a.host}-{a.backend}")
    return a


def product_args(a) -> argparse.Namespace:
    """bench product's own options for this matrix (its parser checks them: drafters, files, backends)."""
    s = a.sub
    items = bm.select_items(load_workload(a.workload), s)
    strata = list(dict.fromkeys(it["stratum"] for it in items))
    argv = ["--host", a.host, "--backend", a.backend, "--strata", ",".join(strata),
            "--per-stratum", str(s["per_stratum"]), "--drafters", ",".join(s["drafters"]),
            "--ks", ",".join(map(str, s["ks"])), "--modes", ",".join(s["modes"]),
            "--seeds", ",".join(map(str, s["seeds"])), "--temperature", str(s["temperature"]),
            "--runs", str(s["runs"]), "--max-new-tokens", str(s["max_new_tokens"]), "--adaptive", "off",
            "--timing-reps", str(max(1, int(s["timing_reps"]))), "--champion", a.champion, "--draft", a.draft,
            "--workload", a.workload, "--node", a.node]
    if a.engine_opts:
        argv += ["--engine-opts", a.engine_opts]
    if a.deadline:
        argv += ["--deadline", str(a.deadline)]
    if a.head:
        argv += ["--head", a.head]
    try:
        pa = product.parse_args(argv)
    except SystemExit:
        hint = (" (bench product in this tree does not take --head: the draft head's host support is not merged)"
                if a.head else "")
        raise SystemExit(f"error: bench product refused the matrix's options{hint}")
    if "head" in s["drafters"] and not getattr(pa, "head", None):
        raise SystemExit("error: drafter 'head' needs --head HEAD.gguf")
    pa.items = items
    pa.sha = product.artifact_sha256s(pa)      # with the head's (the H200 run of 2026-12-02 failed on its absence)
    assert [it["id"] for it in product.select_items(pa)] == [it["id"] for it in items]
    return pa


class Timed:
    """A product host whose pass timings can be switched off (timing_reps 0: the page panel's subset)."""

    def __init__(self, host, timings: bool):
        self.host, self.do_timings = host, timings

    def generate(self, params):
        return self.host.generate(params)

    def timings(self, params):
        return self.host.timings(params) if self.do_timings else {"skipped": True}


def host_memory(host) -> dict | None:
    try:
        if isinstance(host, product.ChromiumHost):
            return host.page.evaluate("exactspec.memory()")
        return host.request("memory", {})
    except Exception as e:            # an older core without the memory request: the report says so
        progress(f"memory report unavailable: {str(e).splitlines()[0][:200]}")
        return None


def cold_ttft(host, items, a, pa, t_start, log=progress) -> tuple[list, list]:
    """The cold time-to-first-token phase (spec procedure): per run, the champion alone and each drafter at ttft.k,
    every prompt once in the workload's order (each answer pays its own prefill); the order of the settings rotates
    by run. Returns (records, errors)."""
    t = a.sub.get("ttft")
    items = bm.ttft_items(items, a.sub)
    runs = bm.ttft_runs(a.sub)
    if not t or not items:
        return [], []
    settings = [("none", 0)] + [(d, int(t["k"])) for d in a.sub["drafters"] if d != "none"]
    seed = int(a.sub["seeds"][0])
    recs, errors = [], []
    n_total = runs * len(settings) * len(items)
    done = 0
    t0 = time.perf_counter()
    for run in range(runs):
        if a.deadline and time.perf_counter() - t_start > a.deadline:
            log(f"deadline reached: cold-TTFT runs {run + 1}..{runs} skipped")
            break
        shift = run % len(settings)
        order = settings[shift:] + settings[:shift]
        group = []
        for d, k in order:
            for it in items:
                max_new = min(int(it["max_new_tokens"]), int(t["max_new_tokens"]))
                where = {"run": run, "stratum": it["stratum"], "prompt_id": it["id"], "mode": "greedy", "seed": seed,
                         "max_new_tokens": max_new, "drafter": d, "k": k, "adaptive": False, "phase": "ttft"}
                try:
                    out = host.generate({"chat": workload_messages(it), "max_new_tokens": max_new,
                                         **bm.mode_settings("greedy", seed, 0.0), "drafter": d, "k": k,
                                         "adaptive": False})
                except product.HostError as e:
                    errors.append({**where, "what": "ttft", "error": str(e)})
                    log(f"cold ttft {it['id']} {d}: {e}")
                    continue
                group.append(product.record(out, **where))
                done += 1
                el = time.perf_counter() - t0
                log(f"cold TTFT run {run + 1}/{runs}, {bm.config_name(d, k)}, {it['id']} "
                    f"({group[-1]['prompt_tokens']} prompt tokens): {group[-1]['ttft_ms'] or 0:.0f} ms "
                    f"[{done}/{n_total}, {el:.0f} s, ~{el / max(done, 1) * (n_total - done):.0f} s left]")
        alone = {r["prompt_id"]: r["token_ids"] for r in group if r["drafter"] == "none"}
        for r in group:
            r["identical"] = None if r["drafter"] == "none" else (
                r["token_ids"] == alone[r["prompt_id"]] if r["prompt_id"] in alone else None)
        recs += group
    return recs, errors


def load_average() -> list | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def build_doc(a, pa, info, res, cold, cold_err, memory, t0, boot_s, argv) -> tuple[dict, dict]:
    """(the matrix document, bench product's report of the same answers)."""
    pres = dict(res, timings=[t for t in res["timings"] if not t.get("skipped")])
    prep = product.build_report(pres, pa, info, argv, t0, boot_s)
    command = " ".join(["python build.py bench matrix"] + (sys.argv[1:] if argv is None else list(argv)))
    prep["meta"]["command"] = command + "   (bench product's report of the matrix's answers)"
    meta = dict(prep["meta"], command=command, load_average={"start": a.load_start, "end": load_average()},
                artifacts=a.artifacts)
    doc = {
        "kind": "exactspec.bench_matrix", "schema": 1,
        "spec": {"path": os.path.relpath(a.spec, ROOT), "name": a.spec_doc["name"], "version": a.spec_doc["version"],
                 "sha256": a.spec_sha, "subset": a.subset, "definition": a.sub, "departures": a.departures,
                 "procedure": a.spec_doc.get("procedure")},
        "meta": meta,
        "records": res["records"], "ttft": cold, "warmups": res["warmups"], "timings": pres["timings"],
        "errors": res["errors"] + cold_err, "memory": memory,
        "product": {"alone": prep["alone"], "summary": prep["summary"], "answers": prep["answers"],
                    "all_identical": prep["all_identical"]},
    }
    doc["summary"] = bm.summarise(doc)
    doc["figures"] = bm.figures(doc, doc["summary"])
    return doc, prep


def artifacts(a, pa) -> dict:
    def art(p, sha=None):
        p = Path(p)
        return {"file": p.name, "size": p.stat().st_size, "sha256": sha or product.sha256(p)}
    from exactspec_build.wheel import build_exactspec_wheel
    out = {"champion": art(pa.champion, pa.sha["champion"]), "workload": art(pa.workload, pa.sha["workload"]),
           "spec": art(a.spec, a.spec_sha)}
    if pa.sha.get("draft"):
        out["draft"] = art(pa.draft, pa.sha["draft"])
    if pa.sha.get("head"):
        out["head"] = art(pa.head, pa.sha["head"])
    try:
        out["exactspec wheel"] = art(build_exactspec_wheel())
    except Exception:
        pass
    return out


def write(doc: dict, out: Path, prep: dict | None = None) -> None:
    """DIR/matrix.json, DIR/report.html and (with bench product's report) DIR/product.json, DIR/product.txt."""
    out.mkdir(parents=True, exist_ok=True)
    files = [("matrix.json", json.dumps(doc, indent=1)), ("report.html", render(doc))]
    if prep is not None:
        files += [("product.json", json.dumps(prep, indent=1)), ("product.txt", product.table(prep) + "\n")]
    for name, text in files:
        tmp = out / (name + ".part")
        tmp.write_text(text)
        os.replace(tmp, out / name)


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.redraw:
        d = Path(a.redraw)
        doc = json.loads((d / "matrix.json").read_text())
        doc["summary"] = bm.summarise(doc)
        doc["figures"] = bm.figures(doc, doc["summary"])
        (d / "report.html").write_text(render(doc))
        (d / "matrix.json").write_text(json.dumps(doc, indent=1))
        progress(f"redrew {d / 'report.html'}")
        return 0
    if a.ttft_into:
        return ttft_into(a, argv)
    want = a.spec_doc["workload"]["sha256"]
    got = product.sha256(Path(a.workload))
    if got != want:
        print(f"error: the workload {a.workload} has sha256 {got}, the preregistered matrix names {want}",
              file=sys.stderr)
        return 2
    pa = product_args(a)
    a.load_start = load_average()
    a.artifacts = artifacts(a, pa)
    s = a.sub
    groups = bm.mode_groups(s)
    n_cfg = 1 + len([d for d in s["drafters"] if d != "none"]) * len(s["ks"])
    n_ans = s["runs"] * len(pa.items) * len(groups) * n_cfg
    n_ttft = bm.ttft_runs(s) * len(s["drafters"]) * len(bm.ttft_items(pa.items, s))
    progress(f"spec {a.spec_doc['name']} v{a.spec_doc['version']} (sha256 {a.spec_sha[:16]}...), subset {a.subset}"
             + (f", departures: {'; '.join(a.departures)}" if a.departures else ", as preregistered"))
    progress(f"{len(pa.items)} prompt(s) in {len(dict.fromkeys(i['stratum'] for i in pa.items))} strata; "
             f"{n_ans} measured answers + {len(pa.items) * s['runs']} warm-ups + {n_ttft} cold-TTFT answers; host "
             f"{a.host} ({a.backend}); out {a.out}")
    t0 = time.perf_counter()
    host, boot_s = product.boot_host(pa, t0)
    if host is None:
        return 2
    info = host.info
    memory = []

    def sample(what):
        m = host_memory(host)
        if m is not None:
            memory.append({"after": what, "t_s": round(time.perf_counter() - t0, 2), **m})

    sample("boot")
    state = {"cold": [], "cold_err": []}

    def checkpoint(res):
        last = res["records"][-1] if res["records"] else None
        sample(f"{last['stratum']} run {last['run'] + 1}" if last else "start")
        doc, prep = build_doc(a, pa, info, res, state["cold"], state["cold_err"], memory, t0, boot_s, argv)
        write(doc, a.out, prep)
    try:
        t_bench = time.perf_counter()      # bench product's deadline counts from here; so does the cold phase's
        res = product.run_bench(Timed(host, int(s["timing_reps"]) > 0), pa.items, pa, checkpoint=checkpoint)
        if res.get("stopped"):
            progress(res["stopped"])
        cold, cold_err = cold_ttft(host, pa.items, a, pa, t_bench)
        state.update(cold=cold, cold_err=cold_err)
        sample("cold TTFT")
    finally:
        host.close()
    doc, prep = build_doc(a, pa, info, res, cold, cold_err, memory, t0, boot_s, argv)
    write(doc, a.out, prep)
    print(product.table(prep))
    sm = doc["summary"]
    for stratum, e in sm["exactness"].items():
        if e["failed"]:
            progress(f"EXACTNESS FAILED in {stratum}: {'; '.join(e['failed'])}")
    progress(f"wrote {a.out / 'matrix.json'}, {a.out / 'report.html'}, {a.out / 'product.json'}, "
             f"{a.out / 'product.txt'} ({(time.perf_counter() - t0) / 60:.1f} min; identical: "
             f"{'yes' if sm['all_identical'] else 'NO'})")
    if doc["errors"]:
        return 2
    return 0 if sm["all_identical"] else 1


def ttft_target_problem(doc: dict, a) -> str | None:
    """Why DIR/matrix.json cannot take this run's cold-TTFT phase (None: it can)."""
    if doc.get("kind") != "exactspec.bench_matrix":
        return "it is not a bench matrix report"
    if doc["spec"]["sha256"] != a.spec_sha or doc["spec"]["subset"] != a.subset:
        return (f"it is subset {doc['spec']['subset']!r} of spec {doc['spec']['sha256'][:12]}..., this run subset "
                f"{a.subset!r} of {a.spec_sha[:12]}...")
    if doc["spec"].get("definition") != a.sub:
        return "its subset definition differs from this run's (other strata, drafters, k, ... on the command line)"
    if (doc["meta"].get("host"), doc["meta"].get("backend")) != (a.host, a.backend):
        return f"it ran on {doc['meta'].get('host')} ({doc['meta'].get('backend')}), this run on {a.host} ({a.backend})"
    if doc.get("ttft"):
        return f"it has its cold-TTFT phase already ({len(doc['ttft'])} answers)"
    if not bm.ttft_runs(a.sub):
        return "the subset has no cold-TTFT phase"
    return None


def merge_ttft(doc: dict, cold: list, errors: list, command: str, load: dict) -> dict:
    """doc with the cold-TTFT records of a separate run: the phase, its errors, the departure named, the summary and
    figures recomputed."""
    doc = dict(doc)
    doc["ttft"] = cold
    doc["errors"] = list(doc.get("errors", [])) + list(errors)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    doc["spec"] = dict(doc["spec"], departures=list(doc["spec"].get("departures", [])) + [
        f"the cold-TTFT phase ran separately ({when}, `{command}`) and was added to the measured phase's report"])
    doc["meta"] = dict(doc["meta"], ttft_phase={"command": command, "date": when, "load_average": load})
    doc["summary"] = bm.summarise(doc)
    doc["figures"] = bm.figures(doc, doc["summary"])
    return doc


def ttft_into(a, argv) -> int:
    d = Path(a.ttft_into)
    try:
        doc = json.loads((d / "matrix.json").read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot read {d / 'matrix.json'}: {e}", file=sys.stderr)
        return 2
    why = ttft_target_problem(doc, a)
    if why:
        print(f"error: {d / 'matrix.json'}: {why}", file=sys.stderr)
        return 2
    pa = product_args(a)
    load = {"start": load_average()}
    t0 = time.perf_counter()
    host, _boot = product.boot_host(pa, t0)
    if host is None:
        return 2
    try:
        cold, cold_err = cold_ttft(host, pa.items, a, pa, time.perf_counter())
    finally:
        host.close()
    load["end"] = load_average()
    command = " ".join(["python build.py bench matrix"] + (sys.argv[1:] if argv is None else list(argv)))
    doc = merge_ttft(doc, cold, cold_err, command, load)
    write(doc, d)
    progress(f"added {len(cold)} cold-TTFT answers to {d / 'matrix.json'} and redrew {d / 'report.html'} "
             f"({(time.perf_counter() - t0) / 60:.1f} min; {len(cold_err)} errors)")
    ok = all(r.get("identical") is not False for r in cold)
    return 2 if cold_err else (0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
