"""The preregistered bench matrix (bench/matrix/spec.json) and exactspec.benchmatrix's summary and figures, in CPython:
the spec's subsets, prompt selection, the summary against bench product's own (same records, same speedups), the
exactness marks, and the report's SVG drawn from the figures' numbers."""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))

from exactspec import benchmatrix as bm  # noqa: E402

SPEC = ROOT / "bench" / "matrix" / "spec.json"


def test_spec_is_frozen_to_the_workload_and_its_subsets_are_valid():
    spec, sha = bm.load_spec(SPEC)
    assert sha == hashlib.sha256(SPEC.read_bytes()).hexdigest()
    wl = ROOT / spec["workload"]["path"]
    assert hashlib.sha256(wl.read_bytes()).hexdigest() == spec["workload"]["sha256"]
    assert {"panel", "full", "gpu"} <= set(spec["subsets"])
    items = [json.loads(x) for x in wl.read_text().splitlines() if x.strip()]
    strata = list(dict.fromkeys(it["stratum"] for it in items))
    for name, sub in spec["subsets"].items():
        chosen = bm.select_items(items, sub)
        assert [it["stratum"] for it in chosen] == [s for s in strata for _ in range(sub["per_stratum"])], name
    # the page's subset is the full matrix's greedy cells (its prompts, drafters, k, tokens)
    p, f = spec["subsets"]["panel"], spec["subsets"]["full"]
    assert p["drafters"] == f["drafters"] and p["ks"] == f["ks"] and p["max_new_tokens"] == f["max_new_tokens"]
    assert set(p["modes"]) <= set(f["modes"]) and p["per_stratum"] <= f["per_stratum"]


@pytest.mark.parametrize("bad, why", [
    ({"drafters": ["ngram"]}, "start with 'none'"), ({"ks": [0]}, "ks"), ({"modes": ["sampled"]}, "modes"),
    ({"runs": 0}, "runs"), ({"ttft": {"k": 2, "max_new_tokens": 1}}, "ttft"), ({"strata": []}, "strata")])
def test_check_subset_refuses(bad, why):
    spec, _ = bm.load_spec(SPEC)
    sub = {**spec["subsets"]["full"], **bad}
    with pytest.raises(ValueError, match=why):
        bm.check_subset(sub)


def fake_records(identical=lambda r: True):
    """Two runs x two strata x (greedy, coupled) x (alone, ngram k=2, model k=2) with known times."""
    recs = []
    for run in range(2):
        for stratum, pid in (("repetitive", "rep-01"), ("casual_chat", "chat-01")):
            for mode in ("greedy", "coupled"):
                for d, k, ms, tp, dp in (("none", 0, 1000.0, 20, 0), ("ngram", 2, 800.0 + 100 * run, 12, 0),
                                         ("model", 2, 1200.0, 10, 20)):
                    r = {"run": run, "stratum": stratum, "prompt_id": pid, "mode": mode, "seed": 0, "drafter": d,
                         "k": k, "adaptive": False, "n_tokens": 20, "elapsed_ms": ms, "tokens_per_s": 20 / ms * 1000,
                         "ttft_ms": 50.0 + k, "tau": 20 / tp, "rounds": tp, "target_passes": tp, "draft_passes": dp,
                         "proposed": 2 * tp if d != "none" else 0, "accepted": 8, "token_ids": [1] * 20,
                         "acceptance_by_position": [0.5, 0.25] if d != "none" else [], "submissions": tp,
                         "readback_bytes": 0, "wasted_passes": 0, "spec_disabled_rounds": 0, "max_new_tokens": 20}
                    r["identical"] = None if d == "none" else identical(r)
                    recs.append(r)
    return recs


