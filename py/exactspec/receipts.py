"""Privacy-safe receipts: what produced an answer, never what the answer or its prompt said.

Every answer carries a receipt (`Session.generate` -> out["receipt"]; the page's `exactspec.receipt()`, the metrics
panel's download button; the CLI's `--receipt FILE`): the artifacts' sha256s (champion, draft, tokenizer), versions,
the settings and the exactness policy, the seed, counts (passes, proposals, acceptance by position), timings, peak
memory (GPU buffers, wasm heap or the process's RSS), the faults that fired and the recovery taken, and numeric error
bounds where something measured them.

Never in a receipt: the prompt, the output (text or token ids), file names or paths, model names or any other text
from a model file, error messages (they may name paths), nor hashes of prompts or outputs (a short text can be
recovered from its hash by trying candidates). The schema (SCHEMA; py/exactspec/receipt.schema.json is it, written
by `python -m exactspec receipt-schema`) allows no free text: every string is an enum, a sha256, a version or a
backend name, every object closed (additionalProperties false) — `validate` checks a receipt against it, in CPython
and in Pyodide (no jsonschema there). tests/test_receipts.py plants canaries in prompts, answers, file names and
model metadata and checks that no receipt holds them or their hashes.
"""
from __future__ import annotations

import hashlib
import math
import re

from .faults import KINDS, PHASES, RECOVERIES

SCHEMA_ID = "exactspec.receipt/1"
SHA = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
SHA_OR_NULL = {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"}
VERSION = {"type": ["string", "null"], "pattern": "^[0-9A-Za-z][0-9A-Za-z.+_-]{0,31}$"}
COUNT = {"type": "integer", "minimum": 0}
COUNT_OR_NULL = {"type": ["integer", "null"], "minimum": 0}
NUM_OR_NULL = {"type": ["number", "null"]}
BACKENDS = ["webgpu", "cpu", "cpu-reference"]
BACKEND_OR_NULL = {"type": ["string", "null"], "enum": BACKENDS + [None]}


def _obj(props: dict, required=None) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": props,
            "required": list(props) if required is None else required}


