"""JSON mode: the schema subset (and its refusals), the byte-level grammar, token masks against a brute-force check,
grammar-forced drafting, exact constrained decoding (speculation changes nothing), the session and the CLI.

Fast: toy vocabularies with tricky tokens (several grammar elements in one token, partial UTF-8, escapes) and toy /
micro models. SmolLM2's own vocabulary and lm-format-enforcer: tests/test_json_mode_smollm2.py (slow)."""
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from exactspec.constrain import Constraint, Grammar, NO, SchemaError, TokenVocab, parse_response_format, parse_schema
from exactspec.backend import RunsAhead, verify_by_forwards
from exactspec.decode import GenerateConfig, generate
from toy import ToyLM

jsonschema = pytest.importorskip("jsonschema")
ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "tests" / "data" / "json_schemas.json"
SCHEMAS_SHA256 = "970d95f44fa3624d8146ecb4ed1aafec21723132925a37160cc04db156676fc7"

# tokens spanning several grammar elements, partial UTF-8, escapes, literals cut anywhere
TRICKY = [b'{"', b'":', b'": ', b' "', b'",', b'", "', b'"}', b'"},', b'"}]', b'}]', b'},', b'}, {"', b'[{"', b'["',
          b'"]', b'", ', b', "', b', ', b'true', b'false', b'null', b'nul', b'l}', b'12', b'-0', b'0.', b'.5', b'e+',
          b'5e', b'\\u', b'\\u00', b'e9"', b'\\n', b'\\"', b'\xc3', b'\xa9', b'\xa9"', b'\xc3\xa9', b'\xe2\x82', b'\xac',
          b'\xe2\x82\xac"', b'\xf0\x9f', b'\x98\x80', b'\xed\xa0', b'\\ud8', b'name', b'age', b'"name', b'name":',
          b'Lena', b' Fischer', b'ab', b'"a', b'a"', b'"ab"', b'"ba"', b'"aa"', b'red', b'"red"', b'], "', b'1, ',
          b'34', b'0}', b'3}', b'":{"', b'": {"', b'": ["', b'": [', b'[]', b'{}', b'""', b'":"', b'","', b'"x', b'x"']


def toy_vocab(extra=TRICKY):
    """id 0: EOS (special, not text), ids 1..256: the single bytes, then the tricky tokens."""
    toks = [None] + [bytes((b,)) for b in range(256)] + list(extra)
    return TokenVocab(toks, eos_ids=[0])


def schemas():
    return json.loads(SCHEMAS.read_text())


def rf_of(entry) -> dict:
    return entry.get("response_format") or {"type": "json_schema", "schema": entry["schema"]}


def validator(rf: dict):
    schema = rf["schema"] if rf["type"] == "json_schema" else {"type": "object"}
    return jsonschema.Draft202012Validator(schema)


TOY_SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
                                      "opt": {"type": "boolean"}, "city": {"type": "string", "minLength": 2}},
     "required": ["name", "age", "city"], "additionalProperties": False},
    {"type": "object", "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "object", "properties": {"product": {"type": "string"}, "qty": {"type": "integer"}},
        "required": ["product", "qty"]}}}, "required": ["items"]},
    {"type": "object", "properties": {"s": {"enum": ["ab", "ba", "aa", 1, 12, None, {"a": [1, 2]}]},
                                      "n": {"type": ["number", "null"]},
                                      "x": {"type": "array", "items": {"type": "number"}, "minItems": 2}}},
    {"type": "array", "items": {"type": "string", "enum": ["red", "green"]}, "maxItems": 4},
    {"type": "integer"},
    {},
]


# ---- the frozen schemas -------------------------------------------------------------------------------------------
def test_schema_file_is_frozen_and_covers_the_workload():
    assert hashlib.sha256(SCHEMAS.read_bytes()).hexdigest() == SCHEMAS_SHA256, "tests/data/json_schemas.json changed"
    d = schemas()
    rows = [json.loads(x) for x in (ROOT / "tests" / "data" / "workload.jsonl").read_text().splitlines() if x]
    assert sorted(d["workload"]) == sorted(r["id"] for r in rows if r["stratum"] == "json_extraction")
    for s in d["workload"].values():
        parse_schema(s)
        jsonschema.Draft202012Validator.check_schema(s)
    for e in d["own"].values():
        assert parse_response_format(rf_of(e)) is not None


