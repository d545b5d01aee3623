"""The engine's batched step (model.decodeAhead, champion.specRound: py/exactspec/backend.py's decode_ahead /
spec_round, one submission, one readback, picks made on the GPU by shaders/pick.wgsl) under Node + Dawn (llvmpipe):

- a batched step equals the same passes made one by one, BITWISE: every returned row, and what the KV caches hold
  afterwards (a forward after the step);
- greedy ids are exactly numpy's argmax of the returned rows (ties -> lowest id); coupled picks equal numpy's
  argmax(row / T + Rng(seed).gumbel(t)) wherever the top two differ by >= 1e-4 (seeds up to 2^53 - 1);
- the draft's proposals are the picks on its own one-by-one rows, read by the champion on the GPU;
- bad calls are refused with errors naming the problem.
Engine variants: the CPU-adapter matmul, the GPU lanes path, the subgroup kernel and the fused engine (one-lane
subgroups emulated), and row chunks smaller than the draft's feed.
"""
from __future__ import annotations

import numpy as np
import pytest

from dawn_harness import probe, run_engine

_why = probe()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")

VARIANTS = {"cpu_path": {}, "gpu_lanes": {"lanes": 32}, "subgroup": {"emulate_sg": True},
            "fused": {"emulate_sg": True, "engine_opts": {"fuse": True, "fuseSlice": 32}},
            "fused_attn": {"emulate_sg": True, "engine_opts": {"fuse": "attn"}}, "chunks3": {"max_rows": 3}}
PICKS = {"greedy": {"temperature": 0, "seed": 0}, "coupled": {"temperature": 0.8, "seed": 12345},
         "coupled_big_seed": {"temperature": 1.7, "seed": 2 ** 53 - 1}}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    td = tmp_path_factory.mktemp("batched")
    champ, draft = td / "champ.gguf", td / "draft.gguf"
    write_micro_gguf(champ, micro_config(), seed=1, tensor_type="Q4_1")
    write_micro_gguf(draft, micro_config(n_layers=1), seed=7, tensor_type="Q8_0")
    return (champ, describe(champ)), (draft, describe(draft))


def numpy_pick(row, pick, t):
    """(id, margin): the decode loop's pick in float64, and how far the best is from the second best."""
    from exactspec.sampling import Rng

    z = row.astype(np.float64)
    if pick["temperature"] > 0:
        z = z / pick["temperature"] + Rng(pick["seed"]).gumbel(t, z.size)
    top = np.sort(z)[-2:]
    return int(np.argmax(z)), float(top[1] - top[0])


