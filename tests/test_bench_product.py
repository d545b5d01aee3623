"""bench product's prediction (py/bench/product.py): the break-even formula, with the tokens of runs ahead priced as
plain decoding; its JSON mode through the product's own session."""
import asyncio

import pytest

from bench.product import predicted_chain_speedup, predicted_speedup

T = {"single_ms": {"median": 1.0}, "forward_ms": {"median": 1.5},
     "verify_ms": {"1": {"median": 1.6}, "2": {"median": 1.7}, "3": {"median": 1.8}, "4": {"median": 1.9}},
     "draft_ms": {"ngram": {"median": 0.0}}}


def test_every_round_verifies_gives_the_formula():
    pred, parts = predicted_speedup(T, "ngram", 4, 4.0, 3.0, 0.2)
    assert pred == pytest.approx(1.2 / (0.2 + 1.9 / 3.0))       # O (0.2 ms a token) is the answer's, not a round's
    assert parts["t_round_ms"] == pytest.approx(1.9) and parts["ahead_share"] == 0.0


def test_runs_ahead_are_priced_as_plain_decoding():
    # O (0.2 ms) on every token; half the tokens from runs ahead (1.0 ms a token), half from verify rounds of 3
    # tokens at 1.75 ms
    pred, _ = predicted_speedup(T, "ngram", 4, 2.5, 3.0, 0.2, ahead_share=0.5)
    t_round = 1.7 + (1.8 - 1.7) * 0.5                       # T_verify interpolated at 2.5 proposals
    assert pred == pytest.approx(1.2 / (0.2 + 0.5 * 1.0 + 0.5 * t_round / 3.0))
    assert predicted_speedup(T, "ngram", 4, 4.0, 1.0, 0.2, ahead_share=0.999)[0] == pytest.approx(1.0, abs=1e-3)


def test_the_answers_own_costs_are_not_shrunk_by_speculation():
    """O, what the champion alone spends beyond its passes (first token, the answer's end), is paid once per answer
    with or without speculation: the larger it is, the closer the prediction to 1, however good the rounds."""
    fast = predicted_speedup(T, "ngram", 4, 4.0, 4.0, 0.0)[0]
    slow = predicted_speedup(T, "ngram", 4, 4.0, 4.0, 2.0)[0]
    assert fast == pytest.approx(1.0 / (1.9 / 4.0)) and 1.0 < slow < fast
    assert slow == pytest.approx(3.0 / (2.0 + 1.9 / 4.0))


def test_chains_are_priced_as_passes_plus_their_rows():
    """Chains (the device's n-gram rounds, back to back): a round costs T_single plus its proposals' rows
    (T_verify(g) - T_verify(0)); runs ahead T_single a token; O per token."""
    # 30 tokens: 10 from runs ahead, 20 from 8 chain rounds of 2.5 proposals on average
    pred, parts = predicted_chain_speedup(T, 30, 10, 8, 2.5, 0.2)
    rows = 1.7 + (1.8 - 1.7) * 0.5 - 1.5
    assert parts["t_chain_round_ms"] == pytest.approx(1.0 + rows)
    assert pred == pytest.approx(1.2 / (0.2 + (10 * 1.0 + 8 * (1.0 + rows)) / 30))
    # rounds that find nothing cost a pass: one token a round is plain decoding
    assert predicted_chain_speedup(T, 30, 0, 30, 0.0, 0.2)[0] == pytest.approx(1.0)


