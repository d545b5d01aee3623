"""A short seeded slice of the fuzz benchmark (py/bench/fuzz.py, `python build.py bench fuzz` runs >= 100,000 cases):
hostile GGUF files, Hugging Face folders and tokenizer.json documents through the import check, the load, a forward
pass and the tokenizer — only the project's own clear errors (FormatError, TokenizerError), no hang, bounded memory."""
from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")


def test_fuzz_slice_has_no_unexpected_exception():
    from bench.fuzz import fuzz
    res = fuzz(cases=150, seed_=20261201, timeout_s=60.0)
    for t, r in res["targets"].items():
        assert r["unexpected"] == 0, (t, r["unexpected_samples"])
        assert r["hangs"] == 0, t
        assert r["ok"] > 0 and sum(r["refused"].values()) > 0, (t, r)     # both outcomes are reached
    assert res["cases"] >= 150 and res["worst_case_peak_bytes"] < 64 << 20