def check_picks(ids, rows, pick, t0):
    """ids[i] picked from rows[i] for the token at absolute position t0 + i."""
    assert len(ids) == len(rows)
    for i, row in enumerate(rows):
        if pick["temperature"] == 0:
            assert ids[i] == int(np.argmax(row)), f"greedy id {ids[i]} at row {i} is not numpy's argmax"
        else:
            want, margin = numpy_pick(row, pick, t0 + i)
            assert ids[i] == want or margin < 1e-4, f"coupled pick {ids[i]} at row {i} != {want} (margin {margin})"


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("pick_name", list(PICKS))
def test_decode_ahead_equals_passes_one_by_one(models, variant, pick_name):
    (path, d), _ = models
    kw, pick = VARIANTS[variant], PICKS[pick_name]
    V = d["config"]["vocab_size"]
    prompt = [int(x) for x in np.random.default_rng(3).integers(0, V, 7)]
    P, N, x, y = len(prompt), 9, prompt[-1], 17
    ops = [{"op": "forward", "tokens": prompt, "start_pos": 0, "n_out": 1},
           {"op": "decode_ahead", "token": x, "start_pos": P, "n": N, "pick": pick, "rows": True},
           {"op": "forward", "tokens": [y], "start_pos": P + N},
           {"op": "truncate", "n": P},
           {"op": "decode_ahead", "token": x, "start_pos": P, "n": N, "pick": pick, "rows": False}]
    info, outs = run_engine(path, d, ops, **kw)
    res = info["results"]
    assert all("error" not in r for r in res), res
    ahead, after = outs[1], outs[2]                           # (N, vocab), (1, vocab)
    ids = res[1]["ids"]
    assert res[1]["length"] == P + N and res[1]["passes"] == N and res[4]["ids"] == ids
    check_picks(ids, ahead, pick, P + 1)
    # the same passes one by one, fed what the GPU fed itself
    fed = [x] + ids[:-1]
    ops1 = [ops[0]] + [{"op": "forward", "tokens": [t], "start_pos": P + i} for i, t in enumerate(fed)] + [ops[2]]
    _, outs1 = run_engine(path, d, ops1, **kw)
    one = np.concatenate(outs1[1:N + 1])                      # (N, vocab)
    assert np.array_equal(bits(ahead), bits(one)), "decodeAhead rows differ from one-by-one forwards"
    assert np.array_equal(bits(after), bits(outs1[N + 1])), "the KV cache after decodeAhead differs"


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("pick_name", ["greedy", "coupled"])
def test_spec_round_equals_passes_one_by_one(models, variant, pick_name):
    (cpath, cd), (dpath, dd) = models
    kw, pick = VARIANTS[variant], PICKS[pick_name]
    V = cd["config"]["vocab_size"]
    prompt = [int(x) for x in np.random.default_rng(5).integers(0, V, 8)]
    P, K, y = len(prompt), 4, 23
    feed = prompt[2:]                                         # the draft holds prompt[:2]; its feed ends at P - 1
    setup = [{"op": "forward", "tokens": prompt[:-1], "start_pos": 0, "n_out": 1},
             {"op": "forward", "on": "draft", "tokens": prompt[:2], "start_pos": 0, "n_out": 1}]
    after = [{"op": "forward", "tokens": [y], "start_pos": P + K},
             {"op": "forward", "on": "draft", "tokens": [y], "start_pos": P + K - 1}]
    ops = setup + [{"op": "spec_round", "feed": feed, "draft_start": 2, "k": K, "token": prompt[-1],
                    "start_pos": P - 1, "pick": pick, "rows": True}] + after
    info, outs = run_engine(cpath, cd, ops, draft=(dpath, dd), **kw)
    res = info["results"]
    assert all("error" not in r for r in res), res
    r = res[2]
    props, ids, rows = r["proposals"], r["ids"], outs[2]      # rows (K + 1, vocab)
    assert r["length"] == P + K and r["draft_length"] == P + K - 1 and len(props) == K
    check_picks(ids, rows, pick, P)
    # one by one: the draft's passes (feed, then each proposal), the champion's verify of [token, proposals]
    ops1 = setup + [{"op": "forward", "on": "draft", "tokens": feed, "start_pos": 2, "n_out": 1}]
    ops1 += [{"op": "forward", "on": "draft", "tokens": [t], "start_pos": P + i} for i, t in enumerate(props[:-1])]
    ops1 += [{"op": "forward", "tokens": [prompt[-1]] + props, "start_pos": P - 1}] + after
    _, outs1 = run_engine(cpath, cd, ops1, draft=(dpath, dd), **kw)
    check_picks(props, np.concatenate(outs1[2:2 + K]), pick, P)
    assert np.array_equal(bits(rows), bits(outs1[2 + K])), "specRound's champion rows differ from one verify forward"
    assert np.array_equal(bits(outs[3]), bits(outs1[3 + K])), "the champion's KV cache after specRound differs"
    assert np.array_equal(bits(outs[4]), bits(outs1[4 + K])), "the draft's KV cache after specRound differs"


@pytest.mark.parametrize("variant", ["cpu_path", "subgroup", "fused", "chunks3"])
@pytest.mark.parametrize("pick_name", list(PICKS))
def test_verify_equals_one_forward(models, variant, pick_name):
    """model.verify (host proposals: one forward, a pick on every row, the picks read back) gives exactly one
    forward's rows, picks equal to numpy's on those rows, and the same KV cache afterwards."""
    (cpath, cd), _ = models
    kw, pick = VARIANTS[variant], PICKS[pick_name]
    V = cd["config"]["vocab_size"]
    toks = [int(x) for x in np.random.default_rng(9).integers(0, V, 11)]
    P = 6
    setup = [{"op": "forward", "tokens": toks[:P], "start_pos": 0, "n_out": 1}]
    after = [{"op": "forward", "tokens": [7], "start_pos": len(toks)}]
    ops = setup + [{"op": "verify", "tokens": toks[P:], "start_pos": P, "pick": pick, "rows": True}] + after
    info, outs = run_engine(cpath, cd, ops, **kw)
    res = info["results"]
    assert all("error" not in r for r in res), res
    assert res[1]["length"] == len(toks) and len(res[1]["ids"]) == len(toks) - P
    check_picks(res[1]["ids"], outs[1], pick, P + 1)
    ops1 = setup + [{"op": "forward", "tokens": toks[P:], "start_pos": P}] + after
    _, outs1 = run_engine(cpath, cd, ops1, **kw)
    assert np.array_equal(bits(outs[1]), bits(outs1[1])), "verify's rows differ from one forward's"
    assert np.array_equal(bits(outs[2]), bits(outs1[2])), "the KV cache after verify differs"
    ids_only = setup + [{"op": "verify", "tokens": toks[P:], "start_pos": P, "pick": pick, "rows": False}]
    info2, outs2 = run_engine(cpath, cd, ids_only, **kw)
    assert info2["results"][1]["ids"] == res[1]["ids"] and info2["results"][1]["rows"] == 0 and len(outs2) == 1


