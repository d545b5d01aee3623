"""The draft head on the champion's features (exactspec.drafters.head): its GGUF layout, its rows, the drafter's
update rule, exactness beside the champion alone (per-forward and batched paths), the simulator the bench uses,
the champion-sha refusal, and the head through the session and the CLI. Micro-models, generated at test time."""
import asyncio
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from exactspec.decode import GenerateConfig, generate
from exactspec.drafters.head import (HeadConfig, HeadDrafter, HeadError, HeadModel, head_memory, is_head_gguf,
                                     random_head_weights, read_head_gguf, write_head_gguf, LAYER_TENSORS)
from exactspec.formats.gguf import GGUFFile
from exactspec.micro import micro_config, micro_weights, write_micro_gguf
from exactspec.reference import ReferenceModel
from exactspec.sampling import Rng, SamplingParams, scaled_logits
from exactspec_train.accept import head_chains, simulate_runs, stop_lengths

SHA_A = "a" * 64
SHA_B = "b" * 64


def champion_weights(cfg, seed=1):
    """Micro weights whose embedding rows have RMS 1, so that rmsnorm(embedding) is the embedding (nearly)."""
    w = micro_weights(cfg, seed)
    e = w["token_embd.weight"]
    w["token_embd.weight"] = (e / np.sqrt((e * e).mean(1, keepdims=True))).astype(np.float32)
    return w


def near_oracle_head(cfg, cw, feat_gain=0.0, seed=0):
    """A head that copies the champion's only layer and reads the embedding: it predicts the champion (nearly)
    exactly; feat_gain > 0 mixes in the feature input (then predicted and true features differ)."""
    hc = HeadConfig.for_champion(cfg)
    hw = random_head_weights(hc, seed)
    hw["head.fc_feat.weight"] *= feat_gain
    hw["head.fc_emb.weight"][:] = np.eye(cfg.dim, dtype=np.float32)
    hw["head.emb_norm.weight"][:] = 1.0
    for t in LAYER_TENSORS:
        hw[f"blk.0.{t}.weight"] = cw[f"blk.0.{t}.weight"].copy()
    return hc, hw


@pytest.fixture(scope="module")
def micro():
    cfg = micro_config(vocab_size=100, n_layers=1, seq_len=128)
    cw = champion_weights(cfg)
    return cfg, cw


def champ_of(micro):
    cfg, cw = micro
    return ReferenceModel(cfg, cw, keep_features=True)


def heads(champ, cfg, cw):
    """name -> head: near-oracle (with and without feature input), random (full vocabulary, subset + window)."""
    out = {}
    hc, hw = near_oracle_head(cfg, cw)
    out["oracle"] = HeadModel(champ, hc, hw)
    hc, hw = near_oracle_head(cfg, cw, feat_gain=0.3, seed=1)
    out["oracle_feat"] = HeadModel(champ, hc, hw)
    hc = HeadConfig.for_champion(cfg)
    out["random"] = HeadModel(champ, hc, random_head_weights(hc, 2, feature_scale=2.0))
    hc = HeadConfig.for_champion(cfg, window=5)
    out["random_subset_window"] = HeadModel(champ, hc, random_head_weights(hc, 3), vocab_ids=np.arange(0, 100, 3))
    return out


def gen(champ, prompt, draft=None, **kw):
    return generate(champ, prompt, GenerateConfig(**{"adaptive": False, "max_new_tokens": 24, **kw}), draft=draft)


PROMPTS = [[5], [3, 9, 27, 81, 43], [10, 11, 12, 13, 14, 15, 16, 17, 18]]


