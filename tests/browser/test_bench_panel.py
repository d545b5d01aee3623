"""The page's "Benchmark this machine" panel (app/bench_panel.js) in headless Chromium with micro-models: started and
cancelled from the keyboard, a progress bar, the same figures as the CLI report (drawn in JS from the figures that
exactspec.benchmatrix computes in the worker; same geometry as py/bench/matrix_report.py), and a JSON receipt that
carries no prompt but the workload's, no answer text, no model or file names.
EXACTSPEC_SHOTS=DIR saves screenshots of the panel there."""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "py"))
from test_benchmatrix import check_report_plots, svg_marks  # noqa: E402
from bench.matrix_report import svg  # noqa: E402

SPEC = ROOT / "bench" / "matrix" / "spec.json"
SECRET = "zebra-quartz-7781 my private note"


def wait_js(page, expr: str, timeout: float = 600.0):
    """Poll a JS expression until truthy (wait_for_function evaluates strings, which the page's CSP forbids)."""
    t_end = time.time() + timeout
    while not page.evaluate(f"() => ({expr})"):
        if time.time() > t_end:
            raise TimeoutError(f"timed out waiting for {expr}")
        time.sleep(0.05)


def open_with_draft(session):
    session.open("?cpu=1")
    session.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'micro-draft', role: 'draft'})")
    session.js("exactspec.loadModel('micro-draft', 'draft')")
    page = session.page
    page.wait_for_selector("#bench-run:not([disabled])")
    return page