def test_spec_round_ids_only(models):
    """rows=False brings back the proposals and the champion's greedy ids only (the same as with rows)."""
    (cpath, cd), (dpath, dd) = models
    prompt = [5, 9, 2, 71, 33]
    rnd = {"op": "spec_round", "feed": prompt, "draft_start": 0, "k": 3, "token": 44, "start_pos": 4,
           "pick": PICKS["greedy"]}
    ops = [{"op": "forward", "tokens": prompt[:-1], "start_pos": 0}, {**rnd, "rows": True},
           {"op": "truncate", "n": 4}, {"op": "truncate", "on": "draft", "n": 0}, {**rnd, "rows": False}]
    info, outs = run_engine(cpath, cd, ops, draft=(dpath, dd))
    a, b = info["results"][1], info["results"][4]
    assert a["proposals"] == b["proposals"] and a["ids"] == b["ids"] and b["rows"] == 0 and len(outs) == 2


def test_batched_refusals(models):
    """Bad batched calls are refused with an error naming the problem; the model stays usable."""
    (cpath, cd), (dpath, dd) = models
    g = PICKS["greedy"]
    ops = [{"op": "forward", "tokens": [1, 2, 3], "start_pos": 0},
           {"op": "decode_ahead", "token": 4, "start_pos": 2, "n": 2, "pick": g, "rows": True},
           {"op": "decode_ahead", "token": 4, "start_pos": 3, "n": 65, "pick": g, "rows": True},
           {"op": "decode_ahead", "token": 4, "start_pos": 3, "n": 2, "pick": {"temperature": 1, "seed": -1}, "rows": True},
           {"op": "decode_ahead", "token": 4, "start_pos": 3, "n": 2, "pick": {"temperature": 1, "seed": 2 ** 53}, "rows": True},
           {"op": "decode_ahead", "token": 10 ** 6, "start_pos": 3, "n": 2, "pick": g, "rows": True},
           {"op": "spec_round", "feed": [1, 2], "draft_start": 0, "k": 2, "token": 3, "start_pos": 3, "pick": g, "rows": True},
           {"op": "spec_round", "feed": [1, 2, 3, 4], "draft_start": 0, "k": 0, "token": 3, "start_pos": 3, "pick": g, "rows": True},
           {"op": "decode_ahead", "token": 4, "start_pos": 3, "n": 2, "pick": g, "rows": True}]
    info, _ = run_engine(cpath, cd, ops, draft=(dpath, dd))
    errs = [r.get("error", "") for r in info["results"]]
    assert "start_pos 2 must equal length 3" in errs[1]
    assert "n 65 must be in 1..64" in errs[2]
    assert "seed -1" in errs[3] and "seed 9007199254740992" in errs[4]
    assert "outside" in errs[5]
    assert "the feed ends at 1, not at start_pos 3" in errs[6]
    assert "k 0 must be in" in errs[7]
    assert errs[8] == "" and info["results"][8]["length"] == 5


def test_decode_ahead_after_device_loss(models):
    (path, d), _ = models
    ops = [{"op": "forward", "tokens": [1, 2, 3], "start_pos": 0}, {"op": "lose_device"},
           {"op": "decode_ahead", "token": 4, "start_pos": 3, "n": 4, "pick": PICKS["greedy"], "rows": True}]
    info, _ = run_engine(path, d, ops, timeout=120)
    assert info["results"][2].get("error", "").startswith("device lost"), info["results"][2]