@pytest.mark.parametrize("temperature,mode", [(0.0, "coupled"), (0.8, "coupled"), (1.2, "rejection")])
def test_speculation_with_a_head_equals_the_champion_alone(micro, temperature, mode):
    cfg, cw = micro
    champ = champ_of(micro)
    hs = heads(champ, cfg, cw)
    for seed, prompt in enumerate(PROMPTS):
        kw = dict(temperature=temperature, mode=mode, seed=seed)
        base = gen(champ, prompt, **kw)
        for name, head in hs.items():
            for k in (1, 3, 6):
                per = gen(champ, prompt, head, k=k, drafter="head", batched=False, **kw)
                assert per.token_ids == base.token_ids, (name, k, seed)
                if mode == "rejection":
                    continue
                bat = gen(champ, prompt, head, k=k, drafter="head", **kw)     # spec_round on the reference
                assert bat.token_ids == base.token_ids, (name, k, seed)
                for c in ("target_passes", "draft_passes", "rounds", "proposed", "accepted",
                          "acceptance_by_position"):
                    assert bat.stats[c] == per.stats[c], (name, k, c)


def test_counts_are_consistent_and_the_oracle_is_accepted(micro):
    cfg, cw = micro
    champ = champ_of(micro)
    hs = heads(champ, cfg, cw)
    for name, head in hs.items():
        r = gen(champ, PROMPTS[1], head, k=4, drafter="head", max_new_tokens=40)
        s = r.stats
        assert s["new_tokens"] == len(r.token_ids)
        assert s["tau"] == pytest.approx(len(r.token_ids) / s["target_passes"])
        assert s["draft_passes"] == s["proposed"]         # per round: k passes, k proposals
        assert s["accepted"] <= s["proposed"] and s["rounds"] == s["target_passes"]
        if name.startswith("oracle"):
            assert s["accepted"] / s["proposed"] > 0.9, (name, s)
        if name.startswith("random"):
            assert s["accepted"] / s["proposed"] < 0.5, (name, s)


def test_head_rows_are_batch_invariant(micro):
    cfg, cw = micro
    champ = champ_of(micro)
    seq = [int(x) for x in np.random.default_rng(0).integers(0, 100, 30)]
    champ.forward(seq, 0, 1)
    for name, head in heads(champ, cfg, cw).items():
        head.truncate(0)
        whole = head.forward(seq, 0)                                           # (30, vocab)
        fw = head.predicted_features(0, 30).copy()
        for chunks in ([1] * 30, [7, 1, 13, 9], [29, 1]):
            head.truncate(0)
            pos, rows = 0, []
            for c in chunks:
                rows.append(head.forward(seq[pos:pos + c], pos))
                pos += c
            assert np.array_equal(np.concatenate(rows), whole), (name, chunks)
            assert np.array_equal(head.predicted_features(0, 30), fw), (name, chunks)


def test_rows_past_the_champion_read_the_heads_own_features(micro):
    cfg, cw = micro
    champ = champ_of(micro)
    head = heads(champ, cfg, cw)["oracle_feat"]
    seq = [7, 8, 9, 10, 11, 12, 13, 14]
    champ.forward(seq[:3], 0, 1)                                               # the champion holds 0..2
    head.truncate(0)
    many = head.forward(seq, 0)                                                # rows 4.. need predicted features
    ones = []
    head.truncate(0)
    ones.append(head.forward(seq[:4], 0))
    for q in range(4, 8):
        ones.append(head.forward([seq[q]], q))
    assert np.array_equal(np.concatenate(ones), many)
    # row 4 by hand: its input feature is the head's own output at position 3, not the champion's (it has none)
    h = head
    f3 = h.predicted_features(3, 4)
    L = h.layer
    x = (L._rmsnorm(f3, h.feat_norm) @ h.fc_feat.matrix().T
         + L._rmsnorm(h.embed_rows([seq[4]]), h.emb_norm) @ h.fc_emb.matrix().T)
    h.truncate(4)
    want = L.forward([0], 4, 1, embeds=x)
    h.truncate(4)
    assert np.allclose(h.forward([seq[4]], 4), want, atol=1e-5)
    # a position the head did not compute cannot be read
    head.truncate(0)
    champ.truncate(0)
    with pytest.raises(HeadError, match="not computed"):
        head._features_in(3, 1)