def test_chains_are_priced_from_the_chained_pass_and_the_timed_chain_round():
    """Where the timings hold them: plain decoding costs a pass as the champion alone runs (ahead_chain: runs ahead
    chained by continuations), and a chain round at k costs the timed chain round (chain_ms[k], at the proposals the
    prompt offered there) with the answer's proposals' rows in place of those; without chain_ms[k] (another k, or
    not measured) a pass plus the rows."""
    t = {**T, "ahead_chain": {"ms_per_token": {"median": 0.9}},
         "chain_ms": {"4": {"rounds": 32, "proposals_per_round": 0.5, "ms_per_round": {"median": 1.2}}}}
    rows_05 = (1.6 - 1.5) * 0.5                     # T_verify interpolated at 0.5 proposals, minus T_verify(0)
    rows_25 = 1.7 + (1.8 - 1.7) * 0.5 - 1.5          # at 2.5
    pred, parts = predicted_chain_speedup(t, 30, 10, 8, 2.5, 0.2, k=4)
    t_round = 1.2 - rows_05 + rows_25
    assert parts["t_chain_round_ms"] == pytest.approx(t_round) and parts["chain_round_measured"]
    assert parts["t_single_ms"] == 0.9
    assert pred == pytest.approx(1.1 / (0.2 + (10 * 0.9 + 8 * t_round) / 30))
    pred3, parts3 = predicted_chain_speedup(t, 30, 10, 8, 2.5, 0.2, k=3)         # no chain_ms["3"]
    assert parts3["t_chain_round_ms"] == pytest.approx(0.9 + rows_25) and not parts3["chain_round_measured"]
    assert pred3 == pytest.approx(1.1 / (0.2 + (10 * 0.9 + 8 * (0.9 + rows_25)) / 30))
    # a chain round dearer than a pass (the device's lookup and step): rounds that find nothing lose
    assert predicted_chain_speedup(t, 30, 0, 30, 0.0, 0.2, k=4)[0] < 1.0


class SessionHost:
    """The worker's Python side, without a page around it: bench product's host over a CPython Session."""

    def __init__(self, champion):
        from exactspec.session import Session
        self.s, self.requests = Session(), []
        self.s.load("champion", str(champion))

    def generate(self, params):
        from bench.product import HostError
        from exactspec.session import SessionError
        self.requests.append(params)
        try:
            return asyncio.run(self.s.generate(dict(params)))
        except SessionError as e:           # (as the page's and Node's hosts report a refused request)
            raise HostError(str(e)) from None

    def timings(self, params):
        from bench.product import HostError
        raise HostError("no timings here")


def json_bench(P, drafters: str):
    """bench product over the first strict-JSON and summary prompts, --json-mode, 1 run of 40 tokens, through the
    CPython session: (args, host, result, records by (prompt, drafter), the JSON prompt's id)."""
    a = P.parse_args(["--strata", "json_extraction,summaries", "--per-stratum", "1", "--drafters", drafters,
                      "--ks", "2", "--runs", "1", "--max-new-tokens", "40", "--json-mode"])
    a.items = P.select_items(a)
    host = SessionHost(P.CHAMPION)
    res = P.run_bench(host, a.items, a, log=lambda m: None)
    assert not [e for e in res["errors"] if e["what"] != "timings"], res["errors"]
    recs = {(r["prompt_id"], r["drafter"]): r for r in res["records"]}
    return a, host, res, recs, next(i["id"] for i in a.items if i["stratum"] == "json_extraction")


def test_json_mode_answers_the_strict_json_prompts_in_json_mode():
    """--json-mode: the prompts with a frozen schema answer in JSON mode (alone and with speculation: valid for the
    schema, identical), the others as before; the report says which. Through the product's own session (CPython)."""
    import json
    from pathlib import Path

    from bench import product as P
    root = Path(__file__).resolve().parents[1]
    if not P.CHAMPION.exists():
        pytest.skip("SmolLM2 not set up (python build.py setup)")
    jsonschema = pytest.importorskip("jsonschema")

    a, host, res, recs, jid = json_bench(P, "none,ngram")
    schemas = json.loads((root / "tests/data/json_schemas.json").read_text())["workload"]
    sid = next(i["id"] for i in a.items if i["stratum"] == "summaries")
    assert all(r["identical"] for r in res["records"]) and len(res["records"]) == 4
    jsonschema.validate(json.loads(recs[(jid, "ngram")]["text"]), schemas[jid])
    asked = [q for q in host.requests if q.get("max_new_tokens") == 40]           # (not the warm-up answers)
    assert len(asked) == 4
    for q in asked:
        is_json = q["chat"] == P.workload_messages(next(i for i in a.items if i["id"] == jid))
        assert ("response_format" in q) == is_json
        if is_json:
            assert q["response_format"] == {"type": "json_schema", "schema": schemas[jid]}
        assert q.get("speculation", True) == (q["drafter"] != "none")   # alone: no grammar proposals either
    alone = recs[(jid, "none")]
    assert alone["proposed"] == 0 and alone["target_passes"] >= alone["n_tokens"], alone
    assert recs[(jid, "ngram")]["proposed"] > 0 and recs[(jid, "ngram")]["target_passes"] < alone["target_passes"]
    assert recs[(sid, "ngram")]["text"] and not recs[(sid, "ngram")]["text"].lstrip().startswith("{")
    a.sha = P.artifact_sha256s(a)
    report = P.build_report(res, a, {}, [], 0.0, 0.0)
    assert report["meta"]["json_mode"] == [jid]
    assert f"JSON mode (each prompt's frozen schema, alone and with speculation): {jid}" in P.table(report)
    assert recs[(jid, "ngram")]["json_mode"] and "json_mode" not in recs[(sid, "ngram")]
    empty = P.build_report({"records": [], "timings": [], "warmups": [], "errors": [], "stopped": None}, a, {}, [],
                           0.0, 0.0)
    assert "identical: no speculative answer to compare" in P.table(empty)     # not "yes" over nothing


