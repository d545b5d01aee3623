"""exactspec.reference: correctness against an independent float64 implementation, BITWISE batch invariance
(one token at a time == verify blocks == prefills of any chunking, with rollbacks) for both kernels, every cut of the
weights into row blocks and every row count, across attention buckets, in CPython and in Pyodide; KV contract, clear
errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from exactspec.micro import micro_config, micro_model, micro_weights, tiny_config
from exactspec.reference import ATT_BUCKET, KERNELS, ReferenceModel, log_softmax, numpy_has_blas, softmax

ROOT = Path(__file__).resolve().parents[1]
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"

CONFIGS = {
    "gqa": micro_config(),
    "mha_untied": micro_config(n_kv_heads=4, tied_embeddings=False, vocab_size=120),
    "partial_rope": micro_config(rope_dim=8, rope_theta=500.0, n_layers=3),
    "mqa_wide": micro_config(dim=96, n_heads=6, n_kv_heads=1, hidden_dim=160, head_dim=16, rope_dim=16),
    "tiny": tiny_config(),
}


def naive_forward(cfg, w, tokens):
    """Independent float64 implementation, written like HF's modeling_llama (full causal mask, repeat_kv)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    n, hd, nh, nkv = len(tokens), cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    r = cfg.rope_dim or hd
    inv = 1.0 / cfg.rope_theta ** (np.arange(0, r, 2) / r)
    ang = np.outer(np.arange(n), inv)
    cos, sin = np.concatenate([np.cos(ang)] * 2, 1), np.concatenate([np.sin(ang)] * 2, 1)   # (n, r)

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.norm_eps) * g

    def rope(x):                                   # (heads, n, hd)
        xr, xp = x[..., :r], x[..., r:]
        rot = np.concatenate([-xr[..., r // 2:], xr[..., : r // 2]], -1)
        return np.concatenate([xr * cos + rot * sin, xp], -1)

    h = w["token_embd.weight"][tokens]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        x = rms(h, w[p + "attn_norm.weight"])
        q = (x @ w[p + "attn_q.weight"].T).reshape(n, nh, hd).transpose(1, 0, 2)
        k = (x @ w[p + "attn_k.weight"].T).reshape(n, nkv, hd).transpose(1, 0, 2)
        v = (x @ w[p + "attn_v.weight"].T).reshape(n, nkv, hd).transpose(1, 0, 2)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, nh // nkv, 0), np.repeat(v, nh // nkv, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(n, nh * hd)
        h = h + o @ w[p + "attn_output.weight"].T
        x = rms(h, w[p + "ffn_norm.weight"])
        g, u = x @ w[p + "ffn_gate.weight"].T, x @ w[p + "ffn_up.weight"].T
        h = h + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
    out = w.get("output.weight", w["token_embd.weight"])
    return rms(h, w["output_norm.weight"]) @ out.T


from exactspec import simd as _simd                                                               # noqa: E402

# the kernels CPython has here: "simd" where matvec.c compiles (x86-64 with AVX and a C compiler; tests/test_simd.py)
KERNEL_NAMES = [k for k in KERNELS if k != "auto" and (k != "simd" or _simd.load() is not None)]


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_matches_independent_float64(name, kernel):
    cfg = CONFIGS[name]
    w = micro_weights(cfg, 11)
    toks = np.random.default_rng(0).integers(0, cfg.vocab_size, 37).tolist()
    ours = ReferenceModel.from_weights(cfg, w, kernel=kernel).forward(toks, 0)  # (37, vocab)
    ref = naive_forward(cfg, w, toks)
    assert ours.dtype == np.float32 and ours.shape == (37, cfg.vocab_size)
    assert np.max(np.abs(ours - ref)) < 2e-4 * max(1.0, np.abs(ref).max())
    assert np.array_equal(ours.argmax(1), ref.argmax(1))
    # logits are not flat (micro-models are useful for sampling tests)
    assert softmax(ours).max(axis=1).mean() > 0.1


def one_at_a_time(model, toks):
    model.truncate(0)
    return np.concatenate([model.forward([t], i) for i, t in enumerate(toks)])


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_batch_invariance_bitwise(name, kernel):
    cfg = CONFIGS[name]
    m = ReferenceModel.from_weights(cfg, micro_weights(cfg, 3), kernel=kernel)
    rng = np.random.default_rng(1)
    toks = rng.integers(0, cfg.vocab_size, 48).tolist()
    ref = one_at_a_time(m, toks)                                                # (48, vocab)
    m.truncate(0)
    assert np.array_equal(m.forward(toks, 0), ref), "full prefill differs from one-at-a-time"
    for trial in range(6):                                                      # random chunkings
        m.truncate(0)
        pos, rows = 0, []
        while pos < len(toks):
            n = int(rng.integers(1, 12))
            rows.append(m.forward(toks[pos: pos + n], pos))
            pos += len(rows[-1])
        assert np.array_equal(np.concatenate(rows), ref), f"chunking trial {trial}"
    # speculative shape: blocks of k+1 with rejected tails rolled back, then re-fed
    m.truncate(0)
    m.forward(toks[:5], 0)
    pos = 5
    while pos < len(toks):
        k = int(rng.integers(1, 6))
        junk = rng.integers(0, cfg.vocab_size, k + 1).tolist()
        m.forward(junk, pos)                                                    # a wrong draft, rolled back
        m.truncate(pos)
        block = toks[pos: pos + k + 1]
        got = m.forward(block, pos)
        assert np.array_equal(got, ref[pos: pos + len(block)])
        accepted = int(rng.integers(0, len(block) + 1))
        m.truncate(pos + accepted)                                              # keep a prefix only
        pos += max(accepted, 1) if accepted else 0
        if accepted == 0:
            m.forward([toks[pos]], pos)
            pos += 1
    # n_out returns the last rows bitwise
    m.truncate(0)
    assert np.array_equal(m.forward(toks, 0, n_out=3), ref[-3:])


def invariance_failures(model, toks, starts, counts, chunks=(1, 3, 7, 9, 64, 5)):
    """Where `model` breaks batch invariance on `toks`: the rows of one-token-at-a-time passes are the reference;
    every forward of `n` in `counts` tokens after a prefix of every length in `starts` (and after a junk block rolled
    back), and a prefill in chunks cycling through `chunks`, must give exactly those rows. Returns what differed.
    Plain numpy: tests run this same function in Pyodide (see test_invariance_in_pyodide)."""
    import numpy as np
    model.truncate(0)
    ref = np.concatenate([model.forward([t], i) for i, t in enumerate(toks)])      # (len, vocab)
    bad = []
    model.truncate(0)
    pos, j = 0, 0
    while pos < len(toks):
        n = chunks[j % len(chunks)]
        if not np.array_equal(model.forward(toks[pos: pos + n], pos), ref[pos: pos + n]):
            bad.append(("prefill chunk", pos, n))
        pos, j = pos + len(toks[pos: pos + n]), j + 1
    for s in starts:
        model.truncate(0)
        if s:
            model.forward(toks[:s], 0)
        for n in counts:
            if s + n > len(toks):
                continue
            junk = [(7 * t + 3) % model.config.vocab_size for t in toks[s: s + n]]
            model.forward(junk, s)                                                  # a wrong draft, rolled back
            model.truncate(s)
            if not np.array_equal(model.forward(toks[s: s + n], s), ref[s: s + n]):
                bad.append(("block", s, n))
            model.truncate(s)
    return bad


ODD = micro_config(dim=96, n_heads=6, n_kv_heads=2, hidden_dim=160, head_dim=16, rope_dim=16, vocab_size=250,
                   seq_len=400)
ROWS_STARTS = (0, 1, ATT_BUCKET - 5, ATT_BUCKET - 1, ATT_BUCKET, 100, 2 * ATT_BUCKET - 1, 2 * ATT_BUCKET)
ROWS_COUNTS = tuple(range(1, 10)) + (17, ATT_BUCKET)


@pytest.mark.parametrize("kernel,block_rows", [(k, b) for k in KERNEL_NAMES for b in (1, 2, 3, 4, 8, None)
                                                if k != "simd" or b is None])     # "simd" has no row blocks
def test_rows_block_cuts_and_buckets_bitwise(kernel, block_rows):
    """Row counts 1..9, 17, 64 after prefixes on both sides of attention bucket edges, prefills in odd chunks, for
    weights cut into blocks of 1, 2, 3, 4, 8 rows (last blocks ragged: 160, 320, 96 and 250 rows) or the default."""
    bb = None if block_rows is None else block_rows * 4 * ODD.dim
    m = ReferenceModel.from_weights(ODD, micro_weights(ODD, 5), kernel=kernel, block_bytes=bb)
    if block_rows is not None:
        assert len(m._head.blocks) == -(-ODD.vocab_size // block_rows)          # the cut asked for
    toks = np.random.default_rng(6).integers(0, ODD.vocab_size, 2 * ATT_BUCKET + 40).tolist()
    assert invariance_failures(m, toks, ROWS_STARTS, ROWS_COUNTS) == []


def test_dot_kernel_bits_do_not_depend_on_the_cut():
    """"dot" computes every output element by one dot product over the whole input row, so any cut gives the same
    bits (with BLAS, "gemv"'s bits may depend on the cut; its invariance comes from the cut being fixed)."""
    w = micro_weights(ODD, 5)
    toks = np.random.default_rng(7).integers(0, ODD.vocab_size, 80).tolist()
    rows = [ReferenceModel.from_weights(ODD, w, kernel="dot", block_bytes=bb).forward(toks, 0)
            for bb in (4 * ODD.dim, 12 * ODD.dim, None)]
    assert np.array_equal(rows[0], rows[1]) and np.array_equal(rows[0], rows[2])


def test_kernel_choice_and_options():
    cfg = micro_config()
    w = micro_weights(cfg, 0)
    assert ReferenceModel.from_weights(cfg, w).kernel == ("simd" if "simd" in KERNEL_NAMES else "gemv")
    assert numpy_has_blas()                         # CPython's numpy wheels link OpenBLAS (Pyodide: see below)
    with pytest.raises(ValueError, match="kernel must be one of"):
        ReferenceModel.from_weights(cfg, w, kernel="fast")
    for bad in (0, -4, 2.5):
        with pytest.raises(ValueError, match="block_bytes"):
            ReferenceModel.from_weights(cfg, w, kernel="gemv", block_bytes=bad)


def test_kv_contract_and_errors():
    cfg = micro_config(seq_len=40)
    m = micro_model(cfg, 0)
    assert m.length == 0
    out = m.forward([1, 2, 3], 0)
    assert out.shape == (3, cfg.vocab_size) and m.length == 3
    assert m.forward([4], 3, n_out=0).shape == (0, cfg.vocab_size) and m.length == 4
    with pytest.raises(ValueError, match="start_pos"):
        m.forward([5], 2)
    with pytest.raises(ValueError, match="truncate"):
        m.truncate(5)
    with pytest.raises(ValueError, match="token id"):
        m.forward([cfg.vocab_size], 4)
    with pytest.raises(ValueError, match="token id"):
        m.forward([-1], 4)
    with pytest.raises(ValueError, match="n_out"):
        m.forward([1, 2], 4, n_out=3)
    with pytest.raises(ValueError, match="at least one"):
        m.forward([], 4)
    assert m.length == 4                       # failed calls changed nothing
    m.truncate(1)
    a = m.forward([9, 9], 1)
    fresh = micro_model(cfg, 0)
    assert np.array_equal(a, fresh.forward([1, 9, 9], 0)[1:])
    m.forward(list(range(37)), 3)
    assert m.length == 40
    with pytest.raises(ValueError, match="overflow"):
        m.forward([1], 40)
    small = micro_model(cfg, 0, max_len=8)      # max_len caps the cache below seq_len
    small.forward(list(range(8)), 0)
    with pytest.raises(ValueError, match="overflow"):
        small.forward([1], 8)


def test_cache_growth_is_invisible():
    """The cache starts small and grows; rows after a growth equal a model that never grew."""
    cfg = micro_config(seq_len=600)
    toks = np.random.default_rng(2).integers(0, cfg.vocab_size, 300).tolist()
    a = micro_model(cfg, 1)
    ra = np.concatenate([a.forward(toks[:250], 0), a.forward(toks[250:], 250)])   # grows 256 -> 512 mid-way
    b = micro_model(cfg, 1)
    b._grow(600)
    rb = b.forward(toks, 0)
    assert np.array_equal(ra, rb)


def test_bad_weights_rejected():
    cfg = micro_config()
    w = micro_weights(cfg, 0)
    bad = dict(w)
    bad["blk.0.attn_q.weight"] = bad["blk.0.attn_q.weight"][:, :10]
    with pytest.raises(ValueError, match="attn_q"):
        ReferenceModel.from_weights(cfg, bad)
    bad = dict(w)
    del bad["blk.1.ffn_up.weight"]
    with pytest.raises(ValueError, match="missing"):
        ReferenceModel.from_weights(cfg, bad)
    bad = dict(w)
    bad["output_norm.weight"] = np.full(cfg.dim, np.nan, np.float32)
    with pytest.raises(ValueError, match="non-finite"):
        ReferenceModel.from_weights(cfg, bad)


def test_softmax_helpers():
    x = np.array([[1.0, 2.0, -np.inf], [0.0, 0.0, 0.0]], np.float32)
    p = softmax(x)
    assert np.allclose(p.sum(1), 1) and p[0, 2] == 0 and np.allclose(p[1], 1 / 3)
    assert np.allclose(np.exp(log_softmax(x)), p)


@pytest.fixture(scope="module")
def smollm():
    if not CHAMPION.exists():
        pytest.skip("champion GGUF missing: run `python build.py setup`")
    return ReferenceModel.from_file(CHAMPION, max_len=128)


def test_smollm2_batch_invariance_and_greedy(smollm):
    m = smollm
    # "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    toks = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
    ref = one_at_a_time(m, toks)                                                # (16, vocab)
    for chunks in ([16], [5, 11], [1, 4, 3, 8], [7, 7, 2]):
        m.truncate(0)
        pos, rows = 0, []
        for n in chunks:
            rows.append(m.forward(toks[pos: pos + n], pos))
            pos += n
        assert np.array_equal(np.concatenate(rows), ref), chunks
    m.truncate(10)
    assert np.array_equal(m.forward(toks[10:], 10, n_out=2), ref[-2:])
    # greedy answer mentions Paris (a sanity check of the whole pipeline; golden logits are in test_golden.py)
    m.truncate(0)
    logits = m.forward(toks, 0, n_out=1)
    out = []
    for _ in range(8):
        t = int(logits[-1].argmax())
        out.append(t)
        logits = m.forward([t], m.length)
    assert 7042 in out        # " Paris"


@pytest.mark.slow
def test_smollm2_verify_rows_bitwise_both_kernels():
    """SmolLM2-135M: rows 1..9 after a prefix just before the first attention bucket edge (blocks of 5+ rows straddle
    it) equal one-at-a-time rows, for the BLAS kernel and for the one Pyodide uses."""
    if not CHAMPION.exists():
        pytest.skip("champion GGUF missing: run `python build.py setup`")
    from exactspec.formats import load_model_file
    config, weights = load_model_file(CHAMPION)
    toks = np.random.default_rng(8).integers(0, config.vocab_size, ATT_BUCKET + 12).tolist()
    for kernel in KERNEL_NAMES:
        m = ReferenceModel.from_weights(config, weights, max_len=2 * ATT_BUCKET, kernel=kernel)
        assert invariance_failures(m, toks, (ATT_BUCKET - 4,), tuple(range(1, 10)), chunks=(13, 40, 9)) == [], kernel


_PYODIDE_CHECK = r"""
import sys, inspect, json
import numpy as np
from exactspec.micro import micro_config, micro_weights
from exactspec.reference import ReferenceModel, numpy_has_blas
%(checker)s
cfg = micro_config(**%(odd)s)
toks = np.random.default_rng(6).integers(0, cfg.vocab_size, %(n_toks)d).tolist()
res = {"platform": sys.platform, "numpy": np.__version__, "blas": numpy_has_blas(), "micro": {}, "close": {}}
odd_vocab = micro_config(**dict(%(odd)s, vocab_size=251))            # a last unpaired row in the simd head
for c, kernel, rows in ((cfg, "auto", None), (cfg, "simd", None), (odd_vocab, "simd", None), (cfg, "dot", 1),
                        (cfg, "dot", 3), (cfg, "gemv", 3)):
    m = ReferenceModel.from_weights(c, micro_weights(c, 5), kernel=kernel,
                                    block_bytes=None if rows is None else rows * 4 * c.dim)
    key = f"{kernel}/{rows}/{c.vocab_size}"
    res["micro"][key] = [m.kernel, invariance_failures(m, toks, %(starts)s, %(counts)s)]
    m.truncate(0)
    res["close"][key] = m.forward(toks, 0)[list(CLOSE_ROWS)].tolist()
if %(champion)s:
    m = ReferenceModel.from_file(%(champion)s, max_len=256)
    ctoks = np.random.default_rng(8).integers(0, m.config.vocab_size, 72).tolist()
    res["smollm2"] = [m.kernel, invariance_failures(m, ctoks, (60,), tuple(range(1, 10)), chunks=(13, 40, 9))]
    m.truncate(0)
    rows = m.forward(ctoks[:24], 0)                                     # (24, vocab)
    import hashlib
    res["smollm2_rows"] = [rows.argmax(1).tolist(), rows[-1].tolist(), hashlib.sha256(rows.tobytes()).hexdigest()]
open(%(out)s, "w").write(json.dumps(res))                  # (a file: stdout splits long lines)
print("RESULT written")
"""


CLOSE_ROWS = (0, 63, 64, 100, 2 * ATT_BUCKET + 39)     # positions whose logits Pyodide reports for comparison


@pytest.mark.slow
def test_invariance_in_pyodide(tmp_path):
    """The same checks in Pyodide 0.27.7 (numpy 2.0.2 without a BLAS), where the product's CPU fallback runs: "auto"
    is "simd" there; every kernel and cut is batch-invariant on a micro-model (simd also with an odd vocabulary), and
    "simd" on SmolLM2 after a ~64-token prefix; every kernel's logits are CPython's within float32 rounding, and
    SmolLM2's 24 rows of logits are CPython's bit for bit where CPython runs "simd" too (else its next tokens)."""
    import inspect
    import json
    from dataclasses import asdict

    from bench._pyodide import host_path, run_python, unavailable

    if unavailable():
        pytest.skip(unavailable())
    odd = {k: v for k, v in asdict(ODD).items() if k not in ("arch",)}
    src = _PYODIDE_CHECK % {"checker": inspect.getsource(invariance_failures) + f"CLOSE_ROWS = {CLOSE_ROWS}", "odd": repr(odd),
                            "n_toks": 2 * ATT_BUCKET + 40, "starts": ROWS_STARTS, "counts": ROWS_COUNTS,
                            "champion": repr(host_path(CHAMPION)) if CHAMPION.exists() else "None",
                            "out": repr(host_path(tmp_path / "result.json"))}
    proc = run_python(src, timeout=1200)
    assert "RESULT written" in proc.stdout, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["platform"] == "emscripten" and res["numpy"].startswith("2.") and res["blas"] is False
    for name, (kernel, bad) in res["micro"].items():
        assert kernel == ("simd" if name.startswith("auto") else name.split("/")[0])
        assert bad == [], name
    # every kernel's logits agree with CPython's to float32 rounding (the same model, other orders of the same sums)
    toks = np.random.default_rng(6).integers(0, ODD.vocab_size, 2 * ATT_BUCKET + 40).tolist()
    for name, rows in res["close"].items():
        c = micro_config(**dict(odd, vocab_size=int(name.split("/")[-1])))
        here = ReferenceModel.from_weights(c, micro_weights(c, 5))
        ref = here.forward(toks, 0)[list(CLOSE_ROWS)]
        rows = np.array(rows, np.float32)
        assert np.abs(rows - ref).max() < 1e-4 * max(1.0, np.abs(ref).max()), name
        if here.kernel == "simd" and name.split("/")[0] in ("auto", "simd"):
            assert np.array_equal(rows, ref), name                          # "simd" in both: the same bits
    if CHAMPION.exists():
        assert res["smollm2"] == ["simd", []]
        # the CPU fallback against CPython: with "simd" in both, the same logits bit for bit (the kernel's products
        # and _exp32); with another kernel here, the same next tokens and logits within float32 rounding
        import hashlib
        from exactspec.formats import load_model_file
        config, weights = load_model_file(CHAMPION)
        ctoks = np.random.default_rng(8).integers(0, config.vocab_size, 72).tolist()
        here = ReferenceModel.from_weights(config, weights, max_len=256)
        ours = here.forward(ctoks[:24], 0)                                      # (24, vocab)
        argmax, last, digest = res["smollm2_rows"]
        assert argmax == ours.argmax(1).tolist()
        if here.kernel == "simd":
            assert np.array_equal(np.array(last, np.float32), ours[-1])
            assert digest == hashlib.sha256(ours.tobytes()).hexdigest()
        else:
            assert np.abs(np.array(last, np.float32) - ours[-1]).max() < 1e-3 * max(1.0, np.abs(ours[-1]).max())