def test_update_drops_what_predicted_features_made(micro):
    cfg, cw = micro
    champ = champ_of(micro)
    head = heads(champ, cfg, cw)["oracle_feat"]
    d = HeadDrafter(head)
    seq = [4, 5, 6, 7, 8]
    champ.forward(seq[:-1], 0, 1)
    feed, start = d.catch_up(seq)
    assert (feed, start) == (seq, 0) and d.round_start == 5
    head.forward(feed, start, 1)
    for tok in (1, 2, 3):                                                      # three proposals past the champion
        head.forward([tok], head.length, 1)
    assert head.length == 8
    d.update(7)                  # 2 tokens committed: positions >= 5 used predicted features
    assert head.length == 5
    d.update(5)
    assert head.length == 4
    # after whole generations the positions the head keeps are exactly those made from true features
    for k in (2, 5):
        champ2 = champ_of(micro)
        h2 = heads(champ2, cfg, cw)["oracle_feat"]
        r = gen(champ2, PROMPTS[2], h2, k=k, drafter="head", max_new_tokens=30)
        seq = PROMPTS[2] + r.token_ids
        kept = h2.length
        assert kept <= len(seq) - 1
        got = h2.predicted_features(0, kept).copy()
        fresh_champ = champ_of(micro)
        fresh_champ.forward(seq, 0, 1)
        fresh = heads(fresh_champ, cfg, cw)["oracle_feat"]
        fresh.forward(seq[:kept], 0, 1)
        assert np.array_equal(got, fresh.predicted_features(0, kept)), k


def greedy_pick(row, t):
    return int(np.argmax(row))


def coupled_pick(temperature, seed, vocab):
    rng, params = Rng(seed), SamplingParams(temperature)
    return lambda row, t: int(np.argmax(scaled_logits(row, params) + rng.gumbel(t, vocab)))


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_chain_simulation_reproduces_the_decode_loop(micro, temperature):
    """The bench's per-start chain simulation gives exactly the loop's tau, acceptance by position and passes, for
    fixed k, the additive schedule and the confidence stop."""
    cfg, cw = micro
    champ = champ_of(micro)
    hs = heads(champ, cfg, cw)
    pick = greedy_pick if temperature == 0 else coupled_pick(temperature, 5, cfg.vocab_size)
    for prompt in PROMPTS[1:]:
        base = gen(champ, prompt, temperature=temperature, seed=5, max_new_tokens=30)
        y = base.token_ids + ([2] if base.finish_reason == "eos" else [])
        champ.truncate(0)
        champ.forward(prompt + y[:-1], 0, 1)
        feats = champ.feature_rows(0, len(prompt) + len(y) - 1).copy()
        for name in ("oracle_feat", "random"):
            head = hs[name]
            ch = head_chains(head, feats, prompt, y, 8, pick)
            for k, schedule, stop in ((3, "fixed", 0.0), (6, "fixed", 0.0), (2, "additive", 0.0),
                                      (5, "fixed", 0.6), (2, "additive", 0.5)):
                stop_at = stop_lengths(ch["top"], stop) if stop else None
                sim = simulate_runs(ch["run"], k, 30, y[-1] == 2, schedule=schedule, k_limit=8, stop_at=stop_at)
                champ.truncate(0)
                real = gen(champ, prompt, head, k=k, drafter="head", temperature=temperature, seed=5,
                           max_new_tokens=30, k_schedule=schedule, draft_stop=stop, head_copy=False)
                assert real.token_ids == base.token_ids
                s = real.stats
                assert sim["tau"] == pytest.approx(s["tau"]), (name, k, schedule, stop)
                assert sim["rounds"] == s["rounds"] and sim["proposed"] == s["proposed"]
                assert sim["draft_passes"] == s["draft_passes"], (name, k, schedule, stop)
                n = len(sim["acceptance_by_position"])
                assert sim["acceptance_by_position"] == pytest.approx(s["acceptance_by_position"][:n])
                assert not any(s["acceptance_by_position"][n:])