def test_the_grammar_setting_is_json_modes_own_proposals_alone():
    """--drafters grammar (with --json-mode only): the JSON-mode prompts answered with speculation on and no drafter
    (the grammar's forced proposals alone), recorded as drafter 'grammar'; other prompts skip it."""
    from bench import product as P
    if not P.CHAMPION.exists():
        pytest.skip("SmolLM2 not set up (python build.py setup)")
    with pytest.raises(SystemExit):
        P.parse_args(["--drafters", "none,grammar"])                 # (needs --json-mode)
    a, host, res, recs, jid = json_bench(P, "none,grammar")
    assert sorted(recs) == sorted([(jid, "none"), (jid, "grammar")] +
                                  [(i["id"], "none") for i in a.items if i["id"] != jid])
    g, alone = recs[(jid, "grammar")], recs[(jid, "none")]
    assert g["identical"] and g["k"] == 0 and g["target_passes"] < alone["target_passes"]   # forced runs verified
    sent = [q for q in host.requests if q.get("max_new_tokens") == 40 and "response_format" in q]
    assert sorted((q["drafter"], q.get("speculation")) for q in sent) == [("none", False), ("none", True)]
    a.sha = P.artifact_sha256s(a)
    rows = P.summarise(res, a)
    assert [(r["stratum"], r["drafter"]) for r in rows] == [("json_extraction", "grammar")]
    table = P.table(P.build_report(res, a, {}, [], 0.0, 0.0))
    assert any(line.startswith("json_extraction") and " grammar " in line for line in table.splitlines()), table