def test_summary_matches_bench_product_and_the_figures_carry_its_numbers():
    from bench.product import summarise as product_summarise
    from types import SimpleNamespace
    recs = fake_records()
    cold = [dict(r, phase="ttft", ttft_ms=100.0 + 10 * r["k"], prompt_tokens=40) for r in recs if r["mode"] == "greedy"]
    mem = [{"models": {"champion": {"backend": "cpu", "weights": 100, "kv": 10, "features": 5, "scratch": 1,
                                    "total": 116}}, "wasm_heap": 1000},
           {"models": {"champion": {"backend": "cpu", "weights": 100, "kv": 30, "features": 5, "scratch": 1,
                                    "total": 136}}, "wasm_heap": 2000}]
    doc = {"records": recs, "ttft": cold, "memory": mem}
    s = bm.summarise(doc)
    a = SimpleNamespace(drafters=["none", "ngram", "model"], ks=[2], adaptives=[False], modes=["greedy", "coupled"],
                        runs=2)
    prod = {(r["stratum"], r["mode"], r["drafter"], r["k"]): r for r in product_summarise({"records": recs,
                                                                                         "timings": []}, a)}
    rows = {(r["stratum"], r["mode"], r["drafter"], r["k"]): r for r in s["rows"]}
    for key, pr in prod.items():
        assert rows[key]["speedup"] == pytest.approx(pr["speedup"]) and rows[key]["tau"] == pytest.approx(pr["tau"])
    # ngram: run 0 800 ms, run 1 900 ms against 1000 ms alone -> speedups 1.25 and 1.111
    sp = rows[("repetitive", "greedy", "ngram", 2)]["speedup"]
    assert sp["min"] == pytest.approx(1000 / 900) and sp["max"] == pytest.approx(1.25)
    assert rows[("all", "greedy", "model", 2)]["draft_per_token"] == pytest.approx(1.0)
    assert rows[("all", "greedy", "model", 2)]["acceptance_by_position"] == pytest.approx([0.5, 0.25])
    assert s["memory_peak"]["models"]["champion"]["kv"] == 30 and s["memory_peak"]["wasm_heap"] == 2000
    assert s["all_identical"] and all(not e["failed"] for e in s["exactness"].values())
    figs = {f["id"]: f for f in bm.figures(doc, s)}
    assert set(figs) == {"speedup-greedy", "tau-greedy", "speedup-coupled", "tau-coupled", "acceptance-ngram-k2",
                         "acceptance-model-k2", "ttft-cold", "ttft-warm", "toks-length", "memory", "calls"}
    f = figs["speedup-greedy"]
    assert f["categories"] == ["repetitive", "casual_chat", "all"]
    ng = next(x for x in f["series"] if x["name"] == "ngram k=2")
    assert ng["values"][0] == pytest.approx(sp["median"]) and ng["lo"][0] == pytest.approx(sp["min"])
    assert len(f["table"]["rows"]) == 3 and f["table"]["columns"][0] == "stratum"
    cold_f = figs["ttft-cold"]
    assert [x["name"] for x in cold_f["series"]] == ["champion alone", "ngram k=2", "model k=2"]
    assert cold_f["series"][1]["values"][0] == pytest.approx(120.0)
    assert figs["memory"]["horizontal"] and "champion kv (cpu)" in figs["memory"]["categories"]
    assert any(r[0] == "champion KV / champion weights" for r in figs["memory"]["table"]["rows"])
    assert sum(len(x["points"]) for x in figs["toks-length"]["series"]) == len(recs)


def test_a_failed_exactness_check_marks_its_stratum_in_the_summary_figures_and_report():
    from bench.matrix_report import render
    bad = lambda r: not (r["stratum"] == "casual_chat" and r["drafter"] == "model" and r["run"] == 1)  # noqa: E731
    doc = {"records": fake_records(bad), "ttft": [], "memory": []}
    s = bm.summarise(doc)
    assert not s["all_identical"]
    assert s["exactness"]["casual_chat"]["failed"] and not s["exactness"]["repetitive"]["failed"]
    figs = bm.figures(doc, s)
    sp = next(f for f in figs if f["id"] == "speedup-greedy")
    assert set(sp["flags"]) == {"casual_chat"}
    doc.update(summary=s, figures=figs, meta={"host": "chromium", "backend": "cpu"},
               spec={"subset": "full", "sha256": "0" * 64})
    html = render(doc)
    assert "EXACTNESS CHECK FAILED in: casual_chat" in html
    assert re.search(r'class="cat flagged" data-category="casual_chat"', html)


def svg_marks(html: str, fid: str) -> list[dict]:
    """The <rect class="chart-bar"> / <circle class="chart-pt"> marks of figure fid in a report, as attribute dicts."""
    m = re.search(rf'<svg[^>]*data-figure="{re.escape(fid)}".*?</svg>', html, re.S)
    assert m, f"no SVG for figure {fid}"
    marks = []
    for tag in re.finditer(r'<(rect class="chart-bar"|circle class="chart-pt")([^>]*)>', m.group(0)):
        marks.append(dict(re.findall(r'([\w-]+)="([^"]*)"', tag.group(2))))
    return marks


def check_report_plots(html: str, figs: list[dict]) -> None:
    """Each figure of the JSON is drawn in the report, from its numbers: one mark per value, data attributes equal to
    the values, bar heights (or widths) and point heights linear in them."""
    for f in figs:
        assert f'data-figure="{f["id"]}"' in html, f["id"]
        marks = svg_marks(html, f["id"])
        if f["kind"] == "scatter":
            want = sorted((s["name"], p[0], round(p[1], 3)) for s in f["series"] for p in s["points"])
            got = sorted((m["data-series"], float(m["data-x"]), round(float(m["data-y"]), 3)) for m in marks)
            assert [w[:2] for w in want] == [g[:2] for g in got] and all(
                abs(a[2] - b[2]) <= 1e-4 * max(1, abs(a[2])) for a, b in zip(want, got)), f["id"]
            continue
        want = {(s["name"], c): v for s in f["series"] for c, v in zip(f["categories"], s["values"]) if v is not None}
        got = {(m["data-series"], m["data-category"]): float(m["data-value"]) for m in marks}
        assert set(got) == set(want), f["id"]
        for key, v in want.items():
            assert got[key] == pytest.approx(v, rel=1e-5, abs=1e-9), (f["id"], key)
        size = "width" if f.get("horizontal") else "height" if f["kind"] == "bars" else None
        if size:
            ratios = [float(m[size]) / float(m["data-value"]) for m in marks if float(m["data-value"]) > 0]
            assert max(ratios) - min(ratios) <= 0.01 * max(ratios), f["id"]
        else:   # lines: cy = base - scale * value, the same base and scale for every point
            pts = [(float(m["data-value"]), float(m["cy"])) for m in marks]
            (v0, y0), (v1, y1) = min(pts), max(pts)
            if v1 > v0:
                slope = (y1 - y0) / (v1 - v0)
                assert all(abs(y - (y0 + slope * (v - v0))) < 0.05 for v, y in pts), f["id"]
        assert len(f["table"]["rows"]) >= 1


