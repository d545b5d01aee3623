"""The CPU fallback's WebAssembly SIMD matrix kernel (py/exactspec/matvec.wat, exactspec.simd): generated files
current, the packed layout, and in Pyodide (where it runs) its results bit for bit those of a numpy emulation of
its one order of operations, whatever the number of rows."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from exactspec import simd
from exactspec.reference import ReferenceModel, _Packed
from exactspec.micro import micro_config, micro_weights

from conftest import ROOT


def emulate(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The kernel's arithmetic in numpy, bit for bit (float32 multiplies and adds are IEEE-rounded in both): for each
    output (r, i) a 4-lane accumulator a = a + x[r, j:j+4] * w[i, j:j+4] over column groups j in ascending order,
    then (a0 + a1) + (a2 + a3). w (rows, d), x (n, d) float32 -> (n, rows)."""
    n, d = x.shape
    acc = np.zeros((n, w.shape[0], 4), np.float32)                                  # (n, rows, 4)
    for j in range(0, d, 4):
        acc = acc + x[:, None, j: j + 4] * w[None, :, j: j + 4]
    return (acc[..., 0] + acc[..., 1]) + (acc[..., 2] + acc[..., 3])


def emulate_exp32(x: np.ndarray) -> np.ndarray:
    """The kernel's exp32 in numpy, bit for bit (float64 operations are IEEE-rounded in both): x float32 -> float32."""
    x = np.asarray(x, np.float32)
    nan = np.isnan(x)
    v = np.clip(np.where(nan, 0.0, x.astype(np.float64)), -simd.EXP_CLAMP, simd.EXP_CLAMP)
    k = np.floor(v * simd.INV_LN2 + 0.5)
    r = (v - k * simd.LN2_HI) - k * simd.LN2_LO
    p = np.full_like(r, simd.EXP_POLY[0])
    for c in simd.EXP_POLY[1:]:
        p = p * r + c
    with np.errstate(over="ignore"):
        out = (p * np.ldexp(1.0, k.astype(np.int64))).astype(np.float32)
    return np.where(nan, x, out)


def exp_inputs(rng) -> np.ndarray:
    """10^6 float32 inputs over exp's float32 range and past it, with its edges: zeros, infinities, NaN, overflow and
    underflow thresholds, subnormal results."""
    edges = [0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.7229, 88.73, -87.33, -103.27, -103.97, -104.0, -150, 200,
             -200, 1e30, -1e30, 1e-30, -1e-45]
    xs = [rng.standard_normal(250_000) * s for s in (1, 4, 20)] + [rng.uniform(-110, 90, 250_000 - len(edges)), edges]
    return np.concatenate(xs).astype(np.float32)


def _emulate_exp_source() -> str:
    import inspect
    return "from exactspec import simd\n" + inspect.getsource(emulate_exp32) + inspect.getsource(exp_inputs)


def test_generated_files_are_current():
    """matvec.wat and matvec.wasm are what py/exactspec_build/matvec_wasm.py generates (wabt from package-lock)."""
    if shutil.which("node") is None or not (ROOT / "node_modules" / "wabt").exists():
        pytest.skip("node or node_modules/wabt missing (python build.py setup)")
    from exactspec_build import matvec_wasm
    assert matvec_wasm.WAT.read_text() == matvec_wasm.wat()
    assert matvec_wasm.WASM.read_bytes() == matvec_wasm.assemble(matvec_wasm.wat())
    assert matvec_wasm.WASM.read_bytes()[8:19] == b"\x00\x0f\x08dylink.0"     # a side module: dylink.0 first
    # app/cpu_pool.js's module: the same text over a shared memory, a plain module
    shared = matvec_wasm.wat(shared=True)
    assert shared.replace(matvec_wasm.SHARED_MEMORY, matvec_wasm.MEMORY) == matvec_wasm.wat()
    assert matvec_wasm.SHARED_WASM.read_bytes() == matvec_wasm.assemble(shared, side_module=False)