# ---- the subset and its refusals ----------------------------------------------------------------------------------
def test_unsupported_keywords_are_named_with_their_place():
    schema = {"type": "object", "patternProperties": {"^a": {}}, "properties": {
        "date": {"type": "string", "pattern": "^[0-9]{4}$", "format": "date"},
        "age": {"type": "integer", "minimum": 0},
        "who": {"$ref": "#/$defs/p"}, "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"not": {}}}}}}}
    with pytest.raises(SchemaError) as e:
        parse_schema(schema)
    msg = str(e.value)
    for frag in ("'patternProperties' at /", "'pattern' at /properties/date", "'format' at /properties/date",
                 "'minimum' at /properties/age", "'$ref' at /properties/who", "'anyOf' at /properties/either",
                 "'not' at /properties/list/items/properties/x", "JSON mode supports"):
        assert frag in msg, (frag, msg)


@pytest.mark.parametrize("schema,frag", [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "names ['b']"),
    ({"type": "string", "maxLength": -1}, "maxLength at / must be a whole number"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "maxLength 2 < minLength 5"),
    ({"type": "array", "minItems": 3, "maxItems": 1}, "maxItems 1 < minItems 3"),
    ({"type": "array", "items": [{"type": "string"}]}, "tuple validation"),
    ({"type": "object", "additionalProperties": {"type": "string"}}, "'additionalProperties' as a schema"),
    ({"enum": []}, "non-empty list"),
    ({"type": "strin"}, "unknown type(s) ['strin']"),
    ({"type": "string", "enum": ["a", 3]}, "does not match type string"),
    ({"const": float("nan")}, "not JSON"),
    ({"type": ["string", "string"]}, "lists a type twice"),
    ({"enum": ["a"], "const": "a"}, "both enum and const"),
    ({"minLength": 1, "items": {}}, "mixes keywords of array and string"),
    (False, "no value is valid"),
    ("{not json", "not valid JSON"),
    ([1, 2], "must be an object or a boolean"),
])
def test_bad_schemas_are_refused_clearly(schema, frag):
    with pytest.raises(SchemaError, match=None) as e:
        parse_schema(schema)
    assert frag in str(e.value), str(e.value)


def test_response_format_shapes():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    want = parse_schema(schema)
    assert parse_response_format(None) is None and parse_response_format({"type": "text"}) is None
    assert parse_response_format({"type": "json_object"}) == ("any_object",)
    assert parse_response_format({"type": "json_schema", "schema": schema}) == want
    assert parse_response_format({"type": "json_schema", "schema": json.dumps(schema)}) == want
    assert parse_response_format({"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                                         "schema": schema}}) == want
    assert parse_response_format(json.dumps({"type": "json_schema", "schema": schema})) == want
    for bad, frag in (({"type": "json"}, "must be 'json_schema'"), ({"type": "json_schema"}, "needs a schema"),
                      ({"type": "json_object", "schema": schema}, "takes no schema"),
                      ({"type": "json_schema", "schema": schema, "extra": 1}, "unknown field(s) 'extra'"),
                      (3, "must be an object"), ("{", "not valid JSON")):
        with pytest.raises(SchemaError) as e:
            parse_response_format(bad)
        assert frag in str(e.value), (bad, str(e.value))


# ---- the grammar ------------------------------------------------------------------------------------------------
def accepts(g: Grammar, text: str) -> bool:
    s = g.walk(g.start, text.encode("utf-8"))
    return s is not None and g.accepting(s)


def test_whitespace_policy_and_json_details():
    g = Grammar(parse_schema(TOY_SCHEMAS[0]))
    assert accepts(g, '{"name": "Lena", "age": 34, "city": "Graz"}')
    assert accepts(g, '{"name": "Lena", "age": 34, "opt": true, "city": "Graz"}')
    for bad in ('{ "name": "Lena", "age": 34, "city": "Graz"}', '{"name" : "Lena", "age": 34, "city": "Graz"}',
                '{"name":"Lena","age":34,"city":"Graz"}', '{"name": "Lena", "age": 34, "city": "Graz" }',
                '{"name": "Lena", "age": 34, "city": "Graz"}\n', '{"age": 34, "name": "Lena", "city": "Graz"}',
                '{"name": "Lena", "age": 34}', '{"name": "Lena", "age": 034, "city": "Graz"}',
                '{"name": "Lena", "age": 3.5, "city": "Graz"}', '{"name": "Lena", "age": 1e3, "city": "Graz"}',
                '{"name": "Lena Fischer", "age": 34, "city": "Graz"}',      # maxLength 6
                '{"name": "Lena", "age": 34, "city": "G"}',                  # minLength 2
                '{"name": "Lena", "age": 34, "city": "Graz", "x": 1}'):
        assert not accepts(g, bad), bad
    c = Grammar(parse_schema(TOY_SCHEMAS[0]), whitespace="compact")
    assert accepts(c, '{"name":"Lena","age":34,"city":"Graz"}')
    assert not accepts(c, '{"name": "Lena", "age": 34, "city": "Graz"}')
    s = Grammar(parse_schema({"type": "string"}))
    for good in ('"a\\"b\\\\c\\/\\b\\f\\n\\r\\t"', '"\\u00e9\\uFFFD"', '"é€😀"', '"\x7f"'):
        assert accepts(s, good), good
    for bad in (b'"a\nb"', b'"\\x"', b'"\\ud800"', b'"\\uDFFF"', b'"\xed\xa0\x80"', b'"\xc0\xaf"',
                b'"\xf4\x90\x80\x80"', b'"\xe0\x80\x80"', b'"\xff"'):
        st = s.walk(s.start, bad)
        assert st is None or not s.accepting(st), bad
    assert s.walk(s.start, b'"\xe0\x80') is None and s.walk(s.start, b'"\xc3\xa9"') is not None
    n = Grammar(parse_schema({"type": "number"}))
    for good in ("0", "-0", "12.5", "1e9", "-3.25E+10", "9" * 15, "0." + "1" * 15):
        assert accepts(n, good), good
    for bad in ("01", "1.", ".5", "+1", "1e", "9" * 16, "1e999", "-", "1.e5"):
        assert not accepts(n, bad), bad


def random_document(g: Grammar, rng: random.Random, soft_limit: int = 120) -> bytes:
    """A random walk over the grammar's bytes (closing along a shortest completion after soft_limit bytes);
    checks min_bytes against its Bellman equation on the way."""
    st, out = g.start, bytearray()
    while True:
        acc = g.accepting(st)
        nxt = g.next_bytes(st)
        # next_bytes and only_byte (from per-frame memos) against every byte stepped through the grammar
        assert nxt == [b for b in range(256) if g.step(st, b) is not None], (bytes(out), st)
        assert g.only_byte(st) == (nxt[0] if len(nxt) == 1 else None), (bytes(out), st)
        mb = g.min_bytes(st)
        if acc:
            assert mb == 0
        else:
            assert mb == min(1 + g.min_bytes(g.step(st, b)) for b in nxt), (bytes(out), st)
        if not nxt or (acc and (len(out) > soft_limit or rng.random() < 0.15)):
            return bytes(out)
        if len(out) > soft_limit:
            b = min(nxt, key=lambda b: g.min_bytes(g.step(st, b)))
        else:
            b = rng.choice(nxt)
        st = g.step(st, b)
        out.append(b)


@pytest.mark.parametrize("i", range(len(TOY_SCHEMAS)))
def test_random_documents_parse_validate_and_min_bytes_is_exact(i):
    schema = TOY_SCHEMAS[i]
    g = Grammar(parse_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    rng = random.Random(i)
    for _ in range(60):
        doc = random_document(g, rng)
        v.validate(json.loads(doc.decode("utf-8")))


def test_random_documents_of_the_workload_schemas():
    """The frozen workload schemas (tests/data/json_schemas.json) walked as above: next_bytes / only_byte against
    every byte stepped through the grammar at every state, min_bytes exact, every document valid."""
    for name, schema in json.loads((ROOT / "tests" / "data" / "json_schemas.json").read_text())["workload"].items():
        g = Grammar(parse_schema(schema))
        v = jsonschema.Draft202012Validator(schema)
        rng = random.Random(name)
        for _ in range(12):
            v.validate(json.loads(random_document(g, rng).decode("utf-8")))


def test_any_json_object_documents():
    g = Grammar(parse_response_format({"type": "json_object"}))
    rng = random.Random(5)
    for _ in range(60):
        doc = json.loads(random_document(g, rng).decode("utf-8"))
        assert isinstance(doc, dict)


# ---- masks against a brute-force check ----------------------------------------------------------------------------
def brute_force_mask(c: Constraint, state, budget):
    """Every token's bytes run through the grammar, one byte at a time."""
    g, vocab = c.grammar, c.vocab
    out = np.zeros(vocab.vocab_size, dtype=bool)
    for t, tb in enumerate(vocab.token_bytes):
        if tb is None:
            out[t] = t in vocab.eos_ids and g.accepting(state)
            continue
        s = g.walk(state, tb)
        out[t] = s is not None and (budget is None or g.min_bytes(s) <= budget - 1)
    return out


def sampled_states(c: Constraint, rng: random.Random, n_docs: int, per_doc: int):
    """States reached at token boundaries along random tokenised documents."""
    states = []
    for _ in range(n_docs):
        st = c.start
        for _ in range(200):
            allowed = np.nonzero(c.mask(st))[0]
            allowed = [t for t in allowed.tolist() if t not in c.vocab.eos_ids]
            if not allowed:
                break
            if rng.random() < per_doc / 20:
                states.append(st)
            st = c.advance(st, rng.choice(allowed))
    return states


@pytest.mark.parametrize("i", range(len(TOY_SCHEMAS)))
def test_masks_equal_brute_force_on_a_toy_vocabulary(i):
    vocab = toy_vocab()
    c = Constraint(Grammar(parse_schema(TOY_SCHEMAS[i])), vocab)
    rng = random.Random(100 + i)
    states = [c.start] + sampled_states(c, rng, 16, 6)
    assert len(states) > 15
    for st in states:
        for budget in (None, 1, 2, 5, 30):
            want = brute_force_mask(c, st, budget)
            got = c.mask(st, budget)
            assert np.array_equal(got, want), (st, budget, [vocab.token_bytes[t] for t in np.nonzero(got != want)[0]])
            one = np.array([c.allows(st, t, budget) for t in range(vocab.vocab_size)])    # a token at a time
            assert np.array_equal(one, want), (st, budget)
        cost = c.cost(st)
        assert ((cost < NO) == brute_force_mask(c, st, None)).all()


def test_masks_cover_strings_with_partial_utf8_and_escapes():
    vocab = toy_vocab()
    c = Constraint(Grammar(parse_schema({"type": "string", "maxLength": 3})), vocab)
    tid = {b: i for i, b in enumerate(vocab.token_bytes)}
    st = c.advance(c.start, tid[b'"'])
    st = c.advance(st, tid[b'\xc3'])                      # half a character
    m = c.mask(st)
    assert m[tid[b'\xa9']] and m[tid[b'\xa9"']] and not m[tid[b'"']] and not m[tid[b'a']]
    st = c.advance(st, tid[b'\xa9'])
    st = c.advance(st, tid[b'\\u00'])                     # an escape, cut
    m = c.mask(st)
    assert m[tid[b'e9"']] and not m[tid[b'"']]
    st = c.advance(st, tid[b'e9"'])                       # "é\u00e9" closes: 2 characters
    assert c.grammar.accepting(st) and c.done(st)
    st = c.advance(c.advance(c.start, tid[b'"']), tid[b'\\u'])       # \ud8.. would be a surrogate: refused
    assert c.advance(st, tid[b'd']) is not None and c.advance(c.advance(st, tid[b'd']), tid[b'8']) is None
    assert not c.mask(c.advance(c.start, tid[b'"']))[tid[b'\\ud8']]


def test_forced_continuations():
    vocab = toy_vocab()
    sch = TOY_SCHEMAS[0]
    c = Constraint(Grammar(parse_schema(sch)), vocab)
    spell = lambda ids: b"".join(vocab.token_bytes[i] for i in ids)
    assert spell(c.forced(c.start)) == b'{"name": "'          # longest match: {"  name":  space?  ...
    st = c.start
    for t in c.forced(c.start):
        st = c.advance(st, t)
    assert c.forced(st) == []                                 # inside a free string
    st = c.grammar.walk(st, b'Lena"')
    assert spell(c.forced(st)) == b', "age": '                # the next required key, in schema order
    st = c.grammar.walk(st, b', "a')
    assert spell(c.forced(st)) == b'ge": '
    st = c.grammar.walk(st, b'ge": 34')
    assert c.forced(st) == []                                 # more digits, or the separator
    st = c.grammar.walk(st, b',')
    assert spell(c.forced(st)) == b' "'                       # then "opt" or "city": two keys may follow
    arr = Constraint(Grammar(parse_schema({"type": "array", "items": {"enum": ["red"]}, "minItems": 2,
                                           "maxItems": 2})), vocab)
    assert spell(arr.forced(arr.start)) == b'["red", "red"]'
    st = arr.start
    for t in arr.forced(arr.start):
        st = arr.advance(st, t)
    assert arr.done(st) and arr.forced(st) == []


def test_vocabulary_without_single_byte_tokens_is_refused():
    toks = [None] + [bytes((b,)) for b in range(256) if b != ord("}")] + [b"}}"]
    with pytest.raises(SchemaError, match="0x7d"):
        Constraint(Grammar(parse_schema({"type": "object"})), TokenVocab(toks, eos_ids=[0]))


# ---- decoding -------------------------------------------------------------------------------------------------------
CONFIGS = [dict(drafter="none", k=0, grammar_draft=False), dict(drafter="none", k=0, grammar_draft=True),
           dict(drafter="ngram", k=3), dict(drafter="model", k=4), dict(drafter="model", k=2, grammar_draft=False)]


@pytest.mark.parametrize("temperature,mode", [(0.0, "coupled"), (0.8, "coupled"), (1.5, "coupled")])
def test_speculation_and_forcing_change_nothing_and_answers_validate(temperature, mode):
    vocab = toy_vocab()
    V = vocab.vocab_size
    cases = [{"type": "json_schema", "schema": s} for s in TOY_SCHEMAS[:4]] + [{"type": "json_object"}]
    n_forced = 0
    for ci, rf in enumerate(cases):
        c = Constraint(Grammar(parse_response_format(rf)), vocab)
        v = validator(rf)
        for seed in range(3):
            prompt = [5 + seed, 40, 41, 42]
            base = None
            for conf in CONFIGS:
                draft = ToyLM(V, seed=0, blend=(1, 0.4)) if conf["drafter"] == "model" else None
                res = generate(ToyLM(V, seed=0), prompt, GenerateConfig(
                    adaptive=False, response_format=rf, max_new_tokens=60, temperature=temperature, seed=seed,
                    mode=mode, **conf), draft=draft, constraint=c, eos_ids=vocab.eos_ids)
                if base is None:
                    base = res
                    text = b"".join(vocab.token_bytes[t] for t in res.token_ids).decode("utf-8")
                    v.validate(json.loads(text))
                    assert res.finish_reason in ("eos", "length")
                assert res.token_ids == base.token_ids, (ci, seed, conf)
                st = res.stats
                assert st["forced_accepted"] <= st["forced_proposed"]
                if not conf.get("grammar_draft", True):
                    assert st["forced_proposed"] == 0
                n_forced += st["forced_proposed"]
                assert st["mask_ms"] >= 0
    assert n_forced > 0


def test_forced_tokens_cost_no_draft_pass_and_raise_tau():
    vocab = toy_vocab()
    rf = {"type": "json_schema", "schema": {"type": "object", "properties": {
        "first_name": {"enum": ["ab"]}, "last_name": {"enum": ["ba"]}, "n": {"type": "integer"}},
        "required": ["first_name", "last_name", "n"]}}
    c = Constraint(Grammar(parse_response_format(rf)), vocab)
    V = vocab.vocab_size
    on = generate(ToyLM(V, seed=0), [3, 4], GenerateConfig(adaptive=False, response_format=rf, drafter="none", k=0,
                                                           max_new_tokens=80), constraint=c, eos_ids=[0])
    off = generate(ToyLM(V, seed=0), [3, 4], GenerateConfig(adaptive=False, response_format=rf, drafter="none", k=0,
                                                            max_new_tokens=80, grammar_draft=False),
                   constraint=c, eos_ids=[0])
    assert on.token_ids == off.token_ids
    assert on.stats["draft_passes"] == 0 and on.stats["forced_proposed"] >= 4
    assert on.stats["target_passes"] < off.stats["target_passes"]
    assert off.stats["tau"] == 1.0 and on.stats["tau"] > 1.5
    assert on.stats["acceptance_by_position"] == [] and on.stats["proposed"] == 0


class Device(RunsAhead):
    """A device in CPython: runs ahead (ahead_max 8) and verifies with its argmax ids (exactspec.backend's
    verify_by_forwards), as the WebGPU engine does; `verifies` counts its verify calls."""
    verifies = 0

    def verify(self, tokens, start_pos, pick, rows=False):
        self.verifies += 1
        return verify_by_forwards(self.inner, tokens, start_pos, pick, rows, picker=self.picker)


def test_json_mode_on_a_device_confirms_from_argmax_ids():
    """Greedy JSON mode on a device reads back the device's argmax ids, not whole rows: a verify's rows, and a round
    with nothing to verify runs ahead (decode_ahead) instead of a pass a token. A row's token is the id where the
    grammar's mask allows it, the one allowed token where the mask allows one, else its row is computed again and
    picked as the rows path picks. The same tokens as the rows path (the toy model's argmax is refused often: every
    way is taken); coupled mode keeps the rows."""
    vocab = toy_vocab()
    V = vocab.vocab_size
    cases = [{"type": "json_schema", "schema": s} for s in TOY_SCHEMAS[:4]] + [{"type": "json_object"}]
    reads = from_ids = ahead = 0      # rows read again; verify rounds confirmed from ids alone; passes run ahead
    bytes_ids = bytes_rows = 0
    for ci, rf in enumerate(cases):
        c = Constraint(Grammar(parse_response_format(rf)), vocab)
        for seed in range(2):
            prompt = [5 + seed, 40, 41, 42]
            for conf in CONFIGS[:4]:
                for temperature in (0.0, 0.8):
                    def run(device):
                        draft = ToyLM(V, seed=0, blend=(1, 0.4)) if conf["drafter"] == "model" else None
                        champ = Device(ToyLM(V, seed=0)) if device else ToyLM(V, seed=0)
                        res = generate(champ, prompt, GenerateConfig(
                            adaptive=False, response_format=rf, max_new_tokens=60, temperature=temperature,
                            seed=seed, mode="coupled", **conf), draft=draft, constraint=c, eos_ids=vocab.eos_ids)
                        return res, champ
                    (rows, _), (ids, dev) = run(False), run(True)
                    assert ids.token_ids == rows.token_ids, (ci, seed, conf, temperature)
                    assert ids.finish_reason == rows.finish_reason
                    assert rows.stats["row_reads"] == 0 and rows.stats["ahead_passes"] == 0
                    if temperature:           # coupled: the rows, as without a device
                        assert dev.verifies == 0 and not dev.calls and ids.stats["row_reads"] == 0
                        assert ids.stats["readback_bytes"] == rows.stats["readback_bytes"]
                        assert ids.stats["rounds"] == rows.stats["rounds"]
                        continue
                    st = ids.stats
                    # the champion's passes: verifies (ids), a run's confirmed ones, and one per row read again
                    again = st["target_passes"] - dev.verifies - (st["ahead_passes"] - st["wasted_passes"])
                    assert again == st["row_reads"]
                    assert st["ahead_passes"] == sum(c[2] for c in dev.calls)
                    if not conf.get("grammar_draft", True):     # the champion alone: every token a run's
                        assert dev.verifies == 0 and st["ahead_passes"] > 0
                    assert not any(c[3] for c in dev.calls)              # (no continuation hinted)
                    reads += st["row_reads"]
                    ahead += st["ahead_passes"]
                    from_ids += dev.verifies
                    bytes_ids += st["readback_bytes"]
                    bytes_rows += rows.stats["readback_bytes"]
    assert reads > 0 and from_ids > 0 and ahead > 0
    assert bytes_ids < bytes_rows


def test_budget_keeps_every_answer_complete():
    vocab = toy_vocab()
    rf = {"type": "json_schema", "schema": TOY_SCHEMAS[1]}
    c = Constraint(Grammar(parse_response_format(rf)), vocab)
    v = validator(rf)
    need = c.min_tokens(c.start)
    assert need == len('{"items": [{"product": "", "qty": 0}]}')
    for budget in (need, need + 1, need + 7, 50):
        for seed in range(4):
            res = generate(ToyLM(vocab.vocab_size, seed=seed), [7, 8, 9], GenerateConfig(
                adaptive=False, response_format=rf, max_new_tokens=budget, temperature=1.0, seed=seed,
                drafter="none", k=0), constraint=c, eos_ids=[0])
            assert len(res.token_ids) <= budget
            v.validate(json.loads(b"".join(vocab.token_bytes[t] for t in res.token_ids).decode("utf-8")))
    with pytest.raises(ValueError, match=f"too small for this schema: its shortest answer takes {need} tokens"):
        generate(ToyLM(vocab.vocab_size, seed=0), [7], GenerateConfig(response_format=rf, max_new_tokens=need - 1),
                 constraint=c, eos_ids=[0])
    with pytest.raises(ValueError, match="stop strings cannot be used in JSON mode"):
        GenerateConfig(response_format=rf, stop=("}",)).validate()


def test_rejection_mode_keeps_the_masked_distribution():
    """Rejection mode with a draft model and forced proposals: the law of the emitted token sequence is the
    champion's own masked law (exact enumeration over every tokenisation of every valid document)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    toks = [None] + [bytes((b,)) for b in range(256)] + [b'{"', b'": ', b'"ab"', b'", "', b'ab', b'"}']
    vocab = TokenVocab(toks, eos_ids=[0])
    rf = {"type": "json_schema", "schema": {"type": "object", "properties": {
        "x": {"enum": ["ab", "ba"]}, "y": {"type": "boolean"}}, "required": ["x", "y"]}}
    c = Constraint(Grammar(parse_response_format(rf)), vocab)
    V = vocab.vocab_size
    champion = ToyLM(V, seed=3, scale=1.5)
    prompt = [9, 10]
    from exactspec.sampling import SamplingParams, declared_probs
    params = SamplingParams(1.0)
    exact = {}

    def enum(seq, st, p):
        if c.done(st):
            exact[tuple(seq)] = exact.get(tuple(seq), 0.0) + p
            return
        probs = declared_probs(champion.row(prompt + seq), params, c.mask(st))
        for t in np.nonzero(probs > 0)[0].tolist():
            enum(seq + [t], c.advance(st, t), p * probs[t])
    enum([], c.start, 1.0)
    assert 4 <= len(exact) < 2000 and abs(sum(exact.values()) - 1) < 1e-9
    runs = 600
    counts = {}
    for seed in range(runs):
        res = generate(ToyLM(V, seed=3, scale=1.5), prompt, GenerateConfig(
            adaptive=False, response_format=rf, mode="rejection", temperature=1.0, seed=seed, drafter="model", k=3,
            max_new_tokens=30), draft=ToyLM(V, seed=3, scale=1.5, blend=(8, 0.6)), constraint=c, eos_ids=[0])
        counts[tuple(res.token_ids)] = counts.get(tuple(res.token_ids), 0) + 1
    assert set(counts) <= set(exact)
    # chi-square over the sequences with enough expected mass, the rest pooled
    keys = sorted(exact, key=lambda s: -exact[s])
    big = [s for s in keys if exact[s] * runs >= 5]
    obs = [counts.get(s, 0) for s in big] + [runs - sum(counts.get(s, 0) for s in big)]
    exp = [exact[s] * runs for s in big] + [runs * (1 - sum(exact[s] for s in big))]
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    assert scipy_stats.chisquare(obs, exp).pvalue > 1e-3


# ---- the session and the CLI on a micro model with a real byte-level BPE tokenizer ---------------------------------
@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    from exactspec.micro import micro_config, write_micro_gguf
    d = tmp_path_factory.mktemp("json")
    champ, draft = d / "champ.gguf", d / "draft.gguf"
    write_micro_gguf(champ, micro_config(seq_len=1024), seed=1)
    write_micro_gguf(draft, micro_config(n_layers=1, seq_len=1024), seed=7)
    return champ, draft


def session_with(champ, draft=None):
    from exactspec.session import Session
    s = Session()
    s.load("champ", str(champ), role="champion")
    if draft is not None:
        s.load("draft", str(draft), role="draft")
    return s


def run(coro):
    import asyncio
    return asyncio.run(coro)


def test_session_json_mode_validates_and_speculation_changes_nothing(micro):
    champ, draft = micro
    s = session_with(champ, draft)
    entry = schemas()["own"]
    for name in ("nested", "enums", "arrays", "numbers", "any_object"):
        rf = rf_of(entry[name])
        outs = []
        for extra in ({"speculation": False}, {"drafter": "model", "k": 4}, {"drafter": "ngram", "k": 3},
                      {"drafter": "model", "k": 3, "grammar_draft": False}):
            out = run(s.generate({"prompt": entry[name]["prompt"], "chat": True, "max_new_tokens": 160,
                                  "temperature": 0.7, "seed": 3, "response_format": rf, **extra}))
            outs.append(out)
        for o in outs:
            assert o["token_ids"] == outs[0]["token_ids"] and o["text"] == outs[0]["text"], name
        validator(rf).validate(json.loads(outs[0]["text"]))
        assert outs[1]["stats"]["forced_proposed"] > 0 and outs[3]["stats"]["forced_proposed"] == 0
        assert outs[0]["stats"]["forced_proposed"] == 0            # speculation off: no forced drafting either


def test_session_errors_and_continue(micro):
    champ, _ = micro
    s = session_with(champ)
    from exactspec.session import SessionError
    with pytest.raises(SessionError, match="JSON mode: unsupported JSON Schema keyword.*'pattern' at /properties/a"):
        run(s.generate({"prompt": "x", "response_format": {"type": "json_schema", "schema": {
            "type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}}}))
    rf = {"type": "json_schema", "schema": schemas()["workload"]["json-01"]}
    with pytest.raises(SessionError, match="JSON mode: max_new_tokens 5 is too small for this schema"):
        run(s.generate({"prompt": "x", "max_new_tokens": 5, "response_format": rf}))
    full = run(s.generate({"prompt": "Who is Lena?", "max_new_tokens": 60, "response_format": rf,
                           "drafter": "none"}))
    validator(rf).validate(json.loads(full["text"]))
    # stop after a few tokens, continue (even with JSON mode switched off in the request: the answer keeps its format)
    n = {"calls": 0}

    def emit(_):
        n["calls"] += 1
        if n["calls"] == 3:
            s.cancel()
    part = run(s.generate({"prompt": "Who is Lena?", "max_new_tokens": 60, "response_format": rf,
                           "drafter": "none"}, emit))
    assert part["finish_reason"] == "cancelled"
    # the budget counts from the start of the answer: continue with what is left of it (masks near the end of a
    # budget close the document, so another budget gives another answer)
    rest = run(s.generate({"continue": True, "max_new_tokens": 60 - len(part["token_ids"]), "drafter": "none"}))
    assert part["token_ids"] + rest["token_ids"] == full["token_ids"]
    assert part["text"] + rest["text"] == full["text"]


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py"))
    return subprocess.run([sys.executable, "-m", "exactspec", "generate", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_cli_json_schema_equals_the_session(micro, tmp_path):
    champ, draft = micro
    entry = schemas()["own"]["nested"]
    f = tmp_path / "schema.json"
    f.write_text(json.dumps(entry["schema"]))
    r = cli("--model", str(champ), "--prompt", entry["prompt"], "--chat", "--json-schema", str(f),
            "--max-new-tokens", "160", "--temperature", "0.7", "--seed", "3", "--drafter", "model", "--draft",
            str(draft), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    validator(rf_of(entry)).validate(json.loads(out["text"]))
    assert out["stats"]["forced_proposed"] > 0
    s = session_with(champ)
    ref = run(s.generate({"prompt": entry["prompt"], "chat": True, "max_new_tokens": 160, "temperature": 0.7,
                          "seed": 3, "speculation": False, "response_format": rf_of(entry)}))
    assert out["token_ids"] == ref["token_ids"]
    r = cli("--model", str(champ), "--prompt", "a cat", "--json-object", "--max-new-tokens", "40")
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout), dict)
    f.write_text('{"type": "string", "format": "email"}')
    r = cli("--model", str(champ), "--prompt", "x", "--json-schema", str(f))
    assert r.returncode == 2 and "'format' at /" in r.stderr and "Traceback" not in r.stderr
    r = cli("--model", str(champ), "--prompt", "x", "--json-object", "--stop", "}")
    assert r.returncode == 2 and "stop strings cannot be used in JSON mode" in r.stderr


def test_speculation_off_rule_turns_forced_drafting_off_only_with_speculation():
    from exactspec.settings import normalise
    assert normalise({"speculation": False})["grammar_draft"] is False
    s = normalise({"drafter": "none"})
    assert s["grammar_draft"] is True and s["drafter"] == "none" and s["k"] == 0
    assert normalise({"k": 0, "grammar_draft": False})["grammar_draft"] is False


def test_the_bench_simulation_of_rounds_matches_the_decode_loop():
    """bench json_mode's bound (tau if every free proposal were the champion's own token) comes from a simulation
    of the decode loop's rounds along the answer: it must give the measured passes for forced drafting alone and
    for a draft that IS the champion (its masked proposals are the champion's tokens: the oracle)."""
    from bench.json_mode import simulate_passes
    from exactspec.constrain.drafter import GrammarDrafter
    vocab = toy_vocab()
    V = vocab.vocab_size
    checked = 0
    for si, schema in enumerate(TOY_SCHEMAS[:4]):
        rf = {"type": "json_schema", "schema": schema}
        c = Constraint(Grammar(parse_response_format(rf)), vocab)
        for seed in range(3):
            prompt = [5 + seed, 40, 41]
            for budget in (c.min_tokens(c.start) + 3, 60):
                forced = generate(ToyLM(V, seed=seed), prompt, GenerateConfig(
                    adaptive=False, response_format=rf, max_new_tokens=budget, drafter="none", k=0),
                    constraint=c, eos_ids=vocab.eos_ids)
                assert simulate_passes(c, forced.token_ids, budget, 4, "none") == forced.stats["target_passes"]
                GrammarDrafter.lookup_with_draft = False
                try:
                    oracle = generate(ToyLM(V, seed=seed), prompt, GenerateConfig(
                        adaptive=False, response_format=rf, max_new_tokens=budget, drafter="model", k=4),
                        draft=ToyLM(V, seed=seed), constraint=c, eos_ids=vocab.eos_ids)
                finally:
                    GrammarDrafter.lookup_with_draft = True
                assert oracle.token_ids == forced.token_ids
                assert simulate_passes(c, oracle.token_ids, budget, 4, "oracle") == oracle.stats["target_passes"], \
                    (si, seed, budget)
                checked += 1
    assert checked == 24


def test_mask_time_counts_cache_hits():
    vocab = toy_vocab()
    c = Constraint(Grammar(parse_schema(TOY_SCHEMAS[0])), vocab)
    c.mask(c.start)
    t = c.seconds
    for _ in range(50):
        c.mask(c.start, 10)
        c.done(c.start)
        c.forced(c.start)
    assert c.seconds > t


def test_copies_of_the_prompts_text_are_proposed_inside_string_values():
    """Inside a string value, GrammarDrafter first proposes a copy: the value's text so far found in the text before
    it (the prompt), continued there. Token n-grams miss these: the prompt's tokens (` Fischer` after a space) are
    not the answer's. Outside strings, or with under COPY_MIN_BYTES of the value written, nothing is copied."""
    import asyncio
    from exactspec.constrain.drafter import COPY_MIN_BYTES, GrammarDrafter, copy_proposal, copy_tokens
    from exactspec.drafters.ngram import NgramDrafter
    vocab = toy_vocab()
    tb = vocab.token_bytes

    def toks(data: bytes) -> list[int]:
        return vocab.longest_match(data)

    text = b'Name: Lena Fischer, 34\n{"name": "Le'
    got = copy_tokens(vocab, text, text.rfind(b'"'))
    assert b"".join(tb[i] for i in got) == b"na Fischer, 34"           # up to the newline
    assert copy_tokens(vocab, b'x\n{"name": "L', 12) == []             # under COPY_MIN_BYTES bytes: none
    assert COPY_MIN_BYTES == 2
    assert copy_tokens(vocab, b'Name: Bo\n{"name": "Zq', 17) == []     # not in the text before: none
    rf = {"type": "json_schema", "schema": {"type": "object", "properties": {"name": {"type": "string"}},
                                             "required": ["name"], "additionalProperties": False}}
    c = Constraint(Grammar(parse_response_format(rf)), vocab)
    prompt = toks(b"Name: Lena Fischer\n")
    answer = toks(b'{"name": "Le')
    st = c.start
    for t in answer:
        st = c.advance(st, t)
    d = GrammarDrafter(NgramDrafter(max_ngram=3, min_ngram=2), c)
    d.begin_round(st, 40, 8)
    props, q = asyncio.run(d.propose(prompt + answer, 4, None))
    assert q is None and not any(d.forced_flags)
    # the copy, one token a free position, up to where the prompt's line ends, then the value's closing quote and
    # what the grammar forces after it (`"}`: the document's end), as one free proposal
    assert b"".join(tb[i] for i in props) == b'na Fischer"}' and len(props) == 4
    # a round holds k free proposals at most, copies included; k = 0 (no drafter) copies nothing
    d.begin_round(st, 40, 8)
    assert asyncio.run(d.propose(prompt + answer, 1, None))[0] == props[:1]
    d.begin_round(st, 40, 8)
    assert asyncio.run(d.propose(prompt + answer, 0, None))[0] == []
    d.begin_round(st, 40, 2)
    assert asyncio.run(d.propose(prompt + answer, 4, None))[0] == props[:2]      # the round's cap still does
    # at the value's start nothing is copied (the value's text so far is empty)
    st0 = c.start
    for t in toks(b'{"name": "'):
        st0 = c.advance(st0, t)
    d.begin_round(st0, 40, 8)
    assert copy_proposal(c, prompt + toks(b'{"name": "'), st0) == []
    # outside a string (after the key's colon) nothing is copied either
    st1 = c.start
    for t in toks(b'{"name":'):
        st1 = c.advance(st1, t)
    assert not c.in_free_string(st1) and copy_proposal(c, prompt + toks(b'{"name":'), st1) == []


def test_a_forced_token_the_champion_splits_is_learned_and_proposed_split():
    """A forced proposal rejected for a token that spells its first bytes teaches the split (SmolLM2 writes `{"` as
    `{` + `"`): later forced runs, in this answer or (with the session's dict) later ones, propose it that way.
    A rejection by a token with other bytes, or one that runs past the proposal, teaches nothing."""
    import asyncio
    from exactspec.constrain.drafter import GrammarDrafter, apply_splits, learn_split
    from exactspec.drafters.ngram import NgramDrafter
    vocab = toy_vocab()
    tb = vocab.token_bytes
    ids = {b: i for i, b in enumerate(tb) if b is not None}
    splits: dict = {}
    learn_split(vocab, splits, ids[b'{"'], ids[b'{'])
    assert splits == {ids[b'{"']: (ids[b'{'], ids[b'"'])}
    learn_split(vocab, splits, ids[b'",'], ids[b'x'])                # other bytes: nothing
    learn_split(vocab, splits, ids[b'"'], ids[b'",'])                # runs past it: nothing
    assert list(splits) == [ids[b'{"']]
    assert apply_splits(splits, [ids[b'{"'], ids[b'name']]) == [ids[b'{'], ids[b'"'], ids[b'name']]
    rf = {"type": "json_schema", "schema": {"type": "object", "properties": {"name": {"type": "string"}},
                                             "required": ["name"], "additionalProperties": False}}
    c = Constraint(Grammar(parse_response_format(rf)), vocab)
    learned: dict = {}
    d = GrammarDrafter(NgramDrafter(), c, splits=learned)
    d.begin_round(c.start, 40, 8)
    props, _ = asyncio.run(d.propose([5, 6], 0, None))
    assert props[0] == ids[b'{"'] and all(d.forced_flags)
    d.state_after(0, ids[b'{'])                                       # the champion wrote `{` instead
    assert learned == {ids[b'{"']: (ids[b'{'], ids[b'"'])}
    d2 = GrammarDrafter(NgramDrafter(), c, splits=learned)              # the next answer of the session
    d2.begin_round(c.start, 40, 8)
    props2, _ = asyncio.run(d2.propose([5, 6], 0, None))
    assert props2[:2] == [ids[b'{'], ids[b'"']]
    assert b"".join(tb[i] for i in props2) == b"".join(tb[i] for i in props)


def _copy_round(rf, prompt: bytes, answer: bytes, k: int = 8):
    """One JSON-mode round of GrammarDrafter over an n-gram base (copies on) on the toy vocabulary, after `prompt`
    + `answer` (the prompt being the first round's sequence): (the proposals' bytes, forced_flags)."""
    import asyncio
    from exactspec.constrain.drafter import GrammarDrafter
    from exactspec.drafters.ngram import NgramDrafter
    vocab = toy_vocab()
    c = Constraint(Grammar(parse_response_format(rf)), vocab)
    p, a = vocab.longest_match(prompt), vocab.longest_match(answer)
    d = GrammarDrafter(NgramDrafter(max_ngram=3, min_ngram=2), c)
    d.begin_round(c.start, 60, 30)
    asyncio.run(d.propose(p, 0, None))            # the first round: the drafter takes its sequence as the prompt
    assert d.prompt_len == len(p)
    st = c.start
    for t in a:
        st = c.advance(st, t)
    d.begin_round(st, 60, 30)
    props, q = asyncio.run(d.propose(p + a, k, None))
    assert q is None
    return b"".join(vocab.token_bytes[i] for i in props), list(d.forced_flags)


def _obj(**props) -> dict:
    return {"type": "json_schema", "schema": {"type": "object", "properties": props, "required": list(props),
                                              "additionalProperties": False}}


STR, NUM, INT = {"type": "string"}, {"type": "number"}, {"type": "integer"}


def test_a_copy_whose_source_ends_proposes_the_closing_quote_and_what_the_grammar_forces():
    """Where the copied text ends in the prompt (its line ends), the copy proposes the closing quote with what the
    grammar forces after it, tokenised together (`", "` here: the model writes `Fischer",` as ` Fischer` + `",`);
    the forced rest of the key follows as forced proposals. A full stop that ends the source is left out when the
    value was copied from inside a sentence, kept when the copy started the sentence."""
    got, flags = _copy_round(_obj(name=STR, age=INT), b"Name: Lena Fischer\n", b'{"name": "Lena')
    assert got == b' Fischer", "age": ' and flags == [False, False, True, True]
    assert _copy_round(_obj(name=STR, age=INT), b"Name: Lena Fischer, 34\n", b'{"name": "Lena')[0] \
        .startswith(b" Fischer, 34")                           # the source goes on: no closing yet
    assert _copy_round(_obj(city=STR), b"She is based in Tromso.\n", b'{"city": "Trom')[0] == b'so"}'
    assert _copy_round(_obj(city=STR), b"City: Tromso.\n", b'{"city": "Trom')[0] == b'so."}'


def test_number_values_copy_the_prompts_numbers_in_order():
    """At a number value the prompt's numbers are proposed: the first one not yet written as a value, not part of a
    word (K7) nor of a time (14:05); a number begun continues as the prompt's number that starts with it; once it is
    complete, the byte that ends it and what the grammar forces after it (`, "b": `)."""
    from exactspec.constrain.drafter import copy_proposal, number_tokens
    prompt = b"Station K7 reported 18.5 degrees at 14:05 and 64 percent\n"
    rf = _obj(a=NUM, b=NUM, c=STR)
    got, flags = _copy_round(rf, prompt, b'{"a": ')
    assert got == b'18.5, "b": 64, "c": "'
    assert flags[-3:] == [True, True, True]                     # `": `... the key and the string's quote: forced
    assert _copy_round(rf, prompt, b'{"a": 18.5, "b": ')[0] == b'64, "c": "'     # 18.5 is written: 64 next
    assert _copy_round(rf, prompt, b'{"a": 18.5, "b": 6')[0] == b'4, "c": "'
    assert _copy_round(rf, prompt, b'{"a": 2')[0] == b''        # no prompt number starts with 2
    vocab = toy_vocab()
    c = Constraint(Grammar(parse_response_format(rf)), vocab)
    text = prompt + b'{"'
    st = c.advance(c.start, vocab.longest_match(b'{"')[0])
    assert number_tokens(c, text, st, len(prompt)) == []        # a key's start takes no digit: nothing
    assert copy_proposal(c, vocab.longest_match(text), st, len(vocab.longest_match(prompt))) == []


def test_copies_find_a_value_at_a_word_start_with_case_ignored_and_from_its_first_byte():
    """A value's text so far is found at a word start (`at` continues as in `at home`, not inside `cat`), with ASCII
    case ignored (the answer's `Tr` continues as the prompt's `treasurer`; the later words of such a copy are
    capitalised: `North Gate`). A single byte is enough, only at a word start in the prompt: `M` continues as
    `Mei`; a byte found only inside a word, or only in the answer, gives no copy."""
    tr = b"Mei is the treasurer, and the north gate\n"
    assert _copy_round(_obj(role=STR), tr, b'{"role": "Tr')[0] == b"easurer, "
    assert _copy_round(_obj(role=STR), tr, b'{"role": "No')[0] == b"rth Gate"
    assert _copy_round(_obj(role=STR), b"the cat sat at home\n", b'{"role": "at')[0] == b' home"}'
    assert _copy_round(_obj(role=STR), b"Kofi chairs, Mei is here\n", b'{"role": "M')[0] == b"ei is he"
    assert _copy_round(_obj(role=STR), b"chairs\n", b'{"role": "h')[0] == b""
    assert _copy_round(_obj(a=STR, b=STR), b"x\n", b'{"a": "Zed", "b": "Z')[0] == b""


def test_the_first_string_value_starts_with_the_prompt_texts_first_word():
    """At the document's first string value (nothing written yet), the first word after the prompt's last `: ` is
    proposed (`Lena`), then copied on; at a later string value, or with no `: ` in the prompt, nothing."""
    prompt = b'Extract {"name": string} from: Lena Fischer, 34\n'
    got = _copy_round(_obj(name=STR, b=STR), prompt, b'{"name": "')[0]
    assert got.startswith(b"Lena Fischer, 34")
    assert _copy_round(_obj(name=STR, b=STR), prompt, b'{"name": "x", "b": "')[0] == b""
    assert _copy_round(_obj(name=STR), b"Lena Fischer\n", b'{"name": "')[0] == b""
    assert _copy_round(_obj(n=INT, name=STR), prompt, b'{"n": 34, "name": "')[0].startswith(b"Lena")

