"""`bench product` (py/bench/product.py): a tiny slice through the real page in headless Chromium (CPU fallback),
micro-models: every answer through exactspec.generate, the champion alone and with speculation in the same page,
the JSON report's per-answer fields, pass timings, summary and table; and the break-even prediction's arithmetic."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "py"))
from bench.product import predicted_speedup, spread  # noqa: E402

RECORD_FIELDS = {"run", "stratum", "prompt_id", "mode", "seed", "drafter", "k", "adaptive", "n_tokens", "token_ids",
                 "text", "finish_reason", "tokens_per_s", "elapsed_ms", "ttft_ms", "tau", "rounds", "target_passes",
                 "draft_passes", "submissions", "readback_bytes", "wasted_passes", "ahead_passes", "identical",
                 "acceptance_by_position", "prompt_tokens", "backend"}
SUMMARY_FIELDS = {"stratum", "mode", "drafter", "k", "adaptive", "runs", "alone_tok_s", "spec_tok_s", "speedup",
                  "predicted", "tau", "submissions_per_round", "readback_bytes_per_token", "identical", "per_run"}


def test_bench_product_chromium_cpu_slice(test_models, tmp_path):
    out, txt = tmp_path / "product.json", tmp_path / "product.txt"
    cmd = [sys.executable, str(ROOT / "py" / "bench" / "product.py"), "--host", "chromium", "--backend", "cpu",
           "--champion", str(test_models["micro-chat"]), "--draft", str(test_models["micro-draft"]),
           "--strata", "repetitive,casual_chat", "--per-stratum", "1", "--runs", "2", "--max-new-tokens", "8",
           "--ks", "1,3", "--drafters", "none,ngram,model", "--modes", "greedy,coupled", "--seeds", "0,3",
           "--adaptive", "both", "--timing-reps", "2", "--out", str(out), "--table", str(txt)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py"))
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads(out.read_text())
    m = rep["meta"]
    assert m["host"] == "chromium" and m["backend"] == "cpu" and m["backend_active"] == "cpu" and m["versions"]["chromium"]
    assert m["strata"] == ["repetitive", "casual_chat"] and len(m["prompts"]) == 2
    assert len(m["artifacts"]["workload"]["sha256"]) == 64 and m["artifacts"]["draft"]["sha256"]
    # per answer: 2 runs x 2 prompts x (greedy + coupled with 2 seeds) x (alone + 2 drafters x 2 k x 2 adaptive)
    recs = rep["records"]
    assert len(recs) == 2 * 2 * 3 * 9
    for x in recs:
        assert RECORD_FIELDS <= set(x), RECORD_FIELDS - set(x)
        assert x["identical"] is True and x["backend"] == "cpu" and 1 <= x["n_tokens"] <= 8
    by = {(x["run"], x["prompt_id"], x["mode"], x["seed"]) for x in recs}
    assert len(by) == 2 * 2 * 3
    # coupled answers differ from greedy ones (sampling happened) and between seeds, greedy ones do not
    tok = {(x["run"], x["prompt_id"], x["mode"], x["seed"], x["drafter"], x["k"], x["adaptive"]):
           tuple(x["token_ids"]) for x in recs}
    assert any(tok[(0, p, "coupled", 0, "none", 0, False)] != tok[(0, p, "greedy", 0, "none", 0, False)]
               for p in m["prompts"])
    assert all(tok[(0, p, "greedy", 0, "none", 0, False)] == tok[(1, p, "greedy", 0, "none", 0, False)]
               for p in m["prompts"])
    assert any(x["draft_passes"] > 0 for x in recs if x["drafter"] == "model")
    # pass timings per run, stratum and mode/seed, through the page's own models
    assert len(rep["timings"]) == 2 * 2 * 3
    for t in rep["timings"]:
        assert set(t["verify_ms"]) == {"1", "2", "3"} and set(t["draft_ms"]) == {"ngram", "model"}
        assert t["single_ms"]["median"] > 0 and t["position"] > 0
    assert len(rep["warmups"]) == 2 * 2 and rep["errors"] == [] and rep["all_identical"] is True
    # summary: per stratum, mode, drafter, k, adaptive; predictions only for forced speculation
    rows = rep["summary"]
    assert len(rows) == 2 * 2 * 2 * 2 * 2
    for row in rows:
        assert SUMMARY_FIELDS <= set(row) and row["runs"] == 2 and row["identical"] is True
        assert row["speedup"]["n"] == 2 and row["speedup"]["min"] <= row["speedup"]["median"] <= row["speedup"]["max"]
        assert (row["predicted"] is None) == row["adaptive"]
    text = txt.read_text()
    assert text in r.stdout
    for col in ("alone tok/s", "spec tok/s", "speedup", "predicted", "tau", "sub/rnd", "B/token", "ident"):
        assert col in text
    assert "identical: yes" in text and "repetitive" in text and "casual_chat" in text


def test_predicted_speedup_interpolates_proposals_and_uses_on_device_rounds():
    t = {"single_ms": {"median": 10.0}, "forward_ms": {"median": 10.0},
         "verify_ms": {"1": {"median": 14.0}, "2": {"median": 18.0}, "3": {"median": 26.0}},
         "draft_ms": {"ngram": {"median": 0.5}, "model": {"median": 2.0}},
         "round_ms": {"model": {"2": {"median": 13.0}}}}
    # n-gram with 1.5 proposals per round: 1.5 * 0.5 + (14 + (18 - 14) * 0.5) = 16.75; (10 + 2) / (2 + 16.75 / 1.8)
    # (O = 2 ms a token is the answer's: paid once per token with or without speculation)
    s, parts = predicted_speedup(t, "ngram", 3, 1.5, 1.8, 2.0)
    assert s == pytest.approx(12 / (2 + 16.75 / 1.8)) and parts["t_round_ms"] == pytest.approx(16.75)
    # the model drafter with a measured on-device round for k = 2; k = 3 from the draft and verify passes
    assert predicted_speedup(t, "model", 2, 2.0, 2.5, 0.0)[0] == pytest.approx(10 * 2.5 / 13.0)
    assert predicted_speedup(t, "model", 3, 3.0, 2.5, 0.0)[0] == pytest.approx(10 * 2.5 / (3 * 2.0 + 26.0))
    assert predicted_speedup(t, "model", 4, 4.0, 2.5, 0.0)[0] is None          # no T_verify(4) measured
    assert spread([3.0, 1.0, 2.0, None]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert spread([None]) is None