@pytest.mark.parametrize("vocab", [5000, 49152])
def test_picks_over_many_vocab_groups(tmp_path, vocab):
    """Vocabularies that the pick kernel splits over several workgroups per row (stage 0: 5 and 48 groups of ids on
    a CPU adapter, 2 and 12 on a GPU): greedy ids are numpy's argmax, coupled picks numpy's."""
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    path = tmp_path / "m.gguf"
    write_micro_gguf(path, micro_config(vocab_size=vocab, n_layers=1), seed=2, tensor_type="Q8_0", with_tokenizer=False)
    d = describe(path)
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, vocab, 5)]
    ops = [{"op": "forward", "tokens": prompt, "start_pos": 0, "n_out": 1}]
    for pick in PICKS.values():
        ops += [{"op": "decode_ahead", "token": 3, "start_pos": 5, "n": 6, "pick": pick, "rows": True},
                {"op": "truncate", "n": 5}]
    info, outs = run_engine(path, d, ops, seq_len=64)
    res = [r for r in info["results"] if r["op"] == "decode_ahead"]
    for r, rows, pick in zip(res, outs[1:], PICKS.values()):
        check_picks(r["ids"], rows, pick, 6)


@pytest.mark.parametrize("variant", ["cpu_path", "fused"])
@pytest.mark.parametrize("pick_name", ["greedy", "coupled"])
def test_decode_ahead_continuation(models, variant, pick_name):
    """decodeAhead(..., then): the next `then` passes are submitted before the call waits for its readback. The next
    call that asks for exactly them returns their result (stats.continued), BITWISE what it returns without the
    continuation; a truncate, another call (forward) or a call for other passes drops it, and the KV caches are as if
    it never ran (the forwards after each equal those of the same calls made without `then`). A continuation queued
    behind the run before it (submitted by a continued call) is one command buffer (contSplits 1) if it has at most
    contSplitsMaxPasses passes (8 here; by default 4: the 5 passes of call 3 are then split); any other run splits +
    (n - 1) x passSplits of them (here 3 + (n - 1)): a fresh one, and one submitted after a fresh one's readback (the
    GPU idle); with contSplits 0 every run."""
    (path, d), _ = models
    pick = PICKS[pick_name]
    kw = {**VARIANTS[variant], "engine_opts": {**VARIANTS[variant].get("engine_opts", {}), "splits": 3, "passSplits": 1,
                                                 "contSplitsMaxPasses": 8}}
    V = d["config"]["vocab_size"]
    prompt = [int(x) for x in np.random.default_rng(5).integers(0, V, 6)]
    P = len(prompt)

    def ahead(token, pos, n, then):
        return {"op": "decode_ahead", "token": token, "start_pos": pos, "n": n, "pick": pick, "rows": True, "then": then}

    def seq(t):   # t(then) -> the `then` of each call, or 0 for the plain run
        return [{"op": "forward", "tokens": prompt, "start_pos": 0, "n_out": 1},
                ahead(prompt[-1], P, 4, t(8)), ahead("last", P + 4, 8, t(5)), ahead("last", P + 12, 5, t(6)),
                {"op": "truncate", "n": P + 14},                               # drops the continuation of 6
                {"op": "forward", "tokens": [11], "start_pos": P + 14},
                ahead(23, P + 15, 3, t(4)),
                ahead(29, P + 18, 4, t(4)),                                    # another token: not the continuation
                {"op": "forward", "tokens": [13], "start_pos": P + 22},        # drops the continuation of 4
                ahead(31, P + 23, 2, t(7)),
                {"op": "truncate", "n": P + 25},                               # a truncate to the length keeps it
                ahead("last", P + 25, 7, 0),
                {"op": "forward", "tokens": [17], "start_pos": P + 32}]
    info, outs = run_engine(path, d, seq(lambda t: t), **kw)
    info0, outs0 = run_engine(path, d, seq(lambda t: 0), **kw)
    res, res0 = info["results"], info0["results"]
    errors = [r["error"] for r in res + res0 if "error" in r]
    assert not errors, errors
    assert len(outs) == len(outs0)
    for i, (a, b) in enumerate(zip(outs, outs0)):
        assert np.array_equal(bits(a), bits(b)), f"output {i} differs with continuations"
    for r, r0 in zip(res, res0):
        if r["op"] == "decode_ahead":
            assert r["ids"] == r0["ids"] and r["length"] == r0["length"] and not r0["continued"]
    assert [r["continued"] for r in res if r["op"] == "decode_ahead"] == [False, True, True, False, False, False, True]
    # (a run's stats are its own submission's: a continued run was submitted by the call before, queued behind that
    # one's run if that was continued too: calls 2 and 3 continue call 1, call 3's run queued behind call 2's)
    cbs = [(r["command_buffers"], r["continued"], len(r["ids"])) for r in res if r["op"] == "decode_ahead"]
    assert [c for c, _, _ in cbs] == [3 + 4 - 1, 3 + 8 - 1, 1, 3 + 3 - 1, 3 + 4 - 1, 3 + 2 - 1, 3 + 7 - 1], cbs
    assert [r["command_buffers"] for r in res0 if r["op"] == "decode_ahead"] == [3 + n - 1 for _, _, n in cbs]
    kw0 = {**kw, "engine_opts": {**kw["engine_opts"], "contSplits": 0}}
    info2, outs2 = run_engine(path, d, seq(lambda t: t), **kw0)
    res2 = info2["results"]
    assert [r.get("continued") for r in res2] == [r.get("continued") for r in res]
    assert [r["command_buffers"] for r in res2 if r["op"] == "decode_ahead"] == [3 + n - 1 for _, _, n in cbs]
    assert len(outs2) == len(outs) and all(np.array_equal(bits(a), bits(b)) for a, b in zip(outs, outs2))
    kw4 = {**kw, "engine_opts": {k: v for k, v in kw["engine_opts"].items() if k != "contSplitsMaxPasses"}}
    info4, _ = run_engine(path, d, seq(lambda t: t)[:4], **kw4)
    assert [r["command_buffers"] for r in info4["results"][1:]] == [3 + 4 - 1, 3 + 8 - 1, 3 + 5 - 1]


