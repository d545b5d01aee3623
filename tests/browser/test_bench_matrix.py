"""`bench matrix` (py/bench/matrix.py): a tiny slice of the preregistered matrix through the real page in headless
Chromium (CPU fallback, micro-models): matrix.json's fields, report.html's plots drawn from the JSON's numbers, and
bench product's report of the same answers."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "py"))
from test_benchmatrix import check_report_plots  # noqa: E402

SPEC = ROOT / "bench" / "matrix" / "spec.json"
RECORD_FIELDS = {"run", "stratum", "prompt_id", "mode", "seed", "drafter", "k", "n_tokens", "token_ids", "tokens_per_s",
                 "elapsed_ms", "ttft_ms", "tau", "rounds", "target_passes", "draft_passes", "proposed", "accepted",
                 "acceptance_by_position", "identical", "backend", "prompt_tokens"}


def test_bench_matrix_chromium_cpu_slice(test_models, tmp_path):
    out = tmp_path / "m"
    cmd = [sys.executable, str(ROOT / "py" / "bench" / "matrix.py"), "--subset", "full", "--host", "chromium",
           "--backend", "cpu", "--champion", str(test_models["micro-chat"]), "--draft", str(test_models["micro-draft"]),
           "--strata", "repetitive,casual_chat", "--runs", "2", "--max-new-tokens", "8", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py"))
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[matrix] cold TTFT run 1/1" in r.stderr and "s left]" in r.stderr      # progress with time left
    doc = json.loads((out / "matrix.json").read_text())
    spec = json.loads(SPEC.read_text())
    sub = spec["subsets"]["full"]
    # the spec: its sha256, the subset as run, and the departures from it named
    assert doc["spec"]["sha256"] == hashlib.sha256(SPEC.read_bytes()).hexdigest()
    assert doc["spec"]["subset"] == "full" and doc["spec"]["definition"]["ks"] == sub["ks"]
    deps = " ".join(doc["spec"]["departures"])
    assert "strata" in deps and "runs 2" in deps and "max_new_tokens 8" in deps
    m = doc["meta"]
    assert m["host"] == "chromium" and m["backend"] == "cpu" and m["backend_active"] == "cpu"
    assert m["versions"]["chromium"] and m["machine"]["cpus"] and m["git_commit"]
    art = m["artifacts"]
    for key in ("champion", "draft", "workload", "spec"):
        assert len(art[key]["sha256"]) == 64, key
    assert art["workload"]["sha256"] == spec["workload"]["sha256"]
    assert art["champion"]["sha256"] == hashlib.sha256(test_models["micro-chat"].read_bytes()).hexdigest()
    # answers: 2 runs x 2 prompts x (greedy, coupled) x (alone, ngram k=3, model k=3); cold TTFT (ttft.runs 1) 3 x 2
    n_cfg = 1 + 2 * len(sub["ks"])
    assert len(doc["records"]) == 2 * 2 * 2 * n_cfg
    for x in doc["records"]:
        assert RECORD_FIELDS <= set(x), RECORD_FIELDS - set(x)
        assert x["identical"] is True          # (the champion alone: against itself)
    assert sub["ttft"]["runs"] == 1 and len(doc["ttft"]) == 1 * 3 * 2 and all(x["phase"] == "ttft" and x["ttft_ms"] > 0 for x in doc["ttft"])
    assert {(x["drafter"], x["k"]) for x in doc["ttft"]} == {("none", 0), ("ngram", sub["ttft"]["k"]),
                                                             ("model", sub["ttft"]["k"])}
    assert len(doc["warmups"]) == 4 and doc["errors"] == []
    assert len(doc["timings"]) == 2 * 2 * 2 and all(t["single_ms"]["median"] > 0 for t in doc["timings"])
    # memory: a sample after boot, after each run of each stratum, after the cold phase
    assert len(doc["memory"]) == 1 + 2 * 2 + 1
    last = doc["memory"][-1]
    assert last["wasm_heap"] > 0 and last["page_js_heap_used"] > 0
    for role in ("champion", "draft"):
        mm = last["models"][role]
        assert mm["backend"] == "cpu" and mm["weights"] > 0 and mm["kv"] > 0 and mm["total"] >= mm["weights"] + mm["kv"]
    # summary, exactness, figures
    s = doc["summary"]
    assert s["all_identical"] and set(s["exactness"]) == {"repetitive", "casual_chat"}
    assert all(e["identical"] == e["answers"] > 0 for e in s["exactness"].values())
    ids = [f["id"] for f in doc["figures"]]
    assert ids == ["speedup-greedy", "tau-greedy", "speedup-coupled", "tau-coupled", "acceptance-ngram-k3",
                   "acceptance-model-k3", "ttft-cold", "ttft-warm", "toks-length", "memory", "calls"]
    sp = next(f for f in doc["figures"] if f["id"] == "speedup-greedy")
    row = next(x for x in s["rows"] if x["stratum"] == "repetitive" and x["mode"] == "greedy" and x["drafter"] == "ngram")
    assert sp["series"][0]["values"][0] == row["speedup"]["median"] and row["speedup"]["n"] == 2
    # bench product's summary of the same answers (measured next to predicted) and its files
    assert doc["product"]["all_identical"] and len(doc["product"]["summary"]) == 2 * 2 * 2
    assert any(x["predicted"] for x in doc["product"]["summary"])
    prod = json.loads((out / "product.json").read_text())
    assert len(prod["records"]) == len(doc["records"]) and "identical: yes" in (out / "product.txt").read_text()
    # the report: self-contained, every plot drawn from the JSON's numbers, tables, machine and sha256s stated
    html = (out / "report.html").read_text()
    check_report_plots(html, doc["figures"])
    for needle in (doc["spec"]["sha256"], art["workload"]["sha256"], art["champion"]["sha256"], art["draft"]["sha256"],
                   "Every speculative answer was identical", "Exactness per stratum", m["versions"]["chromium"]):
        assert needle in html, needle
    assert html.count("<table") >= len(doc["figures"]) + 4
    assert "<script" not in html and "src=" not in html and "href=" not in html