def test_engine_ab_pairs_every_alone_answer(tmp_path):
    """--ab-engine-opts (host node only): a second host makes every champion-alone answer too, right after the
    prompt's answers on the first host in even runs and right before them in odd ones; the report pairs them (B / A
    per pair, per stratum and mode) and says whether their tokens were the same. Two CPython sessions as the hosts."""
    from bench import product as P
    from exactspec.micro import micro_config, write_micro_gguf

    with pytest.raises(SystemExit):
        P.parse_args(["--ab-engine-opts", "{}"])                              # (the Chromium host: one page)
    with pytest.raises(SystemExit):
        P.parse_args(["--host", "node", "--ab-engine-opts", "[1]"])          # (not a JSON object)
    champ = tmp_path / "micro.gguf"
    write_micro_gguf(champ, micro_config(), seed=1, tensor_type="Q4_1")
    a = P.parse_args(["--host", "node", "--champion", str(champ), "--strata", "repetitive,casual_chat",
                      "--per-stratum", "1", "--drafters", "none,ngram", "--ks", "2", "--runs", "2",
                      "--max-new-tokens", "8", "--ab-engine-opts", '{"contSplits": 0}'])
    a.items = P.select_items(a)
    log = []

    class Logged(SessionHost):
        def __init__(self, name):
            super().__init__(champ)
            self.name = name

        def generate(self, params):
            log.append((self.name, params["max_new_tokens"], params["drafter"]))
            return super().generate(params)

    res = P.run_bench(Logged("A"), a.items, a, log=lambda m: None, host_b=Logged("B"))
    assert not [e for e in res["errors"] if e["what"] != "timings"], res["errors"]
    assert len(res["ab"]) == 2 * 2 and all(r["identical"] and r["side"] == "B" and r["a_tok_s"] > 0 for r in res["ab"])
    measured = [x for x in log if x[1] == 8]          # (not the warm-ups' 2 tokens)
    per_prompt = [measured[i:i + 3] for i in range(0, len(measured), 3)]   # A: alone + ngram; B: alone
    assert len(per_prompt) == 4
    for run, group in zip([0, 1, 0, 1], per_prompt):                      # (a stratum's runs, then the next's)
        assert [h for h, _, _ in group] == (["A", "A", "B"] if run == 0 else ["B", "A", "A"]), group
    a.sha = P.artifact_sha256s(a)
    report = P.build_report(res, a, {}, [], 0.0, 0.0)
    rows = report["ab_summary"]
    assert [(r["stratum"], r["mode"], r["pairs"]) for r in rows] == [("repetitive", "greedy", 2), ("casual_chat", "greedy", 2)]
    assert all(r["identical"] and r["ratio"]["n"] == 2 and r["ratio"]["median"] > 0 for r in rows)
    assert report["meta"]["ab_engine_opts"] == {"contSplits": 0}
    table = P.table(report)
    assert "engine A/B, the champion alone" in table and "{'contSplits': 0}" in table
    assert sum(line.startswith(("repetitive", "casual_chat")) and line.rstrip().endswith("yes")
               for line in table.split("engine A/B")[1].splitlines()) == 2


def chain_session(tmp_path, device=None, chain_rounds: int = 3, **config):
    """(session, device): a CPython Session whose champion, a Q4_1 micro-model of micro_config(**config), runs on
    `device` (exactspec.backend.RunsAhead or a subclass: 4 passes ahead, chain_rounds rounds a chain), as on a GPU."""
    from exactspec.backend import RunsAhead
    from exactspec.micro import micro_config, write_micro_gguf
    from exactspec.reference import ReferenceModel
    from exactspec.session import Session

    champ = tmp_path / "micro.gguf"
    write_micro_gguf(champ, micro_config(**config), seed=1, tensor_type="Q4_1")
    dev = (device or RunsAhead)(ReferenceModel.from_file(str(champ)), ahead_max=4, chain_rounds=chain_rounds)
    s = Session()
    s.load("champ", str(champ), backend=dev, backend_name="webgpu")
    return s, dev


def test_chain_timings_price_the_ngram_chains_as_the_decode_loop_runs_them(tmp_path):
    """exactspec.timing's chain_ms: where the champion's backend makes the n-gram's rounds itself (ngram_chain), CHAIN
    chains of its chain_rounds rounds from the prompt's end, each the continuation of the one before (then = the next
    chain's rounds, none after the last), timed whole as ahead_chain's CHAIN runs are; greedy only; the rounds find
    what the prompt offers (a repeated phrase: some proposals), and the cache is back at the prompt afterwards (the
    next answer is the same)."""
    from exactspec import timing

    s, dev = chain_session(tmp_path)
    prompt = "the cat sat on the mat and the cat sat on the"
    req = {"prompt": prompt, "max_new_tokens": 12, "temperature": 0, "drafter": "ngram", "k": 2, "adaptive": False}
    before = asyncio.run(s.generate(dict(req)))["token_ids"]
    dev.chain_calls.clear()
    t = asyncio.run(timing.measure(s, {"prompt": prompt, "ks": [1, 2], "reps": 2, "drafters": ["ngram"]}))
    assert sorted(t["chain_ms"]) == ["1", "2"]
    for k in (1, 2):
        c = t["chain_ms"][str(k)]
        assert c["rounds"] == timing.CHAIN * 3 and c["ms_per_round"]["median"] > 0
        assert c["ms_per_round"]["n"] == 2
        assert 0 < c["proposals_per_round"] <= k                   # the repeated phrase offers copies
    p = t["position"]
    calls = [c for c in dev.chain_calls if c[2] == 2]             # (start_pos, rounds, k, then) of k = 2's chains
    n = timing.CHAIN
    assert len(calls) == 3 * n                                    # the warm-up and 2 repetitions
    first = calls[:n]
    assert first[0][0] == p and [c[3] for c in first] == [3] * (n - 1) + [0]
    assert all(b[0] > a[0] for a, b in zip(first, first[1:]))     # each chain from where the one before ended
    assert asyncio.run(s.generate(dict(req)))["token_ids"] == before
    # sampled: no chains (the decode loop makes them for greedy answers only)
    t = asyncio.run(timing.measure(s, {"prompt": prompt, "ks": [2], "reps": 1, "drafters": ["ngram"],
                                       "temperature": 0.7}))
    assert t["chain_ms"] == {}