@pytest.mark.parametrize("rows,d", [(1, 4), (2, 4), (3, 8), (7, 12), (250, 96), (251, 160)])
def test_pack_layout_roundtrip_and_rows(rows, d):
    w = np.random.default_rng(rows).standard_normal((rows, d)).astype(np.float32)
    p = simd.pack(w)
    assert p.shape == (rows * d,) and p.dtype == np.float32
    assert np.array_equal(simd.unpack(p, rows, d), w)
    full = rows - rows % simd.TILE
    if full:                                   # tile 0, column group 1: row 0's values 4..7, then row 1's
        assert np.array_equal(p[8: 16], np.concatenate([w[0, 4:8], w[1, 4:8]])) if d >= 8 else True
    ids = np.array([rows - 1, 0, rows // 2, rows - 1])
    m = _Packed(w)
    assert np.array_equal(m.take(ids), w[ids])


def test_pack_refuses_widths_the_kernel_cannot_take():
    with pytest.raises(ValueError, match="multiple of 4"):
        simd.pack(np.zeros((3, 6), np.float32))
    odd = micro_config(dim=30, n_heads=3, n_kv_heads=1, head_dim=10, rope_dim=10, hidden_dim=50)
    with pytest.raises(ValueError, match="multiple of 4"):
        ReferenceModel.from_weights(odd, micro_weights(odd, 0), kernel="simd")
    assert ReferenceModel.from_weights(odd, micro_weights(odd, 0)).kernel == "gemv"      # "auto": CPython's BLAS
    if simd.load() is not None:
        with pytest.raises(ValueError, match="block_bytes is not used"):
            ReferenceModel.from_weights(micro_config(), micro_weights(micro_config(), 0), kernel="simd", block_bytes=64)


EMULATE_EXP = _emulate_exp_source()     # emulate_exp32 and exp_inputs, run where the kernel runs


def test_native_kernel_is_the_emulation_bit_for_bit(tmp_path):
    """In CPython on x86-64 (matvec.c, compiled on first use) the kernel runs the same checks as in Pyodide below:
    every output equal to `emulate` bit for bit, so the same bits as Pyodide's WebAssembly kernel. Where it cannot be
    built here (no C compiler, no AVX), "auto" is "gemv" and this says why."""
    import inspect
    import platform
    m = simd.load()
    if m is None:
        pytest.skip(f"no native kernel here ({platform.machine()}, or no C compiler / AVX): CPython uses gemv")
    src = _KERNEL_CHECK % {"emulate": inspect.getsource(emulate), "shapes": repr(SHAPES),
                           "garbage": str(tmp_path / "garbage.so"), "emulate_exp": EMULATE_EXP}
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(src, "kernel_check", "exec"), {"__name__": "kernel_check"})
    res = json.loads(buf.getvalue().split("RESULT ", 1)[1])
    assert res["loaded"] and res["cases"] == len(SHAPES) * 20 + 4
    assert res["bad"] == []
    assert res["maxrel"] < 1e-5
    assert "matvec wants float32 C-contiguous" in res["refused"]
    assert_exp(res)
    assert (res["auto"], res["auto_odd"], res["auto_unloadable"]) == ("simd", "gemv", ["gemv", "gemv"])
    assert len(res["simd_unloadable"]) == 2


SHAPES = [(1, 4), (2, 8), (3, 12), (5, 4), (64, 96), (251, 160), (160, 576), (9, 1536)]


def assert_exp(res: dict) -> None:
    """The kernel's exp32 is the emulation bit for bit on 10^6 inputs (in place too), and numpy's float64 exp
    rounded once on all but a handful (none seen on 3 x 10^6); the gate is numpy's formula over it, bit for bit; the
    RMS norm is its float32 steps over the products' 4-lane sum of squares, bit for bit; RoPE is numpy's, in place on
    strided rows, touching nothing past them; the attention is the products' emulation around a softmax over each
    row's keys (its sum in 4 lanes), a row alone the same bits as among others."""
    assert res["exp_n"] == 1_000_000 and res["exp_bad"] == 0 and res["exp_in_place"]
    assert res["exp_vs_numpy"] <= 10
    assert res["silu_bad"] == 0
    assert res["norm_bad"] == 0
    assert res["rope_bad"] == 0
    assert res["attend_bad"] == 0

_KERNEL_CHECK = r"""
import json
import numpy as np
from exactspec import simd
%(emulate)s
m = simd.load()
res = {"loaded": m is not None, "bad": [], "cases": 0, "maxrel": 0.0}
rng = np.random.default_rng(3)
for rows, d in %(shapes)s:
    w = rng.standard_normal((rows, d)).astype(np.float32)
    p = simd.pack(w)
    xs = rng.standard_normal((17, d)).astype(np.float32)
    want = emulate(w, xs)
    for n in list(range(1, 10)) + [17]:
        for r0 in (0, 17 - n):
            x = np.ascontiguousarray(xs[r0: r0 + n])
            out = np.full((n, rows), np.nan, np.float32)
            m(p, rows, d, x, out)
            res["cases"] += 1
            if not np.array_equal(out, want[r0: r0 + n]):
                res["bad"].append([rows, d, n, r0])
            exact = x.astype(np.float64) @ w.T.astype(np.float64)
            res["maxrel"] = max(res["maxrel"], float(np.abs(out - exact).max() / max(1.0, np.abs(exact).max())))
# several problems at once over stored rows of ld >= d floats (a packed KV cache: rows and columns past the ones
# asked for are not read): each problem's outputs equal the emulation of its used block
for H, rows_h, ld, rows, d, n in ((3, 128, 64, 64, 64, 5), (3, 32, 128, 32, 64, 3), (2, 6, 12, 4, 8, 2), (2, 5, 12, 5, 8, 3)):
    ws = rng.standard_normal((H, rows_h, ld)).astype(np.float32)
    packed = np.stack([simd.pack(w) for w in ws])                               # (H, rows_h * ld)
    x = rng.standard_normal((H, n, d)).astype(np.float32)
    out = np.full((H, n, rows), np.nan, np.float32)
    m.heads(packed, rows, d, ld, x, out)
    res["cases"] += 1
    if not all(np.array_equal(out[h], emulate(np.ascontiguousarray(ws[h, :rows, :d]), x[h])) for h in range(H)):
        res["bad"].append(["heads", H, rows_h, ld, rows, d, n])
try:
    m(p, rows, d, xs[:, :4], np.zeros((17, rows), np.float32))
except ValueError as e:
    res["refused"] = str(e)
# exp32 and the feed-forward's gate: the emulation's bits; numpy's float64 exp rounded once nearly always
%(emulate_exp)s
x = exp_inputs(np.random.default_rng(4))
got = m.exp32(x)
want = emulate_exp32(x)
res["exp_bad"] = int((got.view(np.uint32) != want.view(np.uint32)).sum())
with np.errstate(all="ignore"):
    ref = np.exp(x, dtype=np.float64).astype(np.float32)
res["exp_vs_numpy"] = int((~((got == ref) | (np.isnan(got) & np.isnan(ref)))).sum())
res["exp_n"] = int(x.size)
y = x.copy()
m.exp32(y, y)                                                                   # in place
res["exp_in_place"] = bool(np.array_equal(y.view(np.uint32), got.view(np.uint32)))
gu = (np.random.default_rng(6).standard_normal((7, 2 * 1538)) * 6).astype(np.float32)   # (7, 2 hidden): hidden not a multiple of 4
g, u = gu[:, :1538], gu[:, 1538:]
with np.errstate(over="ignore"):
    want = (g / (np.float32(1.0) + emulate_exp32(-g))) * u
res["silu_bad"] = int((m.silu_mul(gu, 1538).view(np.uint32) != want.view(np.uint32)).sum())
# RMS norm: the sum of squares in the products' 4-lane order, then float32 steps
res["norm_bad"] = 0
for n, dim in ((1, 576), (5, 576), (3, 4), (2, 1536)):
    xr = (rng.standard_normal((n, dim)) * 3).astype(np.float32)
    w = rng.standard_normal(dim).astype(np.float32)
    a = np.zeros((n, 4), np.float32)
    for j in range(0, dim, 4):
        a = a + xr[:, j: j + 4] * xr[:, j: j + 4]
    ms = ((a[:, 0] + a[:, 1]) + (a[:, 2] + a[:, 3]))[:, None] / np.float32(dim)
    want = (xr * (np.float32(1.0) / np.sqrt(ms + np.float32(1e-5)))) * w
    res["norm_bad"] += int((m.rmsnorm(xr, w, 1e-5).view(np.uint32) != want.view(np.uint32)).sum())
# RoPE in place on a strided view (the q and k heads of the products' output rows), half of a head or all of it
res["rope_bad"] = 0
for n, heads, hd, half in ((1, 12, 64, 32), (5, 12, 64, 32), (3, 2, 16, 4), (2, 3, 24, 8)):
    buf = (rng.standard_normal((n, heads * hd + 40)) * 2).astype(np.float32)
    x = buf[:, : heads * hd].reshape(n, heads, hd)                                 # (n, heads, hd), rows strided
    c, sn = rng.standard_normal((2, n, half)).astype(np.float32)
    c, sn = np.ascontiguousarray(c), np.ascontiguousarray(sn)
    want = x.copy()
    a, b = want[:, :, :half].copy(), want[:, :, half: 2 * half].copy()
    want[:, :, :half] = a * c[:, None] - b * sn[:, None]
    want[:, :, half: 2 * half] = b * c[:, None] + a * sn[:, None]
    tail = buf[:, heads * hd:].copy()
    m.rope(x, c, sn)
    res["rope_bad"] += int((x.view(np.uint32) != want.view(np.uint32)).sum()) + int((buf[:, heads * hd:] != tail).sum())
# attention over a packed cache: the products' emulation for scores and outputs, a softmax per row over its keys
# [lo, hi) with the sum in 4 lanes in key order; rows with other ranges and other counts never change a row
res["attend_bad"] = 0
for nkv, mq, hd, cap, width in ((3, 6, 64, 256, 128), (2, 1, 16, 64, 64), (1, 5, 8, 128, 64)):
    K = rng.standard_normal((nkv, cap, hd)).astype(np.float32)
    V = rng.standard_normal((nkv, cap, hd)).astype(np.float32)
    k5 = np.stack([simd.pack(K[h]) for h in range(nkv)])                          # (nkv, cap * hd)
    v5 = np.stack([simd.pack(np.ascontiguousarray(V[h].T)) for h in range(nkv)])   # (nkv, hd * cap)
    q = rng.standard_normal((nkv, mq, hd)).astype(np.float32)
    hi = rng.integers(1, width + 1, mq)
    lohi = np.stack([np.minimum(rng.integers(0, width, mq), hi - 1), hi], axis=1).astype(np.int32)
    out = np.full((nkv, mq, hd), np.nan, np.float32)
    m.attend(q, k5, v5, width, lohi, np.empty((nkv, mq, width), np.float32), out)
    for h in range(nkv):
        sc = emulate(np.ascontiguousarray(K[h, :width]), q[h])                    # (m, width)
        for r in range(mq):
            lo, hi_ = int(lohi[r, 0]), int(lohi[r, 1])
            mx = sc[r, lo]
            for t in range(lo + 1, hi_):
                mx = sc[r, t] if sc[r, t] > mx else mx
            e = np.zeros(width, np.float32)
            e[lo:hi_] = emulate_exp32(sc[r, lo:hi_] - mx)
            a = np.zeros(4, np.float32)
            for t in range(0, width, 4):
                a = a + e[t: t + 4]
            pr = e / ((a[0] + a[1]) + (a[2] + a[3]))
            want = emulate(np.ascontiguousarray(V[h, :width].T), pr[None])[0]
            res["attend_bad"] += int((out[h, r].view(np.uint32) != want.view(np.uint32)).sum())
        # one row alone (its own range, m = 1) gives the same bits
        one = np.empty((1, 1, hd), np.float32)
        m.attend(np.ascontiguousarray(q[h:h + 1, :1]), np.ascontiguousarray(k5[h:h + 1]),
                 np.ascontiguousarray(v5[h:h + 1]), width, lohi[:1].copy(),
                 np.empty((1, 1, width), np.float32), one)
        res["attend_bad"] += int((one[0, 0].view(np.uint32) != out[h, 0].view(np.uint32)).sum())
# the model's choice: "auto" is "simd" where every width fits, else "dot"; a kernel that cannot load falls back too
from exactspec.micro import micro_config, micro_weights
from exactspec.reference import ReferenceModel
cfg = micro_config()
res["auto"] = ReferenceModel.from_weights(cfg, micro_weights(cfg, 0)).kernel
odd = micro_config(dim=30, n_heads=3, n_kv_heads=1, head_dim=10, rope_dim=10, hidden_dim=50)
res["auto_odd"] = ReferenceModel.from_weights(odd, micro_weights(odd, 0)).kernel
real_load = simd.load
try:
    for bad in ("/nonexistent/matvec.wasm", %(garbage)r):       # no file; a file that is not a module
        open(%(garbage)r, "wb").write(b"\0asm not a module")
        simd.load = lambda path=None: real_load(bad)
        res.setdefault("auto_unloadable", []).append(ReferenceModel.from_weights(cfg, micro_weights(cfg, 0)).kernel)
        try:
            ReferenceModel.from_weights(cfg, micro_weights(cfg, 0), kernel="simd")
        except ValueError as e:
            res.setdefault("simd_unloadable", []).append(str(e))
finally:
    simd.load = real_load
# the tied head is kept once, packed: the weights' bytes are the parameters' (float32), the embedding not twice
mm = ReferenceModel.from_weights(cfg, micro_weights(cfg, 0))
n_params = sum(int(np.prod(a.shape)) for a in micro_weights(cfg, 0).values())
res["weights_bytes"] = [mm.memory()["weights"], 4 * n_params]
print("RESULT " + json.dumps(res))
"""


@pytest.mark.slow
def test_kernel_in_pyodide_is_the_emulation_bit_for_bit():
    """In Pyodide the kernel loads, and for widths 4..576, row counts odd and even (a last unpaired row), 1..9 and 17
    input rows at two offsets, every output equals `emulate` bit for bit: so a row's bits never depend on how many
    rows are multiplied with it (the chunks of 1..4 rows and both tile kinds all run), and are close to float64; the
    same for several problems at once over stored rows longer than the columns used (the attention's packed cache).
    The model takes it where it can ("auto"), falls back to "dot" where a width does not fit or the module does not
    load, and keeps a tied head once."""
    import inspect

    from bench._pyodide import run_python, unavailable

    if unavailable():
        pytest.skip(unavailable())
    shapes = SHAPES
    proc = run_python(_KERNEL_CHECK % {"emulate": inspect.getsource(emulate), "shapes": repr(shapes),
                                       "garbage": "/tmp/garbage.wasm", "emulate_exp": EMULATE_EXP}, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    res = json.loads(line[len("RESULT "):])
    assert res["loaded"] and res["cases"] == len(shapes) * 20 + 4
    assert res["bad"] == []
    assert res["maxrel"] < 1e-5
    assert "matvec wants float32 C-contiguous" in res["refused"]
    assert_exp(res)
    assert (res["auto"], res["auto_odd"], res["auto_unloadable"]) == ("simd", "dot", ["dot", "dot"])
    assert len(res["simd_unloadable"]) == 2 and all("could not be loaded here" in e for e in res["simd_unloadable"])
    assert res["weights_bytes"][0] == res["weights_bytes"][1]


def test_native_kernel_on_threads_gives_the_same_bits():
    """CPython's kernel on several threads (matvec.c's helpers; the CLI's --threads): each product's output rows are
    cut into chunks of whole tiles that the threads take in turn, every output computed by one thread in the kernel's
    one order, so every output equals one thread's bit for bit: products large enough to be shared (odd row counts,
    a last unpaired row, 1..9 input rows), small ones run alone, and a whole model's forward (prefill, a verify block,
    one token) with 1, 2 and 3 threads, and two Python threads multiplying at once. The threads are asked for, not
    assumed: a bad count is refused."""
    import platform
    m = simd.load()
    if m is None:
        pytest.skip(f"no native kernel here ({platform.machine()}, or no C compiler / AVX): CPython uses gemv")
    rng = np.random.default_rng(5)
    for rows, d in ((3072, 576), (251, 1536), (577, 64), (6, 8)):    # (6, 8): under the sharing threshold
        w = rng.standard_normal((rows, d)).astype(np.float32)
        p = simd.pack(w)
        for n in range(1, 10):
            x = rng.standard_normal((n, d)).astype(np.float32)
            one = np.full((n, rows), np.nan, np.float32)
            m(p, rows, d, x, one)
            assert np.array_equal(one, emulate(w, x))
            for t in (2, 3):
                out = np.full((n, rows), np.nan, np.float32)
                took = m.with_threads(t)(p, rows, d, x, out)
                assert took == (1 if rows * d * n < 65536 else t)      # (matvec.c's MIN_SHARED)
                assert np.array_equal(out.view(np.uint32), one.view(np.uint32)), (rows, d, n, t)
    cfg = micro_config(dim=256, hidden_dim=1024, n_heads=4, n_kv_heads=2, vocab_size=2048)
    weights = micro_weights(cfg, 3)
    models = {t: ReferenceModel.from_weights(cfg, weights, kernel="simd", threads=t) for t in (1, 2, 3)}
    assert {t: mm.threads for t, mm in models.items()} == {1: 1, 2: 2, 3: 3}
    toks = rng.integers(0, cfg.vocab_size, 40).tolist()
    outs = {t: [mm.forward(toks[:30], 0), mm.forward(toks[30:35], 30), mm.forward(toks[35:36], 35)]
            for t, mm in models.items()}
    for t in (2, 3):
        for a, b in zip(outs[1], outs[t]):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    # two Python threads multiplying at once (ctypes lets go of the GIL): one shares the helpers, the other computes
    # alone, both the same bits
    import threading
    w = rng.standard_normal((3072, 576)).astype(np.float32)
    p, x = simd.pack(w), rng.standard_normal((5, 576)).astype(np.float32)
    one = np.empty((5, 3072), np.float32)
    m(p, 3072, 576, x, one)
    outs = [np.full((40, 5, 3072), np.nan, np.float32) for _ in range(2)]

    def work(o):
        for i in range(o.shape[0]):
            m.with_threads(2)(p, 3072, 576, x, o[i])
    ts = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(np.array_equal(o[i].view(np.uint32), one.view(np.uint32)) for o in outs for i in range(o.shape[0]))
    for bad in (0, -1, simd.THREADS_MAX + 1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be an integer"):
            m.with_threads(bad)