ARTIFACT = {"type": ["object", "null"], "additionalProperties": False,
            "properties": {"sha256": SHA_OR_NULL, "format": {"type": "string", "enum": ["gguf", "hf"]},
                           "kind": {"type": "string", "enum": ["model", "head"]}, "bytes": COUNT_OR_NULL,
                           "files": {"type": "array", "maxItems": 64,
                                     "items": _obj({"sha256": SHA, "bytes": COUNT})}},
            "required": ["sha256", "format", "kind", "bytes"]}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "ExactSpec answer receipt",
    "description": "What produced one answer (artifacts, versions, settings, counts, timings, memory, faults and "
                   "recovery); never its prompt, output, file names, paths or hashes of texts.",
    **_obj({
        "schema": {"type": "string", "const": SCHEMA_ID},
        "versions": _obj({"exactspec": VERSION, "python": VERSION, "numpy": VERSION, "pyodide": VERSION,
                          "engine": VERSION}, required=["exactspec", "python", "numpy"]),
        "artifacts": _obj({"champion": ARTIFACT, "draft": ARTIFACT,
                           "tokenizer": {"type": ["object", "null"], "additionalProperties": False,
                                         "properties": {"sha256": SHA, "vocab_size": COUNT},
                                         "required": ["sha256", "vocab_size"]}}),
        "backend": _obj({"champion": BACKEND_OR_NULL, "draft": BACKEND_OR_NULL,
                         "fallback_adapter": {"type": ["boolean", "null"]}}, required=["champion", "draft"]),
        "settings": _obj({
            "speculation": {"type": "boolean"}, "adaptive": {"type": "boolean"},
            "grammar_draft": {"type": "boolean"},
            "drafter": {"type": "string", "enum": ["none", "model", "ngram", "head"]},
            "bridge": {"type": "string", "enum": ["auto", "remap", "tli", "slem"]},
            "k": COUNT, "k_schedule": {"type": "string", "enum": ["fixed", "additive"]},
            "draft_stop": {"type": "number", "minimum": 0, "maximum": 1}, "head_copy": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["coupled", "rejection"]},
            "temperature": {"type": "number", "minimum": 0}, "top_k": COUNT,
            "top_p": {"type": "number", "minimum": 0, "maximum": 1}, "max_new_tokens": COUNT,
            "json_mode": {"type": "string", "enum": ["none", "json_object", "json_schema"]}}),
        "policy": _obj({
            "exactness": {"type": "string", "enum": ["greedy", "coupled", "rejection"]},
            "bridge_used": {"type": ["string", "null"], "enum": ["none", "remap", "tli", "slem", None]},
            "continued": {"type": "boolean"}, "resumed": {"type": "boolean"},
            "speculation_off_after_fault": {"type": "boolean"}}),
        "seed": COUNT,
        "finish_reason": {"type": "string", "enum": ["eos", "length", "stop", "cancelled", "error"]},
        "failed": {"type": ["string", "null"], "enum": ["champion", "draft", "round", "loop", None]},
        "counts": _obj({k: COUNT for k in (
            "prompt_tokens", "new_tokens", "target_passes", "prefill_passes", "draft_passes", "rounds", "proposed",
            "accepted", "submissions", "readback_bytes", "ahead_passes", "wasted_passes", "forced_proposed",
            "forced_accepted", "reused_prefix_tokens", "spec_disabled_rounds", "attempts", "dropped_messages",
            "row_reads")} | {
            "proposed_at": {"type": "array", "items": COUNT, "maxItems": 64},
            "accepted_at": {"type": "array", "items": COUNT, "maxItems": 64}}),
        "timings": _obj({"ttft_ms": NUM_OR_NULL, "elapsed_ms": NUM_OR_NULL, "tokens_per_s": NUM_OR_NULL,
                         "tau": NUM_OR_NULL, "mask_ms": NUM_OR_NULL}),
        "memory": _obj({"gpu_buffers_bytes": COUNT_OR_NULL, "wasm_heap_bytes": COUNT_OR_NULL,
                        "cpu_pool_bytes": COUNT_OR_NULL, "rss_peak_bytes": COUNT_OR_NULL}),
        "faults": {"type": "array", "maxItems": 64, "items": _obj({
            "kind": {"type": "string", "enum": list(KINDS)}, "phase": {"type": "string", "enum": list(PHASES)},
            "round": COUNT, "at_round": COUNT, "at_token": COUNT})},
        "recovery": {"type": "array", "maxItems": 64, "items": _obj({
            "cause": {"type": "string", "enum": list(KINDS) + ["backend_error", "loop_error", "worker_lost"]},
            "action": {"type": "string", "enum": list(RECOVERIES)}, "at_token": COUNT,
            "backend": BACKEND_OR_NULL})},
        "numeric": {"type": "array", "maxItems": 16, "items": _obj({
            "what": {"type": "string", "enum": ["max_abs_logit_diff", "top1_agreement"]},
            "against": {"type": "string", "enum": ["cpu-reference"]}, "value": {"type": "number"}})},
    }),
}


def schema_json() -> str:
    import json
    return json.dumps(SCHEMA, indent=1) + "\n"


# ---- a minimal validator for the subset SCHEMA uses (Pyodide has no jsonschema) ----------------------------------
def _types(t) -> list:
    return t if isinstance(t, list) else [t]


def _is(v, t: str) -> bool:
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if t == "string":
        return isinstance(v, str)
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    return False