def test_chain_timings_at_long_positions_make_the_loops_k(tmp_path):
    """From decode.CHAIN_LONG_POS positions on the decode loop's chains make at most CHAIN_LONG_K proposals a round,
    and chain_ms times what it makes: the setting's k = 4 timed at k_run = 3, k = 2 as it is."""
    from exactspec import timing
    from exactspec.decode import CHAIN_LONG_K, CHAIN_LONG_POS

    s, dev = chain_session(tmp_path, seq_len=3 * CHAIN_LONG_POS)
    words = "the cat sat on a mat ; a dog ran to the red door , then".split()
    prompt = " ".join(words[(i * 7) % len(words)] for i in range(CHAIN_LONG_POS))
    t = asyncio.run(timing.measure(s, {"prompt": prompt, "ks": [2, 4], "reps": 1, "drafters": ["ngram"]}))
    assert t["position"] >= CHAIN_LONG_POS
    assert t["chain_ms"]["4"]["k_run"] == CHAIN_LONG_K < 4 and t["chain_ms"]["2"]["k_run"] == 2
    assert {c[2] for c in dev.chain_calls} == {2, CHAIN_LONG_K}


def test_chain_rounds_and_chained_passes_are_timed_alike(tmp_path):
    """chain_ms and ahead_chain time their chains the same way (whole, as many chains as runs), so a chain round that
    costs what a pass costs gets ahead_chain's price. The device here: every call costs its passes plus a turnaround,
    except a call taken as the continuation of the one before (submitted before that one was read back), which costs
    its passes only. Timed from the first chain's return (before 2026-12-07c), the chain rounds missed the turnaround
    the chained passes carry and came out cheaper than the passes they equal."""
    from exactspec import timing
    from exactspec.backend import RunsAhead

    PASS, TURN = 0.001, 0.005           # seconds of the virtual device
    now = [0.0]

    class Device(RunsAhead):
        hinted = False

        def cost(self, passes, then):
            now[0] += passes * PASS + (0.0 if self.hinted else TURN)
            self.hinted = then > 0

        async def decode_ahead(self, token, start_pos, n, pick, rows=True, then=0, stop=()):
            r = await super().decode_ahead(token, start_pos, n, pick, rows, then, stop)
            self.cost(n, then)
            return r

        async def ngram_chain(self, seq, start_pos, rounds, k, pick, min_ngram, max_ngram, then=0, stop=()):
            r = await super().ngram_chain(seq, start_pos, rounds, k, pick, min_ngram, max_ngram, then, stop)
            self.cost(rounds, then)
            return r

    s, _ = chain_session(tmp_path, Device, chain_rounds=4)
    t = asyncio.run(timing.measure(s, {"prompt": "the cat sat on the mat and the dog", "ks": [2], "reps": 2,
                                       "drafters": ["ngram"]}, clock=lambda: now[0]))
    per_pass = t["ahead_chain"]["ms_per_token"]["median"]
    assert per_pass == pytest.approx(1000 * (PASS + TURN / (timing.CHAIN * 4)))
    assert t["chain_ms"]["2"]["ms_per_round"]["median"] == pytest.approx(per_pass)
