"""JSON mode on SmolLM2's real vocabulary (49,152 byte-level BPE tokens): masks against a brute-force check and
against lm-format-enforcer (a well-kept JSON-schema token enforcer, CPython only), and the champion's answers on the
workload's strict-JSON prompts and on own schemas: always valid, identical with speculation on or off. Slow."""
import asyncio
import json
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest

from exactspec.constrain import Constraint, Grammar, TokenVocab, parse_response_format, parse_schema
from test_json_mode import brute_force_mask, rf_of, sampled_states, schemas, validator

pytestmark = pytest.mark.slow
jsonschema = pytest.importorskip("jsonschema")
ROOT = Path(__file__).resolve().parents[1]
GGUF = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
DRAFT = ROOT / "static" / "models" / "draft-smollm2-kd.gguf"
if not GGUF.exists():
    pytest.skip("SmolLM2 not set up (python build.py setup)", allow_module_level=True)


@pytest.fixture(scope="module")
def smollm():
    from exactspec.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(GGUF)
    return tok, TokenVocab.from_tokenizer(tok, 49152)


def test_masks_equal_brute_force_on_smollm2(smollm):
    tok, vocab = smollm
    rng = random.Random(11)
    cases = [rf_of({"schema": schemas()["workload"][k]}) for k in ("json-01", "json-04", "json-07", "json-11")]
    cases.append({"type": "json_object"})
    cases.append(rf_of({"schema": {"type": "object", "properties": {
        "code": {"type": "string", "minLength": 2, "maxLength": 4}, "tags": {"type": "array", "items": {
            "enum": ["ä", "äb", "€"]}, "minItems": 1, "maxItems": 2}}, "required": ["code", "tags"]}}))
    checked = 0
    for rf in cases:
        c = Constraint(Grammar(parse_response_format(rf)), vocab)
        # states at token boundaries of random documents (tokens drawn uniformly from the mask) and of a tokenised one
        states = [c.start] + rng.sample(sampled_states(c, rng, 6, 4), 3)
        for st in states:
            for budget in (None, 12):
                got = c.mask(st, budget)
                want = brute_force_mask(c, st, budget)
                bad = np.nonzero(got != want)[0]
                assert not bad.size, (rf, st, budget, [vocab.token_bytes[t] for t in bad[:10]])
                some = list(np.flatnonzero(want)[:200]) + rng.sample(range(vocab.vocab_size), 300) + vocab.eos_ids
                assert [c.allows(st, int(t), budget) for t in some] == [bool(want[t]) for t in some]
                checked += 1
    assert checked >= 40


def test_forced_proposals_are_the_tokens_smollm2_writes(smollm):
    tok, vocab = smollm
    c = Constraint(Grammar(parse_schema(schemas()["workload"]["json-01"])), vocab)
    spell = [vocab.token_bytes[i] for i in c.forced(c.start)]
    assert spell == [b'{"', b"name", b'":', b' "']
    st = c.start
    for t in tok.encode('{"name": "Lena Fischer",'):
        st = c.advance(st, t)
    assert [vocab.token_bytes[i] for i in c.forced(st)] == [b' "', b"age", b'":', b" "]


# ---- lm-format-enforcer as the reference ------------------------------------------------------------------------
def lmfe_enforcer(tok, vocab, schema, whitespace_max: int):
    """lm-format-enforcer's TokenEnforcer over the same vocabulary (tokens that are whole UTF-8 text only: it works
    on characters). Its configuration comes from the environment (TokenEnforcer replaces the parser's config)."""
    lmfe = pytest.importorskip("lmformatenforcer")
    from lmformatenforcer.tokenenforcer import TokenEnforcer, TokenEnforcerTokenizerData
    os.environ["LMFE_MAX_CONSECUTIVE_WHITESPACES"] = str(whitespace_max)
    os.environ["LMFE_STRICT_JSON_FIELD_ORDER"] = "true"
    regular, clean = [], np.zeros(vocab.vocab_size, dtype=bool)
    for i, b in enumerate(vocab.token_bytes):
        if b is None:
            continue
        try:
            regular.append((i, b.decode("utf-8"), False))
            clean[i] = True
        except UnicodeDecodeError:
            pass
    data = TokenEnforcerTokenizerData(regular, lambda ids: tok.decode(ids), list(vocab.eos_ids), False,
                                      vocab.vocab_size)
    return TokenEnforcer(data, lmfe.JsonSchemaParser(schema)), clean