def test_gguf_layout_roundtrip(micro, tmp_path):
    cfg, cw = micro
    champ = champ_of(micro)
    hc = HeadConfig.for_champion(cfg, champion_sha256=SHA_A, window=6)
    hw = random_head_weights(hc, 4)
    ids = np.arange(1, 100, 2)
    path = tmp_path / "head.gguf"
    write_head_gguf(path, hc, hw, tensor_type="F32", vocab_ids=ids, training={"steps": 3})
    assert is_head_gguf(path) and not is_head_gguf(tmp_path / "missing.gguf")
    g = GGUFFile(path)
    md = g.metadata
    assert md["general.architecture"] == "exactspec-head"
    assert md["exactspec.head.champion_sha256"] == SHA_A
    assert md["exactspec.head.vocab_subset"] == 50 and md["exactspec.head.attention.window"] == 6
    assert json.loads(md["exactspec.head.training"]) == {"steps": 3}
    desc = g.describe()
    assert not any(t["qk_permuted"] for t in desc["tensors"])
    assert {t["name"] for t in desc["tensors"]} == set(hc.tensor_shapes()) | {"head.vocab_ids"}
    cfg2, w2, ids2 = read_head_gguf(path)
    assert cfg2 == replace(hc, vocab_subset=50) and np.array_equal(ids2, ids)
    for n, a in hw.items():
        assert np.array_equal(w2[n], a), n
    seq = [3, 1, 4, 1, 5, 9, 2, 6]
    champ.forward(seq, 0, 1)
    a = HeadModel(champ, replace(hc, vocab_subset=50), hw, ids).forward(seq, 0)
    b = HeadModel.from_file(path, champ, SHA_A).forward(seq, 0)
    assert np.array_equal(a, b)
    assert np.isneginf(b[:, 0]).all() and np.isfinite(b[:, 1]).all()      # outside the subset: never proposed
    q8 = tmp_path / "head_q8.gguf"
    write_head_gguf(q8, hc, hw, tensor_type="Q8_0")
    c = HeadModel.from_file(q8, champ).forward(seq, 0)
    ref = HeadModel(champ, hc, hw).forward(seq, 0)
    assert np.abs(c - ref).max() < 0.03 * np.abs(ref).max()                  # Q8_0: close, not equal


def test_a_head_for_another_champion_is_refused(micro, tmp_path):
    cfg, cw = micro
    champ = champ_of(micro)
    hc = HeadConfig.for_champion(cfg, champion_sha256=SHA_A)
    path = tmp_path / "head.gguf"
    write_head_gguf(path, hc, random_head_weights(hc, 0), tensor_type="F32")
    with pytest.raises(HeadError) as e:
        HeadModel.from_file(path, champ, SHA_B)
    assert SHA_A in str(e.value) and SHA_B in str(e.value)
    other = ReferenceModel(micro_config(vocab_size=120, n_layers=1), micro_weights(micro_config(vocab_size=120,
                                                                                                n_layers=1), 0),
                           keep_features=True)
    with pytest.raises(HeadError, match="does not fit"):
        HeadModel.from_file(path, other)
    with pytest.raises(HeadError, match="keep_features"):
        HeadModel.from_file(path, ReferenceModel(cfg, cw))
    bad = tmp_path / "bad.gguf"
    write_micro_gguf(bad, cfg, 0)
    with pytest.raises(HeadError, match="not a draft head"):
        read_head_gguf(bad)


