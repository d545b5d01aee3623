"""The CPU kernel on several threads (app/cpu_pool.js, driven from Python through exactspec.simd.Pool): in Pyodide
under Node with real worker threads, the pool's products are the single-threaded kernel's bits for every split of
the rows, its memory stores, reads back, frees and reuses, and models on it compute what they compute without it
(the page's answers equal the CLI's with it: tests/browser/test_page.py). The row split is one rule in Python and
in JS."""
from __future__ import annotations

import inspect
import json
import shutil
import subprocess

import numpy as np
import pytest

from exactspec import simd
from exactspec.micro import micro_config, micro_weights
from exactspec.reference import ReferenceModel

from conftest import ROOT
from test_simd import emulate


def part(rows: int, t: int, chunks: int) -> tuple[int, int]:
    """The output rows [a, b) of chunk t of `chunks` (app/cpu_pool.js's part(), spelled here for the tests): whole
    tiles, near-equal shares in order, the last chunk also the rows % TILE rows stored untiled, so every chunk starts
    on a tile (its packed floats are the slice [a * d, b * d), a matrix of b - a rows to the kernel)."""
    tiles = rows // simd.TILE
    a = simd.TILE * (tiles * t // chunks)
    b = rows if t == chunks - 1 else simd.TILE * (tiles * (t + 1) // chunks)
    return a, b


def test_row_split_is_one_rule_in_python_and_js():
    """The split gives each chunk whole tiles, in order, covering every row once (the last chunk the untiled rest),
    and app/cpu_pool.js's part() gives the same rows; its default thread count's cap is the CLI's."""
    cases = [(rows, t) for rows in list(range(1, 41)) + [576, 577, 960, 3072, 49152] for t in range(1, 6)]
    for rows, threads in cases:
        parts = [part(rows, i, threads) for i in range(threads)]
        assert parts[0][0] == 0 and parts[-1][1] == rows
        assert all(parts[i][1] == parts[i + 1][0] for i in range(threads - 1))
        assert all(a % simd.TILE == 0 and a <= b for a, b in parts)
        assert all(b % simd.TILE == 0 for a, b in parts[:-1])
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    js = ("import { part, TILE, THREADS_DEFAULT_MAX } from %s; const cases = %s; "
          "console.log(JSON.stringify({tile: TILE, threads_max: THREADS_DEFAULT_MAX, "
          "parts: cases.map(([r, n]) => [...Array(n).keys()].map((t) => part(r, t, n)))}));"
          % (json.dumps((ROOT / "app" / "cpu_pool.js").as_uri()), json.dumps(cases)))
    out = subprocess.run(["node", "--input-type=module", "-e", js], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["tile"] == simd.TILE
    assert got["threads_max"] == simd.THREADS_DEFAULT_MAX       # the page's default threads and the CLI's: one rule
    assert got["parts"] == [[list(part(r, t, n)) for t in range(n)] for r, n in cases]


_POOL_CHECK = r"""
import json
import numpy as np
from exactspec import simd
from exactspec.micro import micro_config, micro_weights
from exactspec.reference import ReferenceModel
import exactspec_host
%(emulate)s
host = exactspec_host.pool
pool = simd.Pool(host)
res = {"threads": pool.threads, "bad": [], "cases": 0}
rng = np.random.default_rng(5)
handles = []
for rows, d in %(shapes)s:
    w = rng.standard_normal((rows, d)).astype(np.float32)
    p = simd.pack(w)
    h = pool.store(p)
    handles.append(h)
    back = pool.read(h, 0, np.empty(p.size, np.float32))
    if not np.array_equal(back, p):
        res["bad"].append(["read", rows, d])
    xs = rng.standard_normal((19, d)).astype(np.float32)
    want = emulate(w, xs)
    for n in list(range(1, 10)) + [17, 19]:            # 17 and 19: more rows than one call of the pool takes (8)
        x = np.ascontiguousarray(xs[:n])
        out = np.full((n, rows), np.nan, np.float32)
        pool(h, rows, d, x, out)
        res["cases"] += 1
        if not np.array_equal(out, want[:n]):
            res["bad"].append([rows, d, n])
# freed memory is reused: storing the same sizes again does not grow the shared memory
size = host.bytes
for h in handles:
    pool.release(h)
again = [pool.store(np.zeros(rows * d, np.float32)) for rows, d in %(shapes)s]
res["reused"] = [host.bytes == size, max(again) <= max(handles)]
for h in again:
    pool.release(h)
# a model on the pool computes the same logits, features and embeddings as one without it, and reports its threads;
# a model whose matrices do not all fit keeps the rest in Pyodide's memory, with the same results
cfg = micro_config()
wts = micro_weights(cfg, 3)
plain = ReferenceModel.from_weights(cfg, wts, keep_features=True)
on_pool = ReferenceModel.from_weights(cfg, wts, keep_features=True, pool=pool)
real_store, calls = simd.Pool.store, []
def store_some(self, packed):
    calls.append(1)
    return real_store(self, packed) if len(calls) %% 2 else -1
simd.Pool.store = store_some
try:
    half = ReferenceModel.from_weights(cfg, wts, keep_features=True, pool=pool)
finally:
    simd.Pool.store = real_store
packed_here = [m.handle is None for L in half.layers for m in L.values() if hasattr(m, "handle")]
res["half"] = [any(packed_here), not all(packed_here)]
toks = rng.integers(0, cfg.vocab_size, 23).tolist()
same = True
for m in (plain, on_pool, half):
    m.logits = [m.forward(toks[:11], 0, n_out=3), m.forward(toks[11:12], 11), m.forward(toks[12:17], 12)]
    m.truncate(14)
    m.logits.append(m.forward(toks[14:23], 14))
for m in (on_pool, half):
    same &= all(np.array_equal(a, b) for a, b in zip(plain.logits, m.logits))
    same &= np.array_equal(plain.feature_rows(0, 23), m.feature_rows(0, 23))
    same &= np.array_equal(plain.embed_rows([0, 1, cfg.vocab_size - 1, 7]), m.embed_rows([0, 1, cfg.vocab_size - 1, 7]))
    same &= np.array_equal(plain.head_blocks.matrix(), m.head_blocks.matrix())
    same &= plain.memory()["weights"] == m.memory()["weights"]
res["models_same"] = bool(same)
held = sum(m.nbytes for model in (on_pool, half) for m in [model.head_blocks] + [v for L in model.layers
           for v in L.values() if hasattr(v, "handle")] if m.handle is not None)
before = host.bytesStored
del on_pool, half, m
import gc; gc.collect()
res["freed"] = [before - host.bytesStored, held]
# a helper that is gone: the others (and this thread) take its chunks; a pool that lost its helpers for good goes on
# alone: the same bits either way
w = rng.standard_normal((251, 160)).astype(np.float32)
h = pool.store(simd.pack(w))
x = rng.standard_normal((5, 160)).astype(np.float32)
want = emulate(w, x)
host.helpers[0].stop()
out = np.full((5, 251), np.nan, np.float32)
pool(h, 251, 160, x, out)
res["helper_gone"] = [bool(np.array_equal(out, want)), str(host.alone)]
host._lose("told to, by the test")
out = np.full((5, 251), np.nan, np.float32)
pool(h, 251, 160, x, out)
res["alone"] = [bool(np.array_equal(out, want)), str(host.alone)]
print("RESULT " + json.dumps(res))
"""


@pytest.mark.slow
def test_pool_in_pyodide_is_the_kernel_bit_for_bit():
    """With 3 threads (helpers as Node worker threads over one shared memory): for widths 4..576 and row counts odd
    and even (a last unpaired row; splits where a thread gets no rows), 1..9, 17 and 19 input rows, every output
    equals the kernel's emulation bit for bit; stored weights read back equal; released memory is reused; micro models
    on the pool (all or half their matrices in it) give the same logits, features, embeddings and memory figures."""
    from bench._pyodide import run_python, unavailable

    if unavailable():
        pytest.skip(unavailable())
    shapes = [(1, 4), (2, 4), (3, 8), (5, 12), (7, 96), (64, 64), (251, 160), (576, 576), (97, 1536)]
    proc = run_python(_POOL_CHECK % {"emulate": inspect.getsource(emulate), "shapes": repr(shapes)}, timeout=600,
                      threads=3)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    res = json.loads(line[len("RESULT "):])
    assert res["threads"] == 3
    assert res["cases"] == len(shapes) * 11 and res["bad"] == []
    assert res["reused"] == [True, True]
    assert res["half"] == [True, True]
    assert res["models_same"]
    assert res["freed"][0] == res["freed"][1] > 0           # unloaded models give their matrices back
    assert res["helper_gone"] == [True, ""]
    assert res["alone"] == [True, "told to, by the test"]


def test_a_model_on_a_pool_in_cpython():
    """The Python side on its own (CPython): a stand-in host that keeps the stored floats in a numpy arena and splits
    each product by `part`, as app/cpu_pool.js does, through the native kernel where it loads (else the
    emulation). The model's logits equal those without a pool bit for bit, and unloading frees its memory."""
    import ctypes
    import gc

    kernel = simd.load()

    class Host:
        threads = 3

        def __init__(self):
            self.arena = np.zeros(1 << 21, np.float32)
            self.top, self.live = 0, {}

        def store(self, addr, nbytes):
            n = nbytes // 4
            if self.top + n > self.arena.size:
                return -1
            h = 4 * self.top
            ctypes.memmove(simd.address(self.arena) + h, addr, nbytes)
            self.top += -(-n // 16) * 16
            self.live[h] = n
            return h

        def read(self, at, nbytes, addr):
            ctypes.memmove(addr, simd.address(self.arena) + at, nbytes)

        def release(self, h):
            del self.live[h]

        def matvec(self, h, rows, d, xa, n, oa):
            x = np.ctypeslib.as_array((ctypes.c_float * (n * d)).from_address(xa)).reshape(n, d)
            out = np.ctypeslib.as_array((ctypes.c_float * (n * rows)).from_address(oa)).reshape(n, rows)
            for t in range(self.threads):
                a, b = part(rows, t, self.threads)
                if b <= a:
                    continue
                w = self.arena[h // 4 + a * d: h // 4 + b * d]
                o = np.empty((n, b - a), np.float32)
                if kernel is not None:
                    kernel(w, b - a, d, np.ascontiguousarray(x), o)
                else:
                    o[...] = emulate(simd.unpack(w, b - a, d), x)
                out[:, a:b] = o

    host = Host()
    pool = simd.Pool(host)
    cfg = micro_config()
    wts = micro_weights(cfg, 4)
    kind = "simd" if kernel is not None else "auto"
    if kernel is None:
        pytest.skip("no native kernel here (no C compiler, x86-64 or AVX): a pool needs the 'simd' kernel")
    plain = ReferenceModel.from_weights(cfg, wts, kernel=kind)
    on_pool = ReferenceModel.from_weights(cfg, wts, kernel=kind, pool=pool)
    assert on_pool.pool is pool and host.live
    toks = np.random.default_rng(1).integers(0, cfg.vocab_size, 12).tolist()
    got = [[m.forward(toks[:7], 0), m.forward(toks[7:12], 7)] for m in (plain, on_pool)]
    assert all(np.array_equal(a, b) for a, b in zip(*got))
    assert np.array_equal(plain.embed_rows(toks), on_pool.embed_rows(toks))
    del on_pool
    gc.collect()
    assert host.live == {}