def lmfe_mask(te, prompt, ids, V):
    m = np.zeros(V, dtype=bool)
    m[list(te.get_allowed_tokens(prompt + ids).allowed_tokens)] = True
    return m


def completes_validly(c, st, prefix: bytes, tb: bytes, v) -> bool:
    """prefix + token, completed along a shortest completion, is a document jsonschema accepts."""
    g = c.grammar
    s = g.walk(st, tb)
    if s is None:
        return False
    tail = bytearray()
    while not g.accepting(s):
        b = min(g.next_bytes(s), key=lambda b: g.min_bytes(g.step(s, b)))
        s = g.step(s, b)
        tail.append(b)
    v.validate(json.loads((prefix + tb + bytes(tail)).decode("utf-8")))
    return True


LMFE_SCHEMAS = {
    "flat": {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {
            "type": "string", "enum": ["red", "green"]}}, "score": {"type": "number"}, "ok": {"type": "boolean"},
        "none": {"type": "null"}}, "required": ["name", "age", "tags", "score", "ok", "none"],
        "additionalProperties": False},
    "nested": {"type": "object", "properties": {"people": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "role": {"type": "string"}}, "required": ["name", "role"],
        "additionalProperties": False}}}, "required": ["people"], "additionalProperties": False},
}
LMFE_DOCS = {
    "flat": ['{"name":"L\u00e9na \\"F\\" \\u00e9","age":-34,"tags":["red","green"],"score":1.5e3,"ok":true,"none":null}',
             '{"name":"","age":0,"tags":[],"score":-0.25,"ok":false,"none":null}'],
    "nested": ['{"people":[{"name":"Kofi","role":"chair"},{"name":"Mei","role":"treasurer"}]}'],
}


def classify_lmfe_only(text_before: str, tb: bytes) -> str | None:
    """Why lm-format-enforcer allows a token we refuse, if it is one of the known, documented differences."""
    if any(b < 0x20 for b in tb):
        return "raw control character in a string (invalid JSON; lmfe allows it)"
    joined = text_before[-6:] + tb.decode("utf-8")
    m = re.search(r"\\u[dD][89a-fA-F]", joined)
    if m and m.end() > len(text_before[-6:]):
        return "\\u escape of a surrogate (we refuse it: the character itself is written)"
    if tb[:1] in (b"e", b"E"):
        tail = text_before.rstrip("0123456789")
        if tail.endswith("."):
            return "exponent right after '.' (invalid JSON, e.g. 1.e5; lmfe allows it)"
        return "exponent after an integer's digits (integers are written without one; lmfe allows it)"
    return None