def test_memory_of_a_smollm2_sized_head_fits_the_budget():
    from exactspec.backend import ModelConfig
    smol = ModelConfig(dim=576, hidden_dim=1536, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64,
                       vocab_size=49152, seq_len=8192, rope_theta=1e5)
    champion_bytes = 98_362_432                                                # DESIGN.md
    full = head_memory(HeadConfig.for_champion(smol), 8192)
    fits = head_memory(HeadConfig.for_champion(smol, window=1024, vocab_subset=16384), 8192)
    assert HeadConfig.for_champion(smol).n_params() == 4_204_800
    assert full["total"] > champion_bytes // 10                                # a full-context KV does not fit
    assert fits["total"] <= champion_bytes // 10, fits


def session_files(tmp_path, micro):
    cfg = micro_config(vocab_size=300, n_layers=1)
    champ_path = tmp_path / "champ.gguf"
    write_micro_gguf(champ_path, cfg, 1)
    from exactspec_train.data import sha256_file
    sha = sha256_file(champ_path)
    w = micro_weights(cfg, 1)
    hc, hw = near_oracle_head(cfg, w, feat_gain=0.2)
    hc = replace(hc, champion_sha256=sha)
    head_path = tmp_path / "head.gguf"
    write_head_gguf(head_path, hc, hw, tensor_type="F32")
    wrong = tmp_path / "wrong.gguf"
    write_head_gguf(wrong, replace(hc, champion_sha256=SHA_B), hw, tensor_type="F32")
    return champ_path, head_path, wrong, sha


def test_session_generates_with_a_head_and_refuses_a_foreign_one(micro, tmp_path):
    from exactspec.session import Session, SessionError
    champ_path, head_path, wrong, sha = session_files(tmp_path, micro)
    s = Session()
    with pytest.raises(SessionError, match="load the champion first"):
        s.load("head", str(head_path), role="draft")
    s.load("champ", str(champ_path), role="champion")
    with pytest.raises(SessionError) as e:
        s.load("wrong", str(wrong), role="draft")
    assert SHA_B in str(e.value) and sha in str(e.value)
    # the page describes a file for the WebGPU engine before loading it there: a head has tensors and no llama
    # config, which is not an error (the engine's loadHead reads its own metadata)
    desc = json.loads(s.describe(str(head_path)))
    assert desc["config"] is None and desc["tensors"]
    out = json.loads(s.load("head", str(head_path), role="draft"))
    assert out["summary"]["kind"] == "head"
    req = {"prompt": "hello there", "max_new_tokens": 20, "adaptive": False}
    base = asyncio.run(s.generate({**req, "drafter": "none"}))
    for k in (1, 4):
        r = asyncio.run(s.generate({**req, "drafter": "head", "k": k}))
        assert r["token_ids"] == base["token_ids"] and r["stats"]["accepted"] > 0
    with pytest.raises(SessionError, match="drafter 'model' needs a draft model"):
        asyncio.run(s.generate({**req, "drafter": "model"}))
    s.load("champ", str(champ_path), role="champion")                          # reloaded: the head follows it
    r = asyncio.run(s.generate({**req, "drafter": "head", "k": 3}))
    assert r["token_ids"] == base["token_ids"]