def shot(page, name):
    d = os.environ.get("EXACTSPEC_SHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        page.locator("#bench").screenshot(path=str(Path(d) / name))


def test_bench_panel_runs_draws_and_downloads_a_receipt(session):
    page = open_with_draft(session)
    panel = json.loads(page.evaluate("fetch('/bench/panel.json').then(r => r.text())"))
    spec = json.loads(SPEC.read_text())
    assert panel["spec"]["sha256"] == hashlib.sha256(SPEC.read_bytes()).hexdigest()
    assert panel["spec"]["definition"] == spec["subsets"]["panel"] and len(panel["items"]) == 11
    assert "spec sha256 " + panel["spec"]["sha256"][:12] in page.inner_text("#bench-about")
    # a chat message of the person's own first: it must not reach the receipt
    page.fill("#prompt", SECRET)
    page.press("#prompt", "Enter")
    wait_js(page, "document.querySelectorAll('.msg.assistant').length === 1 && !document.querySelector('.streaming')")
    # run from the keyboard
    page.focus("#bench-run")
    page.keyboard.press("Enter")
    wait_js(page, "document.getElementById('bench-progress').value > 0")
    assert page.evaluate("document.getElementById('composer').inert") is True
    page.wait_for_selector("#bench-verdict", timeout=600_000)
    assert page.evaluate("document.getElementById('composer').inert") is False
    bar = page.evaluate("[document.getElementById('bench-progress').value, document.getElementById('bench-progress').max]")
    assert bar[0] == bar[1] > 0
    assert "Every speculative answer was identical" in page.inner_text("#bench-verdict")
    assert page.inner_text("#bench-status").startswith("Done:")
    with page.expect_download() as dl:
        page.click("#bench-download")
    assert re.fullmatch(r"exactspec-bench-cpu-[\d-]+\.json", dl.value.suggested_filename)
    raw = Path(dl.value.path()).read_text()
    rec = json.loads(raw)
    shot(page, "bench_panel.png")
    # the receipt: the same fields as matrix.json, less answer text and token ids
    assert rec["kind"] == "exactspec.bench_matrix.receipt" and rec["spec"]["sha256"] == panel["spec"]["sha256"]
    assert rec["meta"]["backend"] == "cpu" and rec["meta"]["cancelled"] is False
    assert rec["meta"]["artifacts"]["workload"]["sha256"] == spec["workload"]["sha256"]
    assert len(rec["meta"]["artifacts"]["champion"]["sha256"]) == 64 and rec["meta"]["artifacts"]["draft"]
    # micro-chat's context (256) is shorter than three workload prompts: they are skipped and named
    skipped = {x["prompt_id"] for x in rec["skipped"]}
    assert skipped and skipped <= {"mem-01", "sum-01", "long-01"}
    n_items = 11 - len(skipped)
    assert len(rec["records"]) == n_items * 3 and len(rec["ttft"]) == n_items * 3
    for r in rec["records"] + rec["ttft"]:
        assert "text" not in r and "token_ids" not in r
        assert {"stratum", "prompt_id", "drafter", "k", "n_tokens", "tokens_per_s", "tau", "target_passes",
                "draft_passes", "acceptance_by_position", "ttft_ms", "identical"} <= set(r)
    assert all(r["identical"] is True for r in rec["records"] + rec["ttft"] if r["drafter"] != "none")
    assert rec["memory"] and rec["memory"][-1]["wasm_heap"] > 0
    assert rec["summary"]["all_identical"] is True
    # privacy: nothing of the person's chat, no model or file names, no prompt text (prompts go by workload id)
    for needle in ("zebra-quartz", "micro-chat", "micro-draft", ".gguf", "/models/", "messages"):
        assert needle not in raw, needle
    items = [json.loads(x) for x in (ROOT / "tests" / "data" / "workload.jsonl").read_text().splitlines() if x.strip()]
    assert not any(m["content"][:40] in raw for it in items for m in it["messages"])
    # the charts: every figure of the receipt drawn in the page from its numbers, with the report's geometry
    ids = [f["id"] for f in rec["figures"]]
    assert ids == ["speedup-greedy", "tau-greedy", "acceptance-ngram-k3", "acceptance-model-k3", "ttft-cold",
                   "ttft-warm", "toks-length", "memory", "calls"]
    html = page.inner_html("#bench-results")
    check_report_plots(html, rec["figures"])
    for f in rec["figures"]:
        geo = ("x", "y", "width", "height", "cx", "cy")
        page_marks = sorted(tuple(round(float(m.get(a, 0)), 1) for a in geo) for m in svg_marks(html, f["id"]))
        py_marks = sorted(tuple(round(float(m.get(a, 0)), 1) for a in geo) for m in svg_marks(svg(f), f["id"]))
        assert page_marks == py_marks, f["id"]
    assert page.locator("#bench-results figure details table").count() == len(ids)
    assert not session.errors


def test_bench_panel_cancel(session):
    page = open_with_draft(session)
    page.click("#bench-run")
    wait_js(page, "document.getElementById('bench-progress').value >= 4")
    assert page.evaluate("document.activeElement.id") == "bench-cancel"
    page.keyboard.press("Escape")                     # Escape (or the Cancel button) stops the run
    wait_js(page, "document.getElementById('bench-status').textContent.startsWith('Cancelled')")
    planned = page.evaluate("document.getElementById('bench-progress').max")
    done = page.evaluate("document.getElementById('bench-progress').value")
    assert 4 <= done < planned
    assert "Cancelled after" in page.inner_text("#bench-verdict")
    assert page.evaluate("document.getElementById('bench-run').disabled") is False
    assert page.evaluate("document.getElementById('bench-cancel').disabled") is True
    with page.expect_download() as dl:
        page.click("#bench-download")
    rec = json.loads(Path(dl.value.path()).read_text())
    assert rec["meta"]["cancelled"] is True and rec["meta"]["answers_done"] < rec["meta"]["answers_planned"]
    assert all(r["finish_reason"] != "cancelled" for r in rec["records"])
    shot(page, "bench_panel_cancelled.png")
    # the chat works again at once
    assert page.evaluate("document.getElementById('composer').inert") is False
    out = session.generate(prompt="Say hi.", max_new_tokens=4, temperature=0)
    assert out["finish_reason"] in ("length", "eos") and out["token_ids"]