@pytest.mark.parametrize("name", sorted(LMFE_SCHEMAS))
def test_masks_agree_with_lm_format_enforcer(smollm, name):
    """Compact whitespace (lmfe: no whitespace, strict field order): the masks are equal on every whole-UTF-8 token,
    except for documented differences, each of which is checked: tokens only we allow must lead to documents that
    jsonschema accepts (lmfe misses tokens that close a string and go on past it); tokens only lmfe allows must be
    invalid JSON or outside our stated number policy. Spaced whitespace (lmfe: up to one blank anywhere): our masks
    are contained in lmfe's, except for tokens that close a string and go on."""
    tok, vocab = smollm
    schema = LMFE_SCHEMAS[name]
    V = vocab.vocab_size
    v = jsonschema.Draft202012Validator(schema)
    prompt = [1, 2, 3]
    reasons: dict[str, int] = {}
    for whitespace, ws_max, docs in (("compact", 0, LMFE_DOCS[name]),
                                     ("spaced", 1, [json.dumps(json.loads(d), ensure_ascii=False)
                                                    for d in LMFE_DOCS[name]])):
        c = Constraint(Grammar(parse_schema(schema), whitespace=whitespace), vocab)
        te, clean = lmfe_enforcer(tok, vocab, schema, ws_max)
        for doc in docs:
            v.validate(json.loads(doc))
            ids = tok.encode(doc)
            st = c.start
            for k in range(len(ids) + 1):
                ours = c.mask(st) & clean
                theirs = lmfe_mask(te, prompt, ids[:k], V) & clean
                text = tok.decode(ids[:k])
                for t in np.nonzero(ours & ~theirs)[0].tolist():
                    tb = vocab.token_bytes[t]
                    assert b'"' in tb[:-1], (whitespace, text, tb)               # closes a string and goes on
                    assert completes_validly(c, st, text.encode("utf-8"), tb, v), (whitespace, text, tb)
                    reasons["string closed mid-token (lmfe misses it)"] = reasons.get(
                        "string closed mid-token (lmfe misses it)", 0) + 1
                if whitespace == "compact":
                    for t in np.nonzero(theirs & ~ours)[0].tolist():
                        why = classify_lmfe_only(text, vocab.token_bytes[t])
                        assert why is not None, (text, vocab.token_bytes[t])
                        reasons[why] = reasons.get(why, 0) + 1
                if k < len(ids):
                    st = c.advance(st, ids[k])
                    assert st is not None, (doc, k)
            assert c.grammar.accepting(st)
    print(json.dumps(reasons, indent=1))


# ---- the champion's answers --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def session():
    from exactspec.reference import ReferenceModel
    from exactspec.session import Session
    s = Session()
    s.load("smollm2", str(GGUF), role="champion", backend=ReferenceModel.from_file(GGUF, max_len=1024),
           backend_name="cpu")
    if DRAFT.exists():
        s.load("draft", str(DRAFT), role="draft", backend=ReferenceModel.from_file(DRAFT, max_len=1024),
               backend_name="cpu")
    return s


def ask(s, messages, rf, **kw):
    for m in s.models.values():
        m.cache.truncate(0)
    return asyncio.run(s.generate({"chat": messages, "response_format": rf, **kw}))


def test_workload_strict_json_answers_are_valid_and_speculation_changes_nothing(session):
    rows = [json.loads(x) for x in (ROOT / "tests" / "data" / "workload.jsonl").read_text().splitlines() if x]
    rows = [r for r in rows if r["stratum"] == "json_extraction"]
    drafter = {"drafter": "model", "k": 4} if DRAFT.exists() else {"drafter": "ngram", "k": 4}
    taus = []
    for r in rows:
        rf = {"type": "json_schema", "schema": schemas()["workload"][r["id"]]}
        plain = ask(session, r["messages"], rf, max_new_tokens=r["max_new_tokens"], speculation=False)
        spec = ask(session, r["messages"], rf, max_new_tokens=r["max_new_tokens"], adaptive=False, **drafter)
        assert spec["token_ids"] == plain["token_ids"], r["id"]
        validator(rf).validate(json.loads(plain["text"]))
        taus.append(spec["stats"]["tau"])
        assert spec["stats"]["forced_accepted"] > 0
    assert min(taus) > 1.5, taus