def test_report_draws_every_figure_from_its_numbers():
    from bench.matrix_report import render
    recs = fake_records()
    doc = {"records": recs, "ttft": [dict(r, phase="ttft", prompt_tokens=40) for r in recs if r["mode"] == "greedy"],
           "memory": [{"models": {"champion": {"backend": "webgpu", "weights": 5e7, "kv": 2e6, "scratch": 1e6,
                                               "total": 5.3e7}}, "wasm_heap": 3e7, "gpu_buffers": 5.3e7}]}
    doc["summary"] = bm.summarise(doc)
    doc["figures"] = bm.figures(doc, doc["summary"])
    doc.update(meta={"host": "node", "backend": "vulkan"}, spec={"subset": "gpu", "sha256": "ab" * 32})
    html = render(doc)
    check_report_plots(html, doc["figures"])
    assert "<script" not in html and "http" not in html.replace("http://www.w3.org/2000/svg", "")


def test_a_matrix_with_the_head_records_the_heads_sha256():
    """The drafter 'head' beside the spec's drafters: bench product's options and the report's artifacts both carry
    the head's sha256 (the H200 run of 2026-12-02 stopped at its first checkpoint on its absence)."""
    sys.path.insert(0, str(ROOT / "py" / "bench"))
    import matrix
    head = ROOT / "static" / "models" / "head-smollm2.gguf"
    a = matrix.parse_args(["--subset", "panel", "--drafters", "none,ngram,model,head", "--head", str(head)])
    assert "drafter 'head' added (an optional drafter of the spec)" in a.departures
    pa = matrix.product_args(a)
    want = hashlib.sha256(head.read_bytes()).hexdigest()
    assert pa.sha["head"] == want and pa.sha["draft"] and pa.sha["champion"]
    arts = matrix.artifacts(a, pa)
    assert arts["head"]["sha256"] == want and arts["head"]["file"] == head.name


def test_a_cold_ttft_phase_run_separately_joins_its_report():
    """bench matrix --ttft-into DIR: a report whose run stopped before the cold-TTFT phase takes that phase from a
    second run of the same subset, host and backend; the departure is named, the summary and figures recomputed;
    a report of another subset, host or one that has the phase already is refused with the reason."""
    sys.path.insert(0, str(ROOT / "py" / "bench"))
    import matrix
    a = matrix.parse_args(["--subset", "full", "--host", "chromium", "--backend", "cpu"])
    recs = fake_records()
    doc = {"kind": "exactspec.bench_matrix", "records": recs, "ttft": [], "memory": [], "errors": [],
           "spec": {"sha256": a.spec_sha, "subset": "full", "definition": a.sub, "departures": []},
           "meta": {"host": "chromium", "backend": "cpu"}}
    assert matrix.ttft_target_problem(doc, a) is None
    cold = [dict(r, phase="ttft", prompt_tokens=40, run=0) for r in recs if r["mode"] == "greedy" and r["run"] == 0]
    out = matrix.merge_ttft(doc, cold, [], "python build.py bench matrix --ttft-into X", {"start": [1.0]})
    assert out["ttft"] == cold and doc["ttft"] == []                       # the input is left as it was
    assert any("cold-TTFT phase ran separately" in d for d in out["spec"]["departures"])
    assert out["meta"]["ttft_phase"]["command"].endswith("--ttft-into X")
    assert out["summary"]["ttft_cold"] and out["summary"]["ttft_cold"] == bm.summarise(out)["ttft_cold"]
    assert out["figures"] == bm.figures(out, out["summary"])
    for change, why in [(lambda d: d["meta"].update(host="node"), "ran on node"),
                        (lambda d: d["spec"].update(subset="gpu"), "subset 'gpu'"),
                        (lambda d: d.update(ttft=cold), "has its cold-TTFT phase already"),
                        (lambda d: d["spec"].update(definition={**a.sub, "runs": 1}), "definition differs")]:
        bad = json.loads(json.dumps(doc))
        change(bad)
        assert why in matrix.ttft_target_problem(bad, a)