def test_cli_drafter_head(micro, tmp_path, capsys):
    from exactspec.__main__ import main
    champ_path, head_path, wrong, sha = session_files(tmp_path, micro)
    args = ["generate", "--model", str(champ_path), "--prompt", "hi", "--max-new-tokens", "12", "--json",
            "--no-adaptive"]
    assert main(args + ["--drafter", "none"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert main(args + ["--drafter", "head", "--draft", str(head_path), "--k", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["token_ids"] == base["token_ids"] and out["stats"]["drafter"] == "head"
    assert main(args + ["--drafter", "head"]) == 2
    assert "--draft" in capsys.readouterr().err
    assert main(args + ["--drafter", "head", "--draft", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert SHA_B in err and sha in err


def test_head_manifest_checks_the_files(micro, tmp_path):
    from exactspec_train.data import sha256_file
    from exactspec_train.make_head_manifest import build
    champ_path, head_path, wrong, sha = session_files(tmp_path, micro)
    workload = Path(__file__).resolve().parent / "data" / "workload.jsonl"
    prep = {"champion_sha256": sha, "workload_sha256": sha256_file(workload), "stats": {"chitchat": {
        "dropped_for_workload_overlap": 0}}, "sources": [{"package": "p", "version": "1", "license": "MIT",
                                                          "sha256": "d" * 64}],
            "prompts_sha256": "e" * 64, "corpus_sha256": "f" * 64, "seed": 1}
    rec = {"gguf_sha256": sha256_file(head_path), "hp": {"depth": 4}, "seed": 3, "steps_done": 10, "seconds": 1.0,
           "data": {"train_answers": 5}, "eval": {"tau_greedy": {"4": 2.5}}, "history": [{"loss": 3.0},
                                                                                        {"loss": 1.0}]}
    run = {"argv": ["all"], "answers": {"done": 5, "refused": 0, "prompts": 6, "gen_sha256": "0" * 64,
                                        "temps": {"0.0": 1.0}, "max_new": 16},
           "variants": {"full": rec, "no-filter": {**rec, "gguf_sha256": "1" * 64}}}
    m = build(head_path, "full", run, prep, champ_path, workload, None)
    assert m["head"]["sha256"] == rec["gguf_sha256"] and m["champion"]["sha256"] == sha
    assert m["train"]["loss_last"] == 1.0 and set(m["ablations"]) == {"no-filter"}
    assert all(s.get("license") and s.get("sha256") for s in m["training_sources"])
    # the prompt set's seed where it is not prep's default (a rerun must draw the same prompts), and the trainer's host
    from exactspec_train.data import PREP_SEED_DEFAULT
    from exactspec_train.make_head_manifest import HOST_DEFAULT
    assert "SEED=1 " in m["rerun"]["prep"] and "--seed 1 " in m["rerun"]["prep"] and m["train"]["host"] == HOST_DEFAULT
    m0 = build(head_path, "full", run, {**prep, "seed": PREP_SEED_DEFAULT}, champ_path, workload, None, host="an H100")
    assert "SEED" not in m0["rerun"]["prep"] and "--seed" not in m0["rerun"]["prep"]
    assert m0["train"]["host"] == "an H100"
    assert m0["data"]["structured_share"] == 0.0 and "STRUCTURED" not in m0["rerun"]["prep"]
    m1 = build(head_path, "full", run, {**prep, "structured_share": 0.2}, champ_path, workload, None)
    assert m1["data"]["structured_share"] == 0.2 and "STRUCTURED_SHARE=0.2 " in m1["rerun"]["prep"] \
        and "--structured-share 0.2 " in m1["rerun"]["prep"]
    with pytest.raises(SystemExit, match="is not the 'full' head"):
        build(wrong, "full", run, prep, champ_path, workload, None)
    with pytest.raises(SystemExit, match="champion mismatch"):
        build(head_path, "full", run, {**prep, "champion_sha256": SHA_B}, champ_path, workload, None)
    # head_run multi's run.json: runs by name, the data and (since 2026-12-03) the answers beside them; a bench
    # of several heads keeps only this head's figures
    mrec = {k: v for k, v in rec.items() if k not in ("seed", "seconds", "data")}
    mrun = {"argv": ["multi", "--plan", "long:full:9:1"], "data": {"train_answers": 7},
            "runs": {"long": {**mrec, "variant": "full", "train_seconds": 2.0, "total_s": 9.0}}}
    with pytest.raises(SystemExit, match="pass --answers"):
        build(head_path, "long", mrun, prep, champ_path, workload, None)
    with pytest.raises(SystemExit, match="'full' is not in this run.json"):
        build(head_path, "full", mrun, prep, champ_path, workload, None, run["answers"])
    bench = {"prompts": 136, "heads": {"a": {"sha256": rec["gguf_sha256"]}, "b": {"sha256": "2" * 64}},
             "by_drafter": {"a": {"greedy": 1}, "b": {"greedy": 2}}}
    m = build(head_path, "long", mrun, prep, champ_path, workload, bench, run["answers"])
    assert m["train"]["variant"] == "full" and m["train"]["run"] == "long" and m["train"]["seed"] == 4321
    assert m["train"]["seconds"] == 2.0 and m["data"]["train_answers"] == 7
    assert m["measured"]["by_drafter"] == {"a": {"greedy": 1}} and m["measured"]["prompts"] == 136
    assert "train_head_multi.sh" in m["rerun"]["device"] and m["rerun"]["variant"] == "plan entry long:full:9.0"
    with pytest.raises(SystemExit, match="did not measure this head"):
        build(head_path, "long", mrun, prep, champ_path, workload, {**bench, "heads": {"b": {"sha256": "2" * 64}}},
              run["answers"])
    # a run started from a trained head (head_run multi --init): its manifest is required, and must be that head's
    wrec = {**mrec, "variant": "full", "train_seconds": 2.0, "total_s": 9.0,
            "hp": {"depth": 4, "init": "old.gguf", "init_sha256": "9" * 64}}
    wrun = {**mrun, "runs": {"warm": wrec}}
    with pytest.raises(SystemExit, match="pass its manifest"):
        build(head_path, "warm", wrun, prep, champ_path, workload, None, run["answers"])
    before = {**m, "head": {**m["head"], "sha256": "9" * 64}}
    with pytest.raises(SystemExit, match="describes the head"):
        build(head_path, "warm", wrun, prep, champ_path, workload, None, run["answers"], m)
    w = build(head_path, "warm", wrun, prep, champ_path, workload, None, run["answers"], before)
    assert w["train"]["starts_from"]["head_sha256"] == "9" * 64
    assert w["train"]["starts_from"]["its_train"] == m["train"] and w["train"]["hp"]["init"] == "old.gguf"
    with pytest.raises(SystemExit, match="only for a run started from a trained head"):
        build(head_path, "long", mrun, prep, champ_path, workload, None, run["answers"], before)


def test_reference_keeps_features_takes_input_rows_and_windows(micro):
    cfg, cw = micro
    seq = [int(x) for x in np.random.default_rng(2).integers(0, 100, 20)]
    plain = ReferenceModel(cfg, cw)
    logits, feats = plain.forward(seq, 0, 20, features=True)
    with pytest.raises(ValueError, match="keep_features"):
        plain.feature_rows(0, 1)
    kept = ReferenceModel(cfg, cw, keep_features=True, max_len=64)
    for a, b in ((0, 7), (7, 8), (8, 20)):                                     # chunked: the same rows
        assert np.array_equal(kept.forward(seq[a:b], a, b - a), logits[a:b])
    assert np.array_equal(kept.feature_rows(0, 20), feats)
    with pytest.raises(ValueError, match="outside"):
        kept.feature_rows(0, 21)
    kept.truncate(5)                                                           # rows past length are not held
    with pytest.raises(ValueError, match="outside"):
        kept.feature_rows(0, 6)
    # embeds: the layers' input rows instead of the embedding lookup (the same rows give the same logits)
    e = ReferenceModel(cfg, cw)
    assert np.array_equal(e.forward([0] * 20, 0, 20, embeds=cw["token_embd.weight"][seq]), logits)
    # window: a window as long as the sequence changes nothing; a short one changes the later rows only
    w20 = ReferenceModel(cfg, cw, window=20).forward(seq, 0, 20)
    w4 = ReferenceModel(cfg, cw, window=4).forward(seq, 0, 20)
    assert np.array_equal(w20, logits)
    assert np.array_equal(w4[:4], logits[:4]) and not np.allclose(w4[4:], logits[4:])
    with pytest.raises(ValueError, match="window"):
        ReferenceModel(cfg, cw, window=-1)