def _four_runs_ahead():
    """A prompt, then four greedy runs ahead of 4 passes, each continuing the one before (`then` 4; the last none)."""
    g = PICKS["greedy"]
    prompt = [5, 9, 2, 71, 33, 12]
    P = len(prompt)

    def ahead(token, pos, n, then):
        return {"op": "decode_ahead", "token": token, "start_pos": pos, "n": n, "pick": g, "rows": True, "then": then}

    return [{"op": "forward", "tokens": prompt, "start_pos": 0, "n_out": 1},
            ahead(8, P, 4, 4), ahead("last", P + 4, 4, 4), ahead("last", P + 8, 4, 4), ahead("last", P + 12, 4, 0)]


def test_fresh_run_continuation_splits(models):
    """contSplitsFresh (app/gpu/options.js): the continuation a fresh run submits after its readback goes in
    contSplitsFresh command buffers (here 2 or 1 instead of splits + passSplits - 1 = 3 + 4 - 1); a continuation
    queued behind a continued run keeps contSplits (1). By default the next continuation (the second call's) is not
    found pre-encoded here (no earlier run of its shape): the fresh run's continuation pre-encoded the next one as a
    shape of its own many buffers, and the continued call submits one buffer; with contSplitsFresh 1 both are the
    same shape and the second call's continuation comes pre-encoded. The ids and the logits rows are bitwise the
    same every way. Fails if the option is ignored."""
    (path, d), _ = models
    ops = _four_runs_ahead()
    runs = {}
    for name, extra in (("default", {}), ("fresh2", {"contSplitsFresh": 2}), ("fresh1", {"contSplitsFresh": 1})):
        info, outs = run_engine(path, d, ops, engine_opts={"splits": 3, "passSplits": 1, **extra})
        res = [r for r in info["results"] if r["op"] == "decode_ahead"]
        assert not [r["error"] for r in info["results"] if "error" in r]
        assert [r["continued"] for r in res] == [False, True, True, True], name
        runs[name] = (res, outs)
    cbs = {n: [r["command_buffers"] for r in res] for n, (res, _) in runs.items()}
    pre = {n: [r["pre_encoded"] for r in res] for n, (res, _) in runs.items()}
    assert cbs == {"default": [3 + 4 - 1, 3 + 4 - 1, 1, 1], "fresh2": [3 + 4 - 1, 2, 1, 1],
                   "fresh1": [3 + 4 - 1, 1, 1, 1]}, cbs
    assert pre == {"default": [False, True, False, True], "fresh2": [False, True, False, True],
                   "fresh1": [False, True, True, True]}, pre
    ref_res, ref_outs = runs["default"]
    for name, (res, outs) in runs.items():
        assert [r["ids"] for r in res] == [r["ids"] for r in ref_res], name
        assert len(outs) == len(ref_outs), name
        assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(outs, ref_outs)), name


