"""External oracle: SmolLM2 logits from Hugging Face transformers (CPU torch float32, GGUF dequantised by
transformers) stored by py/scripts/golden_logits.py in tests/data/golden_smollm2.json. Our numpy reference must pick
the same top-1 token at EVERY position and be within 1e-2 on the oracle's top-20 logits. No torch needed here."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from exactspec.reference import ReferenceModel

ROOT = Path(__file__).resolve().parents[1]
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
GOLDEN = ROOT / "tests" / "data" / "golden_smollm2.json"
TOL = 1e-2


@pytest.fixture(scope="module")
def golden():
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def model(golden):
    if not CHAMPION.exists():
        pytest.skip("champion GGUF missing: run `python build.py setup`")
    h = hashlib.sha256(CHAMPION.read_bytes()).hexdigest()
    assert h == golden["model_sha256"], "golden file was computed for another model file"
    return ReferenceModel.from_file(CHAMPION, max_len=128)


def test_golden_file_shape(golden):
    assert "transformers" in golden["oracle"] and golden["top"] >= 20
    assert len(golden["prompts"]) >= 3
    for p in golden["prompts"]:
        n = len(p["token_ids"])
        assert n >= 64 and n > p["n_prompt"] > 0
        assert np.asarray(p["top_ids"]).shape == np.asarray(p["top_logits"]).shape == (n, golden["top"])
        assert np.all(np.diff(np.asarray(p["top_logits"]), axis=1) <= 0)       # sorted descending
    assert GOLDEN.stat().st_size < 1 << 20


@pytest.mark.parametrize("idx", [0, 1, 2, 3])
def test_reference_agrees_with_transformers(golden, model, idx):
    if idx >= len(golden["prompts"]):
        pytest.skip("fewer prompts")
    p = golden["prompts"][idx]
    ids = p["token_ids"]
    model.truncate(0)
    logits = model.forward(ids, 0)                                               # (n, vocab)
    top_ids = np.asarray(p["top_ids"])                                           # (n, 20)
    top_logits = np.asarray(p["top_logits"], dtype=np.float64)                   # (n, 20)
    # top-1 at every position (the continuation tokens are the oracle's greedy choices)
    assert np.array_equal(logits.argmax(axis=1), top_ids[:, 0])
    assert np.array_equal(top_ids[p["n_prompt"] - 1: -1, 0], np.asarray(ids[p["n_prompt"]:]))
    ours = np.take_along_axis(logits, top_ids, axis=1).astype(np.float64)        # (n, 20)
    err = np.abs(ours - top_logits)
    assert err.max() < TOL, f"max |diff| {err.max():.3g} at position {np.unravel_index(err.argmax(), err.shape)}"
