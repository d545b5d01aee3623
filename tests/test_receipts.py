"""Privacy-safe receipts (issue 12): every answer's receipt matches the schema (py/exactspec/receipt.schema.json), and
canaries planted in prompts, answers, file names, paths and model metadata never appear in a receipt — neither as
text nor as a hash (sha256 / sha1 / md5 / blake2b of the text, of its token ids). Session, CLI (--receipt) and the
schema file; the page's exactspec.receipt() is checked in tests/browser/test_fault_matrix.py with the same helper."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exactspec.micro import micro_config, micro_tokenizer, write_micro_gguf
from exactspec.receipts import SCHEMA, schema_json, validate
from exactspec.session import Session

ROOT = Path(__file__).resolve().parents[1]
CANARY_PROMPT = "CANARY-PROMPT-q8Zt"
CANARY_ANSWER = "CANARY-ANSWER-w3Kp"
CANARY_FILE = "canary-FILE-m2Rx"
CANARY_DIR = "canary-DIR-v7Ly"
CANARY_META = "CANARY-META-j5Hs"


def forbidden(*texts, ids_lists=()) -> list[str]:
    """The strings a receipt must not contain: each text (and its pieces of 8+ characters), and the hex digests of
    each text and of each list of token ids."""
    out = []
    for t in texts:
        if not t:
            continue
        b = t.encode()
        out.append(t)
        out += [t[i:i + 8] for i in range(0, max(1, len(t) - 7), 4)] if len(t) >= 8 else []
        for h in ("sha256", "sha1", "md5", "blake2b", "sha512"):
            out.append(hashlib.new(h, b).hexdigest())
    for ids in ids_lists:
        for rep in (json.dumps(ids), json.dumps(ids, separators=(",", ":")), str(ids), ",".join(map(str, ids))):
            out.append(rep) if len(ids) >= 3 else None
            for h in ("sha256", "sha1", "md5"):
                out.append(hashlib.new(h, rep.encode()).hexdigest())
    return out


def assert_private(receipt: dict, *texts, ids_lists=()):
    blob = json.dumps(receipt, ensure_ascii=False)
    low = blob.lower()
    for f in forbidden(*texts, ids_lists=ids_lists):
        assert f.lower() not in low, f"receipt holds {f!r}"
    assert validate(receipt) == [], validate(receipt)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(receipt, SCHEMA)


@pytest.fixture(scope="module")
def canary_model(tmp_path_factory):
    d = tmp_path_factory.mktemp(CANARY_DIR)
    p = d / f"{CANARY_FILE}.gguf"
    tok = micro_tokenizer(300)
    tok["general.name"] = CANARY_META
    tok["canary.key"] = CANARY_META + " more text"
    tok["tokenizer.chat_template"] = tok["tokenizer.chat_template"] + "{# " + CANARY_META + " #}"
    write_micro_gguf(p, micro_config(), seed=1, with_tokenizer=tok)
    draft = d / f"{CANARY_FILE}-draft.gguf"
    write_micro_gguf(draft, micro_config(n_layers=1), seed=7)
    return p, draft


def test_schema_file_is_the_schema():
    assert (ROOT / "py" / "exactspec" / "receipt.schema.json").read_text() == schema_json()


def test_session_receipts_hold_no_canary(canary_model):
    p, draft = canary_model
    s = Session()
    s.load(CANARY_FILE, str(p))
    s.load(CANARY_FILE + "-draft", str(draft), role="draft")
    out = asyncio.run(s.generate({"prompt": f"Say {CANARY_PROMPT} now", "chat": True, "max_new_tokens": 16,
                                  "drafter": "model", "k": 3, "adaptive": False}))
    r = out["receipt"]
    assert r["artifacts"]["champion"]["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert r["artifacts"]["draft"]["sha256"] == hashlib.sha256(draft.read_bytes()).hexdigest()
    assert r["counts"]["new_tokens"] == len(out["token_ids"]) and r["counts"]["draft_passes"] > 0
    assert r["counts"]["prompt_tokens"] == out["prompt_tokens"]
    assert_private(r, CANARY_PROMPT, f"Say {CANARY_PROMPT} now", out["text"] if len(out["text"]) >= 6 else "",
                   CANARY_FILE, CANARY_DIR, CANARY_META, str(p), str(p.parent), ids_lists=[out["token_ids"]])


def test_answer_canary_through_json_mode(canary_model):
    """The answer is forced to hold a canary (JSON mode: a const schema); neither it nor the schema reaches the
    receipt (json_mode is recorded as its kind only)."""
    p, _ = canary_model
    s = Session()
    s.load(CANARY_FILE, str(p))
    schema = {"type": "object", "properties": {"k": {"const": CANARY_ANSWER}}, "required": ["k"]}
    out = asyncio.run(s.generate({"prompt": "x", "chat": True, "max_new_tokens": 60, "drafter": "none",
                                  "response_format": {"type": "json_schema", "schema": schema}}))
    assert CANARY_ANSWER in out["text"], out["text"]
    r = out["receipt"]
    assert r["settings"]["json_mode"] == "json_schema"
    assert_private(r, CANARY_ANSWER, out["text"], json.dumps(schema), ids_lists=[out["token_ids"]])


def test_receipts_after_faults_hold_kinds_and_actions_only(canary_model):
    p, draft = canary_model
    s = Session()
    s.load(CANARY_FILE, str(p))
    s.load(CANARY_FILE + "-draft", str(draft), role="draft")
    out = asyncio.run(s.generate({"prompt": CANARY_PROMPT, "chat": True, "max_new_tokens": 16, "drafter": "model",
                                  "k": 3, "adaptive": False,
                                  "faults": [{"kind": "draft_only", "phase": "draft", "round": 2}]}))
    r = out["receipt"]
    assert r["faults"][0]["kind"] == "draft_only" and r["recovery"][0]["action"] == "speculation_off"
    assert_private(r, CANARY_PROMPT, CANARY_FILE, CANARY_META, str(p), ids_lists=[out["token_ids"]])
    assert not any(n in json.dumps(r) for n in out["notices"])        # messages have no field in a receipt


def test_cli_receipt_file(canary_model, tmp_path):
    p, draft = canary_model
    rf = tmp_path / "receipt.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py"), OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "exactspec", "generate", "--model", str(p), "--draft", str(draft),
                        "--drafter", "model", "--k", "3", "--prompt", CANARY_PROMPT, "--chat", "--max-new-tokens", "12",
                        "--json", "--receipt", str(rf)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rec = json.loads(rf.read_text())
    assert rec["artifacts"]["champion"]["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert rec["backend"]["champion"] == "cpu-reference" and rec["counts"]["new_tokens"] == len(out["token_ids"])
    assert_private(rec, CANARY_PROMPT, CANARY_FILE, CANARY_DIR, CANARY_META, str(p), str(rf),
                   out["text"] if len(out["text"]) >= 6 else "", ids_lists=[out["token_ids"]])


def test_validator_refuses_free_text():
    s = Session  # noqa: F841  (the schema's strictness, on hand-made receipts)
    from exactspec.receipts import make_receipt
    r = make_receipt(settings={}, stats={}, finish_reason="eos", seed=0, prompt_tokens=0, champion=None)
    assert validate(r) == []
    bad = json.loads(json.dumps(r))
    bad["versions"]["engine"] = "a path /home/user/secret"
    bad["note"] = "hello"
    bad["recovery"] = [{"cause": "worker_lost", "action": "a message", "at_token": 0, "backend": None}]
    errs = validate(bad)
    assert any("engine" in e for e in errs) and any("note" in e for e in errs) and any("action" in e for e in errs)
    # make_receipt drops what has no field: names, paths, messages
    r2 = make_receipt(settings={"drafter": "ngram"}, stats={"new_tokens": 3}, finish_reason="eos", seed=1,
                      prompt_tokens=2, champion={"sha256": "x" * 64, "name": "secret", "path": "/secret"},
                      recovery=[{"cause": "loop_error", "action": "speculation_off", "at_token": 2, "note": "/p"}],
                      versions={"engine": "/etc/passwd"})
    assert validate(r2) == [] and "secret" not in json.dumps(r2) and "/p" not in json.dumps(r2)