def test_fresh_run_continuation_encoded_while_it_runs(models):
    """A fresh run with a continuation (decodeAhead, ngramChain or specChain with `then`: an answer's second run, a
    copy probe's chain): its continuation's commands are encoded after the run is submitted and BEFORE its readback
    (the engine's timeline: the 'pre' event between the run's 'submit' and its 'mapped'), so that only the submission
    is left after the readback. Fails with fresh() resolving after the readback, as it did before 2026-12-06 (the
    encode then followed the 'mapped' event: 1.7-2 ms more between the readback and the continuation on an H100)."""
    (path, d), _ = models
    g = PICKS["greedy"]
    prompt = [5, 9, 2, 71, 33, 12]
    P = len(prompt)
    ops = [{"op": "forward", "tokens": prompt, "start_pos": 0, "n_out": 1},
           {"op": "decode_ahead", "token": 8, "start_pos": P, "n": 4, "pick": g, "rows": False, "then": 4},
           {"op": "decode_ahead", "token": "last", "start_pos": P + 4, "n": 4, "pick": g, "rows": False, "then": 0}]
    info, _ = run_engine(path, d, ops, trace=True)
    assert not [r["error"] for r in info["results"] if "error" in r]
    assert [r.get("continued") for r in info["results"][1:]] == [False, True]
    ev = info["trace"]
    calls = [i for i, e in enumerate(ev) if e["ev"] == "call" and e["kind"] == "ahead"]
    first = ev[calls[0]:calls[1]]                       # the fresh run's call, up to the next call
    kinds = [e["ev"] for e in first]
    assert kinds.count("submit") == 2 and kinds.count("mapped") == 1 and "pre" in kinds, kinds
    i_sub, i_map = kinds.index("submit"), kinds.index("mapped")
    i_pre = kinds.index("pre", i_sub)
    assert i_sub < i_pre < i_map, kinds          # the continuation encoded while the run was on the GPU
    assert kinds.index("submit", i_map) > i_map   # and submitted after the readback (a fresh run's)


def test_deferred_pre_encoding_leaves_the_call_early(models):
    """preDefer (app/gpu/options.js, on by default): a fresh run's continuation, submitted after its readback, puts off
    pre-encoding the next continuation's commands until the next call takes that shape (model.js deferPre / takePre):
    no 'pre' event between the continuation's submission and the fresh call's return (with preDefer off there is one:
    the 2-3 ms the H100's timelines showed there), and the next call's continuation still comes pre-encoded; every
    call's ids and rows are bitwise the same with and without. Fails if the option is ignored or the deferred work is
    lost."""
    (path, d), _ = models
    ops = _four_runs_ahead()
    got = {}
    for name, extra in (("off", {"preDefer": False}), ("default", {})):
        info, outs = run_engine(path, d, ops, trace=True, engine_opts={"contSplitsFresh": 1, **extra})
        res = [r for r in info["results"] if r["op"] == "decode_ahead"]
        assert not [r["error"] for r in info["results"] if "error" in r]
        assert [r["continued"] for r in res] == [False, True, True, True], name
        ev = info["trace"]
        calls = [i for i, e in enumerate(ev) if e["ev"] == "call" and e["kind"] == "ahead"]
        first = [e["ev"] for e in ev[calls[0]:calls[1]]]          # the fresh run's call, up to the next call
        i_map = first.index("mapped")
        i_cont = first.index("submit", i_map)                      # its continuation, after the readback
        got[name] = ("pre" in first[i_cont:first.index("ret")], [r["pre_encoded"] for r in res], res, outs)
    assert got["off"][0] and not got["default"][0], (got["off"][0], got["default"][0])
    assert got["off"][1] == got["default"][1] == [False, True, True, True], (got["off"][1], got["default"][1])
    (_, _, res0, outs0), (_, _, res1, outs1) = got["off"], got["default"]
    assert [r["ids"] for r in res0] == [r["ids"] for r in res1]
    assert len(outs0) == len(outs1) and all(np.array_equal(bits(a), bits(b)) for a, b in zip(outs0, outs1))