def _check(v, s: dict, where: str, errs: list) -> None:
    if "const" in s and v != s["const"]:
        errs.append(f"{where}: must be {s['const']!r}")
        return
    if "type" in s and not any(_is(v, t) for t in _types(s["type"])):
        errs.append(f"{where}: {type(v).__name__} is not {s['type']}")
        return
    if "enum" in s and v not in s["enum"]:
        errs.append(f"{where}: {v!r} is not one of {s['enum']}")
    if isinstance(v, str) and "pattern" in s and not re.search(s["pattern"], v):
        errs.append(f"{where}: does not match {s['pattern']}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in s and v < s["minimum"]:
            errs.append(f"{where}: {v} < {s['minimum']}")
        if "maximum" in s and v > s["maximum"]:
            errs.append(f"{where}: {v} > {s['maximum']}")
    if isinstance(v, list):
        if "maxItems" in s and len(v) > s["maxItems"]:
            errs.append(f"{where}: more than {s['maxItems']} items")
        for i, x in enumerate(v):
            if "items" in s:
                _check(x, s["items"], f"{where}[{i}]", errs)
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", []):
            if k not in v:
                errs.append(f"{where}: lacks {k!r}")
        for k, x in v.items():
            if k in props:
                _check(x, props[k], f"{where}.{k}", errs)
            elif s.get("additionalProperties") is False:
                errs.append(f"{where}: unexpected key {k!r}")


def validate(receipt) -> list[str]:
    """The problems of `receipt` against SCHEMA ([] when it is valid)."""
    errs: list[str] = []
    _check(receipt, SCHEMA, "receipt", errs)
    return errs


# ---- building one ------------------------------------------------------------------------------------------------------
def tokenizer_sha256(tok) -> str:
    """A fingerprint of a tokenizer: its kind, pre-tokenizer and normaliser, every id's token string (holes marked),
    the merges in rank order, the special and end ids — the same for the same vocabulary however it was stored. One
    join per table (SmolLM2's 49k tokens: milliseconds, also in Pyodide)."""
    h = hashlib.sha256()
    h.update(f"{tok.kind}|{tok.pre}|{tok.normalizer}|{tok.vocab_size}|".encode())
    h.update("\x00".join("\x01" if t is None else t for t in tok._tokens).encode("utf-8", "surrogatepass"))
    h.update(b"|")
    h.update(",".join(f"{a}:{b}:{m}" for (a, b), (_r, m) in tok._merges.items()).encode())   # (dict order = rank)
    h.update(repr((sorted(tok.special_ids), sorted(tok.eos_ids), sorted(tok._added_ids.items()), tok.bos_id,
                   tok.eos_id, tok.unk_id, tok.add_bos)).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def artifact_of(path: str, kind: str = "model") -> dict:
    """{sha256, format, kind, bytes, files} of a model file (its sha256) or a Hugging Face folder (the sha256 of its
    files' sha256s in file-name order; no names kept)."""
    import os
    from .formats import sha256_file
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith((".safetensors", ".json")))
        files = [{"sha256": sha256_file(os.path.join(path, n)), "bytes": os.path.getsize(os.path.join(path, n))}
                 for n in names]
        sha = hashlib.sha256("".join(f["sha256"] for f in files).encode()).hexdigest()
        return {"sha256": sha, "format": "hf", "kind": kind, "bytes": sum(f["bytes"] for f in files), "files": files}
    return {"sha256": sha256_file(path), "format": "gguf", "kind": kind, "bytes": os.path.getsize(path), "files": []}


def _num(x):
    if x is None or isinstance(x, bool):
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _count(x) -> int:
    try:
        return max(0, int(x or 0))
    except (TypeError, ValueError):
        return 0


def _artifact(a) -> dict | None:
    if not a:
        return None
    files = [{"sha256": f["sha256"], "bytes": _count(f.get("bytes"))} for f in a.get("files") or []
             if isinstance(f, dict) and re.fullmatch(r"[0-9a-f]{64}", str(f.get("sha256", "")))][:64]
    sha = a.get("sha256")
    out = {"sha256": sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) else None,
           "format": a.get("format") if a.get("format") in ("gguf", "hf") else "gguf",
           "kind": a.get("kind") if a.get("kind") in ("model", "head") else "model",
           "bytes": _count(a.get("bytes")) if a.get("bytes") is not None else None}
    if files:
        out["files"] = files
    return out


