"""The draft head on the WebGPU engine (app/gpu/head.js, engine.loadHead) under Node + Dawn (llvmpipe):

- its rows equal numpy's HeadModel (top-1 equal, max |diff| small) on micro champions, full vocabulary or a subset
  (indexed LM head, or full LM head + mask), with and without an attention window, F32 / F16 / Q8_0 weights, on the
  engine's variants (CPU-adapter matmul, GPU lanes, the subgroup kernel and the fused champion with one-lane
  subgroups emulated);
- they are BITWISE batch-invariant: one forward, two forwards, 3-row chunks, and rows past the champion in one
  submission or one by one give the same bits;
- champion.specRound(head, ...) equals the same passes one by one, bitwise (greedy and coupled picks on the GPU);
- what it refuses (a missing predicted feature, a head that does not fit the champion).
"""
from __future__ import annotations

import numpy as np
import pytest

from dawn_harness import probe, run_engine

_why = probe()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")

VARIANTS = {"cpu_path": {}, "gpu_lanes": {"lanes": 32}, "subgroup": {"emulate_sg": True},
            "fused": {"emulate_sg": True, "engine_opts": {"fuse": True}}}
VOCAB = 300
CHAMP_CFG = dict(vocab_size=VOCAB, n_layers=2, seq_len=128)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The champion (Q8_0) and heads: name -> (path, description)."""
    from exactspec.drafters.head import HeadConfig, random_head_weights, write_head_gguf
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    td = tmp_path_factory.mktemp("head_engine")
    cfg = micro_config(**CHAMP_CFG)
    champ = td / "champ.gguf"
    write_micro_gguf(champ, cfg, seed=1, tensor_type="Q8_0")
    out = {"champion": (champ, describe(champ))}
    heads = {"full_f32": (dict(), "F32", None, 2), "subset_window_q8": (dict(window=5), "Q8_0", np.arange(0, VOCAB, 3), 3),
             "subset_f16": (dict(), "F16", np.arange(7, VOCAB, 2), 4)}
    for name, (over, ttype, ids, seed) in heads.items():
        hc = HeadConfig.for_champion(cfg, **over)
        p = td / f"{name}.gguf"
        write_head_gguf(p, hc, random_head_weights(hc, seed, feature_scale=2.0), tensor_type=ttype, vocab_ids=ids)
        out[name] = (p, describe(p))
    return out


def numpy_models(files, head):
    from exactspec.drafters.head import HeadModel
    from exactspec.reference import ReferenceModel
    c = ReferenceModel.from_file(files["champion"][0], keep_features=True)
    return c, HeadModel.from_file(files[head][0], c)


TOKS = [int(x) for x in np.random.default_rng(5).integers(0, VOCAB, 12)]
PAST = [17, 250, 3]          # head rows past the champion (each reads the feature its predecessor predicts)


def head_ops():
    """The champion holds TOKS; the head computes them at once, in two forwards, then PAST in one forward and one by
    one. Rows: [all 12], [5], [7], [3 past], [1], [1], [1]."""
    T, P = TOKS, PAST
    return [{"op": "forward", "tokens": T, "start_pos": 0, "n_out": 1},
            {"op": "forward", "tokens": T, "start_pos": 0, "n_out": 12, "on": "head"},
            {"op": "truncate", "n": 0, "on": "head"},
            {"op": "forward", "tokens": T[:5], "start_pos": 0, "n_out": 5, "on": "head"},
            {"op": "forward", "tokens": T[5:], "start_pos": 5, "n_out": 7, "on": "head"},
            {"op": "forward", "tokens": P, "start_pos": 12, "n_out": 3, "on": "head"},
            {"op": "truncate", "n": 12, "on": "head"},
            *[{"op": "forward", "tokens": [t], "start_pos": 12 + i, "n_out": 1, "on": "head"} for i, t in enumerate(P)],
            {"op": "memory", "on": "head"}]


def check_head(files, head, variant, head_opts=None, bound=2e-4):
    kw = VARIANTS[variant]
    info, outs = run_engine(*files["champion"], head_ops(), head=(*files[head], head_opts or {}), **kw)
    errs = [r for r in info["results"] if "error" in r]
    assert not errs, errs
    champ_row, full, a, b, past, *one = outs
    bits = lambda x: np.ascontiguousarray(x).view(np.uint32)               # noqa: E731
    # bitwise batch invariance
    assert np.array_equal(bits(full), bits(np.concatenate([a, b]))), "one forward vs two forwards"
    assert np.array_equal(bits(past), bits(np.concatenate(one))), "rows past the champion: one submission vs one by one"
    # parity with numpy's HeadModel
    c, h = numpy_models(files, head)
    c.forward(TOKS, 0, 1)
    ref = np.concatenate([h.forward(TOKS, 0, 12), h.forward(PAST, 12, 3)])                 # (15, vocab)
    got = np.concatenate([full, past])
    fin = np.isfinite(ref)
    assert np.array_equal(fin, np.isfinite(got)), "the subset's -inf pattern"
    assert (ref.argmax(1) == got.argmax(1)).all()
    diff = float(np.abs(ref[fin] - got[fin]).max() / max(1.0, np.abs(ref[fin]).max()))
    print(f"[head] {head} {variant} {head_opts or ''}: max |diff| {diff:.2e} (relative to the largest logit)")
    assert diff < bound
    return info, full


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_head_equals_numpy_and_is_batch_invariant(files, variant):
    info, _ = check_head(files, "subset_window_q8", variant)
    mem = [r for r in info["results"] if r["op"] == "memory"][0]["memory"]
    assert mem["champion_features"] == 128 * 64 * 4 and mem["kv"] == 2 * 128 * 2 * 16 * 4 and mem["shared_rope"]


@pytest.mark.parametrize("head,opts", [("full_f32", {}), ("subset_f16", {}), ("subset_f16", {"headVocab": "masked"}),
                                       ("subset_window_q8", {"maxRows": 3}), ("subset_window_q8", {"headLanes": 8})],
                         ids=["full_vocab", "subset_indexed", "subset_masked", "chunks3", "subset_8_lanes"])
def test_head_kinds(files, head, opts):
    _, full = check_head(files, head, "cpu_path", opts)
    if head == "subset_f16":   # indexed and masked LM heads: the same rows (they differ only in rounding)
        assert np.isinf(full[:, 0]).all() and np.isfinite(full[:, 7]).all()


PICKS = {"greedy": {"temperature": 0, "seed": 0}, "coupled": {"temperature": 0.8, "seed": 12345}}


@pytest.mark.parametrize("variant", ["cpu_path", "fused"])
@pytest.mark.parametrize("pick", list(PICKS))
def test_spec_round_with_a_head_equals_the_passes_one_by_one(files, variant, pick):
    """The champion holds TOKS[:-1] (P positions), the head TOKS[:d]; specRound(head, TOKS[d:], d, k, TOKS[-1], P)
    against head forwards of the feed and then of each proposal (each reading the feature the pass before it
    predicted), then the champion's verify forward: the same rows bit for bit, the proposals the picks of the
    head's own rows, and the same KV state after (a forward after both)."""
    from test_batched_engine import check_picks
    T, P, d, k = TOKS, len(TOKS) - 1, 4, 4
    pk = PICKS[pick]
    ops = [{"op": "forward", "tokens": T[:P], "start_pos": 0, "n_out": 1},
           {"op": "forward", "tokens": T[:d], "start_pos": 0, "n_out": 1, "on": "head"},
           {"op": "spec_round", "draft": "head", "feed": T[d:], "draft_start": d, "k": k, "token": T[-1], "start_pos": P,
            "pick": pk, "rows": True},
           {"op": "forward", "tokens": [5], "start_pos": P + k + 1, "n_out": 1},
           {"op": "truncate", "n": P}, {"op": "truncate", "n": d, "on": "head"},
           {"op": "forward", "tokens": T[d:], "start_pos": d, "n_out": 1, "on": "head"}]
    info, outs = run_engine(*files["champion"], ops, head=files["subset_window_q8"], **VARIANTS[variant])
    res = info["results"]
    assert not [r for r in res if "error" in r], res
    rnd = res[2]
    assert rnd["length"] == P + k + 1 and rnd["draft_length"] == d + len(T[d:]) + k - 1
    props = rnd["proposals"]
    # the one-by-one passes, fed the round's proposals
    ops2 = ops[:1] + ops[1:2] + [{"op": "forward", "tokens": T[d:], "start_pos": d, "n_out": 1, "on": "head"}]
    ops2 += [{"op": "forward", "tokens": [props[i - 1]], "start_pos": P + i, "n_out": 1, "on": "head"} for i in range(1, k)]
    ops2 += [{"op": "forward", "tokens": [T[-1]] + props, "start_pos": P, "n_out": k + 1},
             {"op": "forward", "tokens": [5], "start_pos": P + k + 1, "n_out": 1}]
    info2, outs2 = run_engine(*files["champion"], ops2, head=files["subset_window_q8"], **VARIANTS[variant])
    assert not [r for r in info2["results"] if "error" in r]
    bits = lambda x: np.ascontiguousarray(x).view(np.uint32)               # noqa: E731
    round_rows, after = outs[2], outs[3]                                    # (outs: the ops that returned rows)
    head_rows = np.concatenate(outs2[2:2 + k])                              # (k, vocab) the head's one-by-one rows
    verify, after2 = outs2[2 + k], outs2[3 + k]
    assert np.array_equal(bits(outs[4]), bits(outs2[2])), "the head's feed row again after rolling the round back"
    assert np.array_equal(bits(round_rows), bits(verify)), "the champion's verify rows"
    assert np.array_equal(bits(after), bits(after2)), "the champion's KV after the round"
    check_picks(props, head_rows, pk, P + 1)                                # proposals = picks of the head's rows
    check_picks(rnd["ids"], round_rows, pk, P + 1)