def test_answer_first_run_stays_pre_encoded(models):
    """An answer's first run (a fresh decodeAhead of 4 passes, no continuation) comes pre-encoded: the engine keeps
    pre-encoded commands for the plan.preKeep most recent submission shapes (16 by default), and the answer's second
    run (fresh, of the same shape, with a continuation: it takes those commands and encodes its continuation instead)
    has them encoded again by a later continued call (preFirst). Here two answers as the decode loop runs the champion
    alone (runs of 4, the second with a continuation, then continued runs), with 8 other shapes in between (forwards of
    1..5 rows, runs ahead of 1..3 passes): the second answer's first run is pre-encoded by default; not with preFirst
    off (the engine before 2026-12-06: its first run was never pre-encoded in the product's loop), nor when 6 shapes
    are kept, nor with none; the same ids every way."""
    (path, d), _ = models
    g = PICKS["greedy"]
    prompt = [5, 9, 2, 71, 33]
    P = len(prompt)

    def ahead(token, pos, n, then=0):
        return {"op": "decode_ahead", "token": token, "start_pos": pos, "n": n, "pick": g, "rows": False, "then": then}

    def answer():
        return [ahead(8, P, 4), ahead("last", P + 4, 4, 4), ahead("last", P + 8, 4, 4), ahead("last", P + 12, 4, 0),
                {"op": "truncate", "n": P}]

    ops = [{"op": "forward", "tokens": prompt, "start_pos": 0, "n_out": 1}] + answer()
    for n in range(1, 6):                    # other shapes: forwards of n rows, runs ahead of n passes
        ops += [{"op": "forward", "tokens": prompt[:n], "start_pos": P, "n_out": 1}, {"op": "truncate", "n": P}]
        if n < 4:
            ops += [ahead(8, P, n), {"op": "truncate", "n": P}]
    ops += answer()
    runs = {}
    for name, opts in (("default", {}), ("no_refill", {"preFirst": False}), ("keep6", {"preKeep": 6}), ("none", {"preKeep": 0})):
        info, _ = run_engine(path, d, ops, engine_opts=opts)
        res = info["results"]
        assert not [r["error"] for r in res if "error" in r]
        runs_ahead = [r for r in res if r["op"] == "decode_ahead" and len(r["ids"]) == 4]
        assert [r["continued"] for r in runs_ahead] == [False, False, True, True] * 2, name
        runs[name] = ([r["pre_encoded"] for r in runs_ahead[0::4]], [r["ids"] for r in runs_ahead])
    assert runs["default"][0] == [False, True]
    assert runs["no_refill"][0] == runs["keep6"][0] == runs["none"][0] == [False, False]
    assert runs["default"][1] == runs["no_refill"][1] == runs["keep6"][1] == runs["none"][1]


def test_no_continuation_past_a_stop_id(models):
    """decodeAhead's `stop` (the answer's EOS ids): a run that picked one gets no continuation (the answer ends
    there, and passes run past it would only delay the next answer): a fresh run submits none; a continued run, whose
    own continuation was submitted before its ids were known, marks it dropped. Without `stop` the same runs are
    continued, and the ids are the same either way."""
    (path, d), _ = models
    g = PICKS["greedy"]
    prompt = [5, 9, 2, 71, 33]

    def ops(stop1, stop2):
        return [{"op": "forward", "tokens": prompt, "start_pos": 0, "n_out": 1},
                {"op": "decode_ahead", "token": 8, "start_pos": 5, "n": 4, "pick": g, "rows": False, "then": 4, "stop": stop1},
                {"op": "decode_ahead", "token": "last", "start_pos": 9, "n": 4, "pick": g, "rows": False, "then": 3, "stop": stop2},
                {"op": "decode_ahead", "token": "last", "start_pos": 13, "n": 3, "pick": g, "rows": False}]
    info, _ = run_engine(path, d, ops([], []))
    r = info["results"]
    assert [x["continued"] for x in r[1:]] == [False, True, True]
    info2, _ = run_engine(path, d, ops([r[1]["ids"][1], 10 ** 6], []))           # a fresh run that picked a stop id
    assert [x["ids"] for x in info2["results"][1:]] == [x["ids"] for x in r[1:]]
    assert [x["continued"] for x in info2["results"][1:]] == [False, False, True]
    info3, _ = run_engine(path, d, ops([], [r[2]["ids"][3]]))                    # a continued one
    assert [x["ids"] for x in info3["results"][1:]] == [x["ids"] for x in r[1:]]
    assert [x["continued"] for x in info3["results"][1:]] == [False, True, False]