def test_coupled_sampling_and_own_schemas(session):
    """Every own schema (nested objects, enums, arrays, numbers, any JSON object): greedy and coupled answers valid
    and the same with speculation off, forced drafting alone, the n-gram drafter and the draft model."""
    own = schemas()["own"]
    confs = [{"speculation": False}, {"drafter": "ngram", "k": 4, "adaptive": False},
             {"drafter": "none", "grammar_draft": True}]
    if DRAFT.exists():
        confs.append({"drafter": "model", "k": 4, "adaptive": False})
    for name in ("nested", "enums", "arrays", "numbers", "any_object"):
        e = own[name]
        rf = rf_of(e)
        msgs = [{"role": "user", "content": e["prompt"]}]
        for temperature, seed, cs in ((0.7, 5, confs), (0.0, 0, [confs[0], confs[-1]])):
            outs = [ask(session, msgs, rf, max_new_tokens=160, temperature=temperature, seed=seed, **conf)
                    for conf in cs]
            for o, conf in zip(outs[1:], cs[1:]):
                assert o["token_ids"] == outs[0]["token_ids"], (name, temperature, conf)
            validator(rf).validate(json.loads(outs[0]["text"]))
            assert outs[-1]["stats"]["forced_proposed"] > 0 or name == "any_object", name


# ---- the same masks in Pyodide ------------------------------------------------------------------------------------
_PYODIDE_MASKS = r"""
import { loadPyodide } from '%(rt)s/pyodide.mjs';
const py = await loadPyodide({ indexURL: '%(rt)s/' });
await py.loadPackage(['numpy']);
py.FS.mkdir('/host'); py.FS.mount(py.FS.filesystems.NODEFS, { root: '/' }, '/host');
const r = await py.runPythonAsync(`
import sys, json, hashlib, traceback
sys.path.insert(0, '/host' + %(py)s)
from exactspec.tokenizer import Tokenizer
from exactspec.constrain import Constraint, Grammar, TokenVocab, parse_response_format
tok = Tokenizer.from_gguf('/host' + %(gguf)s)
vocab = TokenVocab.from_tokenizer(tok, 49152)
out = []
try:
    for rf, docs in json.load(open('/host' + %(cases)s)):
        c = Constraint(Grammar(parse_response_format(rf)), vocab)
        for doc in docs:
            st = c.start
            for t in tok.encode(doc):
                out.append(hashlib.sha256(c.mask(st, 20).tobytes()).hexdigest()[:16] + ' ' + str(c.forced(st)))
                st = c.advance(st, t)
    res = json.dumps({'python': sys.version.split()[0], 'digests': out})
except BaseException:
    res = json.dumps({'error': traceback.format_exc()})
res
`);
console.log('RESULT ' + r);
process.exit(0);
"""


def test_masks_and_forced_runs_are_the_same_in_pyodide(smollm, tmp_path):
    import hashlib
    import shutil
    import subprocess
    rt_src = ROOT / "static" / "pyodide" / "0.27.7"
    node = shutil.which("node")
    if node is None or not (rt_src / "pyodide.mjs").exists():
        pytest.skip("Pyodide runtime not laid out (python build.py setup) or node missing")
    tok, vocab = smollm
    cases = [({"type": "json_schema", "schema": schemas()["workload"]["json-11"]},
              ['{"people": [{"name": "Kofi", "role": "chair"}, {"name": "Mei", "role": "treasurer \\u00e9 é"}]}']),
             ({"type": "json_object"}, ['{"a": [1, -2.5e3, true, null, {"b": "ü\\n"}], "c": {}}'])]
    want = []
    for rf, docs in cases:
        c = Constraint(Grammar(parse_response_format(rf)), vocab)
        for doc in docs:
            st = c.start
            for t in tok.encode(doc):
                want.append(hashlib.sha256(c.mask(st, 20).tobytes()).hexdigest()[:16] + " " + str(c.forced(st)))
                st = c.advance(st, t)
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    rt = tmp_path / "rt"   # outside the repo: its package.json would make node load pyodide.asm.js as ESM
    shutil.copytree(rt_src, rt)
    script = tmp_path / "run.mjs"
    script.write_text(_PYODIDE_MASKS % {"rt": rt, "py": json.dumps(str(ROOT / "py")),
                                        "gguf": json.dumps(str(GGUF.resolve())),
                                        "cases": json.dumps(str(tmp_path / "cases.json"))})
    proc = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    res = json.loads(line[len("RESULT "):])
    assert "error" not in res, res.get("error")
    assert res["python"].startswith("3.12")
    assert res["digests"] == want