def test_a_head_that_does_not_fit_the_champion_is_refused(files, tmp_path):
    from exactspec.drafters.head import HeadConfig, random_head_weights, write_head_gguf
    from exactspec.formats import describe
    from exactspec.micro import micro_config
    hc = HeadConfig.for_champion(micro_config(vocab_size=VOCAB, dim=96, n_heads=6))
    p = tmp_path / "wide.gguf"
    write_head_gguf(p, hc, random_head_weights(hc, 0), tensor_type="F32")
    with pytest.raises(RuntimeError, match=r"does not fit the champion \(dim 64"):
        run_engine(*files["champion"], [], head=(p, describe(p)))


CHAMPION = __import__("pathlib").Path(__file__).resolve().parents[2] / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"


@pytest.mark.slow
@pytest.mark.skipif(not CHAMPION.exists(), reason="run `python build.py setup` to fetch the champion")
def test_smollm2_with_a_random_head(tmp_path):
    """SmolLM2 with a random head of the trained head's shape (16,384-id subset, 1,024-position window, Q8_0, made
    for its sha256) at the page's GPU context (2,048): parity with numpy's HeadModel, bitwise batch invariance, and
    the head's own GPU memory (weights + KV + scratch, one logits row a pass as the decode loop asks) within 10% of
    the champion's 98 MB (the champion's kept features, 4.7 MB at this context, are reported beside it)."""
    from exactspec.drafters.head import HeadConfig, HeadModel, random_head_weights, write_head_gguf
    from exactspec.formats import describe
    from exactspec.formats.gguf import GGUFFile
    from exactspec.reference import ReferenceModel
    from exactspec_train.data import sha256_file
    cfg = GGUFFile(CHAMPION).config()
    hc = HeadConfig.for_champion(cfg, champion_sha256=sha256_file(CHAMPION), window=1024)
    p = tmp_path / "head.gguf"
    ids = np.sort(np.random.default_rng(3).choice(cfg.vocab_size, 16384, replace=False))
    write_head_gguf(p, hc, random_head_weights(hc, 7), tensor_type="Q8_0", vocab_ids=ids)
    toks = [1, 4093, 198, 1780, 314, 260]          # "<|im_start|>user\nWhat is the"
    past = [3681, 30]
    ops = [{"op": "forward", "tokens": toks, "start_pos": 0, "n_out": 1},
           {"op": "forward", "tokens": toks[:1], "start_pos": 0, "n_out": 1, "on": "head"},
           {"op": "memory", "on": "head"},              # as the decode loop uses it: one logits row a pass
           {"op": "truncate", "n": 0, "on": "head"},
           {"op": "forward", "tokens": toks, "start_pos": 0, "n_out": 6, "on": "head"},
           {"op": "truncate", "n": 0, "on": "head"},
           {"op": "forward", "tokens": toks[:3], "start_pos": 0, "n_out": 3, "on": "head"},
           {"op": "forward", "tokens": toks[3:], "start_pos": 3, "n_out": 3, "on": "head"},
           {"op": "forward", "tokens": past, "start_pos": 6, "n_out": 2, "on": "head"}]
    info, outs = run_engine(CHAMPION, describe(CHAMPION), ops, head=(p, describe(p)), seq_len=2048, timeout=1800)
    assert not [r for r in info["results"] if "error" in r], info["results"]
    _, _, full, a, b, got_past = outs
    bits = lambda x: np.ascontiguousarray(x).view(np.uint32)               # noqa: E731
    assert np.array_equal(bits(full), bits(np.concatenate([a, b])))
    c = ReferenceModel.from_file(CHAMPION, keep_features=True, max_len=64)
    h = HeadModel.from_file(p, c)
    c.forward(toks, 0, 1)
    ref = np.concatenate([h.forward(toks, 0, 6), h.forward(past, 6, 2)])
    got = np.concatenate([full, got_past])
    fin = np.isfinite(ref)
    assert np.array_equal(fin, np.isfinite(got)) and (ref.argmax(1) == got.argmax(1)).all()
    diff = float(np.abs(ref[fin] - got[fin]).max())
    mem = [r for r in info["results"] if r["op"] == "memory"][0]["memory"]
    print(f"[head smollm2] max |diff| {diff:.2e} (largest logit {np.abs(ref[fin]).max():.1f}); memory {mem}")
    assert diff < 2e-3
    assert mem["total"] <= 98_362_432 // 10, mem