def _version(v) -> str | None:
    v = None if v is None else str(v)
    return v if v is not None and re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,31}", v) else None


def make_receipt(*, settings: dict, stats: dict, finish_reason: str, failed: str | None = None, seed: int,
                 prompt_tokens: int, champion: dict | None, draft: dict | None = None, tokenizer: dict | None = None,
                 backend: dict | None = None, faults=(), recovery=(), memory: dict | None = None,
                 versions: dict | None = None, policy: dict | None = None, numeric=()) -> dict:
    """A receipt from the pieces the session knows. Only numbers, enums, sha256s and versions are copied in: any
    other value (a name, a path, a message) has no field to go to."""
    import platform
    try:
        import numpy
        np_version = numpy.__version__
    except ImportError:          # pragma: no cover
        np_version = None
    from . import __version__
    s = settings
    rf = s.get("response_format")
    json_mode = "none" if not rf else ("json_schema" if rf.get("type") == "json_schema" else "json_object")
    greedy = float(s.get("temperature", 0) or 0) == 0
    v = {"exactspec": __version__, "python": platform.python_version(), "numpy": np_version,
         "pyodide": None, "engine": None}
    v.update({k: x for k, x in (versions or {}).items() if k in v})
    v = {k: _version(x) for k, x in v.items()}
    pol = {"exactness": "greedy" if greedy else s.get("mode", "coupled"), "bridge_used": None,
           "continued": False, "resumed": False, "speculation_off_after_fault": False}
    for k, x in (policy or {}).items():
        if k in ("continued", "resumed", "speculation_off_after_fault"):
            pol[k] = bool(x)
        elif k == "bridge_used" and x in ("none", "remap", "tli", "slem"):
            pol[k] = x
    if pol["exactness"] not in ("greedy", "coupled", "rejection"):
        pol["exactness"] = "coupled"
    be = backend or {}
    counts = {k: _count(stats.get(k)) for k in (
        "target_passes", "prefill_passes", "draft_passes", "rounds", "proposed", "accepted", "submissions",
        "readback_bytes", "ahead_passes", "wasted_passes", "forced_proposed", "forced_accepted",
        "reused_prefix_tokens", "spec_disabled_rounds")}
    counts.update(dropped_messages=_count(stats.get("dropped_messages", 0)),   # a chat's turns left out (context)
                  row_reads=_count(stats.get("row_reads", 0)),    # JSON mode on a device: rows read again
                  prompt_tokens=_count(prompt_tokens), new_tokens=_count(stats.get("new_tokens")),
                  attempts=_count(stats.get("attempts", 1)),
                  proposed_at=[_count(x) for x in (stats.get("proposed_at") or [])][:64],
                  accepted_at=[_count(x) for x in (stats.get("accepted_at") or [])][:64])
    mem = {"gpu_buffers_bytes": None, "wasm_heap_bytes": None, "cpu_pool_bytes": None, "rss_peak_bytes": None}
    for k, x in (memory or {}).items():
        if k in mem and x is not None:
            mem[k] = _count(x)
    tok = None
    if tokenizer and re.fullmatch(r"[0-9a-f]{64}", str(tokenizer.get("sha256", ""))):
        tok = {"sha256": tokenizer["sha256"], "vocab_size": _count(tokenizer.get("vocab_size"))}
    return {
        "schema": SCHEMA_ID,
        "versions": v,
        "artifacts": {"champion": _artifact(champion), "draft": _artifact(draft), "tokenizer": tok},
        "backend": {"champion": be.get("champion") if be.get("champion") in BACKENDS else None,
                    "draft": be.get("draft") if be.get("draft") in BACKENDS else None,
                    "fallback_adapter": be.get("fallback_adapter") if isinstance(be.get("fallback_adapter"), bool)
                    else None},
        "settings": {
            "speculation": bool(s.get("speculation", s.get("drafter", "none") != "none")),
            "adaptive": bool(s.get("adaptive", False)), "grammar_draft": bool(s.get("grammar_draft", False)),
            "drafter": s.get("drafter", "none"), "bridge": s.get("bridge", "auto"), "k": _count(s.get("k")),
            "k_schedule": s.get("k_schedule", "fixed"), "draft_stop": float(s.get("draft_stop", 0.0) or 0.0),
            "head_copy": bool(s.get("head_copy", False)), "mode": s.get("mode", "coupled"),
            "temperature": float(s.get("temperature", 0.0) or 0.0),
            "top_k": _count(s.get("top_k")), "top_p": float(s.get("top_p", 1.0)),
            "max_new_tokens": _count(s.get("max_new_tokens")), "json_mode": json_mode},
        "policy": pol,
        "seed": _count(seed),
        "finish_reason": finish_reason if finish_reason in ("eos", "length", "stop", "cancelled", "error") else "error",
        "failed": failed if failed in ("champion", "draft", "round", "loop") else None,
        "counts": counts,
        "timings": {"ttft_ms": _num(stats.get("ttft_ms")), "elapsed_ms": _num(stats.get("elapsed_ms")),
                    "tokens_per_s": _num(stats.get("tokens_per_s")), "tau": _num(stats.get("tau")),
                    "mask_ms": _num(stats.get("mask_ms"))},
        "memory": mem,
        "faults": [{"kind": f["kind"], "phase": f["phase"], "round": _count(f.get("round")),
                    "at_round": _count(f.get("at_round")), "at_token": _count(f.get("at_token"))}
                   for f in faults if f.get("kind") in KINDS and f.get("phase") in PHASES][:64],
        "recovery": [{"cause": r["cause"], "action": r["action"], "at_token": _count(r.get("at_token")),
                      "backend": r.get("backend") if r.get("backend") in BACKENDS else None}
                     for r in recovery if r.get("action") in RECOVERIES and
                     r.get("cause") in (*KINDS, "backend_error", "loop_error", "worker_lost")][:64],
        "numeric": [{"what": x["what"], "against": "cpu-reference", "value": float(x["value"])} for x in numeric
                    if x.get("what") in ("max_abs_logit_diff", "top1_agreement") and _num(x.get("value")) is not None
                    ][:16],
    }


def augment(receipt: dict, *, memory: dict | None = None, versions: dict | None = None, recovery=(), faults=(),
            backend: dict | None = None, policy: dict | None = None) -> dict:
    """The receipt with host facts added (the page's GPU memory and Pyodide version, the page's own recoveries), every
    value filtered as make_receipt filters it; returns a new receipt."""
    import copy
    r = copy.deepcopy(receipt)
    for k, x in (memory or {}).items():
        if k in r["memory"] and x is not None:
            r["memory"][k] = _count(x)
    for k, x in (versions or {}).items():
        if k in r["versions"]:
            r["versions"][k] = _version(x)
    for k, x in (backend or {}).items():
        if k in ("champion", "draft") and x in BACKENDS:
            r["backend"][k] = x
        elif k == "fallback_adapter" and isinstance(x, bool):
            r["backend"][k] = x
    for k, x in (policy or {}).items():
        if k in ("continued", "resumed", "speculation_off_after_fault"):
            r["policy"][k] = bool(x)
    extra = make_receipt(settings={}, stats={}, finish_reason="eos", seed=0, prompt_tokens=0, champion=None,
                         faults=faults, recovery=recovery)
    r["faults"] = (extra["faults"] + r["faults"])[:64]
    r["recovery"] = (extra["recovery"] + r["recovery"])[:64]
    return r
