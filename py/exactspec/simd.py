"""The CPU's matrix kernel "simd": WebAssembly SIMD in Pyodide (matvec.wasm, generated from
py/exactspec_build/matvec_wasm.py; its text with the work split and the batch-invariance argument: matvec.wat), and
the same arithmetic in C for CPython on x86-64 (matvec.c, compiled on first use): the same products, bit for bit,
in both (tests/test_simd.py).

Pyodide's numpy has neither a BLAS nor SIMD: there one row of a matrix product is compute-bound and k + 1 rows
cost ~k + 1 passes. This kernel multiplies 4 floats per instruction, streams each weight matrix once per forward
in memory order (weights packed in tiles of TILE output rows, `pack`) and multiplies every weight it loads into up
to ROWS_MAX input rows. In Pyodide it is loaded as an Emscripten side module into Pyodide's own memory, so numpy
arrays are passed by address, without copies; in CPython as a shared library. Plain numpy (no js / pyodide
imports): the loader uses ctypes, which Pyodide provides too.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

TILE = 2        # output rows per packed tile (the kernel's weight vectors per column group)
ROWS_MAX = 4    # input rows multiplied per load of a tile's weights (TILE * ROWS_MAX accumulators in registers)
THREADS_MAX = 16    # the most threads matvec.c's products may use (its THREADS_MAX)
# exp32 (the kernel's float32 exp, matvec.wat and matvec.c; numpy's float64 exp costs ~37 ns an element in Pyodide):
# x clamped to +-EXP_CLAMP (exp rounds to 0 or inf in float32 well inside it; NaN kept), k = floor(x * INV_LN2 + 0.5),
# r = (x - k * LN2_HI) - k * LN2_LO (fdlibm's split of ln 2: k * LN2_HI is exact), p = EXP_POLY in Horner form
# (Taylor to r^11: |r| <= 0.35, truncation < 1e-14 relative), exp = p * 2^k, all in float64, then rounded once to
# float32. IEEE float64 operations only, never fused: the same bits in C and WebAssembly, and within one float32
# rounding of the exact exp (equal to numpy's float64 exp rounded in all but ~1 in 10^6 inputs, tests/test_simd.py).
EXP_CLAMP = 200.0
INV_LN2 = 1.4426950408889634
LN2_HI = 0.6931471803691238
LN2_LO = 1.9082149292705877e-10
EXP_POLY = (2.505210838544172e-08, 2.755731922398589e-07, 2.7557319223985893e-06, 2.48015873015873e-05,
            0.0001984126984126984, 0.001388888888888889, 0.008333333333333333, 0.041666666666666664,
            0.16666666666666666, 0.5, 1.0, 1.0)      # 1/11! .. 1/0!
THREADS_DEFAULT_MAX = 4     # threads by default: the machine's cores, at most this many (the weights' stream saturates
                            # memory bandwidth at a few); app/cpu_pool.js's THREADS_DEFAULT_MAX is the page's, the same


def default_threads() -> int:
    """The kernel's threads when none are asked for (the CLI): this machine's cores, at most THREADS_DEFAULT_MAX."""
    import os
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(n, THREADS_DEFAULT_MAX))
WASM = Path(__file__).with_name("matvec.wasm")


def packable(rows: int, d: int) -> bool:
    """Whether the kernel takes a (rows, d) matrix: d a positive multiple of 4 (its 4-float column groups)."""
    return rows > 0 and d > 0 and d % 4 == 0


def pack(w: np.ndarray) -> np.ndarray:
    """w (rows, d) -> the kernel's layout, flat float32 (rows * d,): the first rows - rows % TILE rows as tiles
    (rows // TILE, d / 4, TILE, 4), then the last rows % TILE rows as they are."""
    rows, d = w.shape
    if not packable(rows, d):
        raise ValueError(f"cannot pack a ({rows}, {d}) matrix: d must be a positive multiple of 4")
    w = np.asarray(w, dtype=np.float32)
    full = rows - rows % TILE
    out = np.empty(rows * d, np.float32)                                            # (rows * d,)
    out[: full * d].reshape(full // TILE, d // 4, TILE, 4)[...] = \
        w[:full].reshape(full // TILE, TILE, d // 4, 4).transpose(0, 2, 1, 3)
    out[full * d:] = w[full:].reshape(-1)
    return out


def unpack(p: np.ndarray, rows: int, d: int) -> np.ndarray:
    """The inverse of `pack`: (rows, d) float32."""
    full = rows - rows % TILE
    w = np.empty((rows, d), np.float32)                                             # (rows, d)
    w[:full] = p[: full * d].reshape(full // TILE, d // 4, TILE, 4).transpose(0, 2, 1, 3).reshape(full, d)
    w[full:] = p[full * d:].reshape(rows - full, d)
    return w


def address(a: np.ndarray) -> int:
    """The address of an array's first byte (in Pyodide: its offset in the WebAssembly memory)."""
    return a.__array_interface__["data"][0]


class Matvec:
    """The loaded kernel. `m(packed, rows, d, x, out)` sets out (n, rows) = x (n, d) @ W.T for W packed by `pack`;
    `m.heads(...)` does it for several problems at once (the attention's KV heads).

    `threads`: how many threads multiply one product (CPython's matvec.c; see `with_threads`). 1 in Pyodide, whose
    threads are the browser's (`Pool`)."""

    def __init__(self, fn, fn_threads=None, threads: int = 1, *layer):
        self._fn = fn
        self._fn_threads = fn_threads           # matvec.c's exactspec_matvec_threads (None: one thread only)
        self.threads = threads if fn_threads is not None else 1
        self._layer = layer
        # the layer's other steps by address, without checks (the forward's own buffers, their addresses taken once
        # a forward: in Pyodide an address costs ~2 us and a check more; the checked methods below use them):
        # exp32_at(x, out, n), silu_mul_at(gu, rows, hidden, out), rmsnorm_at(x, rows, dim, w, eps, out),
        # rope_at(x, n, ld, heads, hd, half, cos, sin), attend_at(q, nkv, m, hd, k5, k_hs, v5, v_hs, cap, width,
        # lohi, s, out), kv_store_at(kn, vn, n, ld, nkv, hd, cap, start, k5, v5): matvec.c's functions
        (self.exp32_at, self.silu_mul_at, self.rmsnorm_at, self.rope_at, self.attend_at,
         self.kv_store_at) = layer or (None,) * 6

    def at(self, w: int, rows: int, d: int, x: int, n: int, out: int) -> int:
        """__call__ by address, without checks (see rmsnorm_at); returns how many threads took part."""
        if self.threads > 1:
            return self._fn_threads(w, rows, d, d, x, n, out, self.threads)
        self._fn(w, rows, d, d, x, n, out, 1, 0, 0, 0)
        return 1

    def attend(self, q: np.ndarray, k5: np.ndarray, v5: np.ndarray, width: int, lohi: np.ndarray,
               s: np.ndarray, out: np.ndarray) -> None:
        """Attention of m query rows per KV head over the first `width` keys of a packed cache (the "simd"
        forward's, one call): q (n_kv, m, head_dim) scaled queries, C-contiguous; k5, v5 the packed keys and
        values^T of every KV head (see reference._grow); lohi (m, 2) int32, the keys [lo, hi) each row sees;
        s (n_kv, m, width) scratch; out (n_kv, m, head_dim). Scores and outputs are the kernel's products; per row a
        softmax over its keys, its sum in 4 lanes in key order (matvec.c's exactspec_attend)."""
        nkv, m, hd = q.shape
        cap = v5.size // nkv // hd                          # (values^T rows of cap floats)
        self._check(q, out, (nkv, m, hd), (nkv, m, hd))
        # (lohi's values are not checked here, which would cost more than the call in Pyodide: the kernel keeps every
        # range inside 0..width and non-empty, so no value reads outside the cache)
        if not (s.dtype == np.float32 and s.flags.c_contiguous and s.shape == (nkv, m, width)
                and lohi.dtype == np.int32 and lohi.flags.c_contiguous and lohi.shape == (m, 2)
                and k5.flags.c_contiguous and v5.flags.c_contiguous and k5.shape[0] == v5.shape[0] == nkv
                and k5.dtype == v5.dtype == np.float32 and width % 4 == 0 and 0 < width <= cap
                and k5.size // nkv >= width * hd):
            raise ValueError(f"attend: q {q.shape}, cache {k5.shape} / {v5.shape}, width {width}, scratch {s.shape} "
                             f"and key ranges {lohi.shape} do not fit")
        self.attend_at(address(q), nkv, m, hd, address(k5), 4 * (k5.size // nkv), address(v5), 4 * (v5.size // nkv),
                     cap, width, address(lohi), address(s), address(out))

    def rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> None:
        """Rotate-half RoPE in place on x (n, heads, head_dim) float32, rows possibly strided (a view of the products'
        output) but each row's heads contiguous, over the first 2 * half values of each head; cos, sin (n, half)
        C-contiguous float32, half a multiple of 4: a = x[..., i], b = x[..., half + i] -> a c - b s, b c + a s,
        each a float32 operation rounded (reference.py's numpy, one call instead of ten)."""
        n, heads, hd = x.shape
        half = cos.shape[-1]
        if not (x.dtype == np.float32 and x.strides[2] == 4 and x.strides[1] == 4 * hd and x.strides[0] % 4 == 0
                and cos.shape == sin.shape == (n, half) and cos.dtype == sin.dtype == np.float32
                and cos.flags.c_contiguous and sin.flags.c_contiguous and half % 4 == 0 and 2 * half <= hd):
            raise ValueError(f"rope wants x (n, heads, head_dim) float32 with contiguous heads and cos, sin (n, half) "
                             f"C-contiguous float32, half a multiple of 4, got x {x.dtype} {x.shape} {x.strides}, "
                             f"cos {cos.shape}")
        self.rope_at(address(x), n, x.strides[0] // 4, heads, hd, half, address(cos), address(sin))

    def rmsnorm(self, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
        """RMS norm of the rows of x (n, dim) float32 C-contiguous, dim a multiple of 4, times w (dim,): a 4-lane sum
        of squares in column order (the products' order), / dim, 1 / sqrt(+ eps), (x * s) * w, each a float32
        operation rounded. One call instead of numpy's eight (~3 us each in Pyodide)."""
        n, dim = x.shape
        self._check(x, w.reshape(1, -1), (n, dim), (1, dim))
        if dim % 4:
            raise ValueError(f"rmsnorm wants a width that is a multiple of 4, got {dim}")
        out = np.empty((n, dim), np.float32)                                        # (n, dim)
        self.rmsnorm_at(address(x), n, dim, address(w), float(eps), address(out))
        return out

    def exp32(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """exp of float32 x (C-contiguous), float32: the float64 exp of EXP_CLAMP .. EXP_POLY rounded once (numpy's
        float64 exp costs ~37 ns an element in Pyodide, this ~5.5). out: where (x itself allowed)."""
        if out is None:
            out = np.empty_like(x)
        if not (x.dtype == np.float32 and out.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous
                and x.shape == out.shape):
            raise ValueError(f"exp32 wants float32 C-contiguous x and out of one shape, got {x.dtype} {x.shape} "
                             f"and {out.dtype} {out.shape}")
        self.exp32_at(address(x), address(out), x.size)
        return out

    def silu_mul(self, gu: np.ndarray, hidden: int) -> np.ndarray:
        """The feed-forward's gate: gu (n, 2 hidden) float32 C-contiguous -> (n, hidden) (g / (1 + exp32(-g))) * u,
        g = gu[:, :hidden], u = gu[:, hidden:], each a float32 operation rounded (reference.py's numpy order)."""
        n = gu.shape[0]
        self._check(gu, gu, (n, 2 * hidden), (n, 2 * hidden))
        out = np.empty((n, hidden), np.float32)                                     # (n, hidden)
        self.silu_mul_at(address(gu), n, hidden, address(out))
        return out

    def with_threads(self, threads: int) -> "Matvec":
        """This kernel multiplying each product on `threads` threads (this one and threads - 1 helpers, started on
        first use), where it can (CPython's matvec.c): output rows in chunks of whole tiles, each output computed by
        one thread in the kernel's one order, so the same bits as one thread (tests/test_simd.py)."""
        if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= THREADS_MAX:
            raise ValueError(f"threads must be an integer 1..{THREADS_MAX}, got {threads!r}")
        return Matvec(self._fn, self._fn_threads, threads, *self._layer)

    @staticmethod
    def _check(x: np.ndarray, out: np.ndarray, xs: tuple, outs: tuple) -> None:
        if not (x.dtype == np.float32 and out.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous
                and x.shape == xs and out.shape == outs):
            raise ValueError(f"matvec wants float32 C-contiguous x {xs} and out {outs}, got "
                             f"{x.dtype} {x.shape} and {out.dtype} {out.shape}")

    def __call__(self, packed: np.ndarray, rows: int, d: int, x: np.ndarray, out: np.ndarray,
                 packed_address: int | None = None) -> None:
        """packed_address: address(packed) when the caller keeps it (a call in Pyodide costs microseconds). Returns
        how many threads took part (a product too small to share runs on this one)."""
        n = x.shape[0]
        self._check(x, out, (n, d), (n, rows))
        if packed.size != rows * d:
            raise ValueError(f"packed weights hold {packed.size} floats, not {rows} x {d}")
        return self.at(address(packed) if packed_address is None else packed_address, rows, d, address(x), n,
                       address(out))

    def heads(self, packed: np.ndarray, rows: int, d: int, ld: int, x: np.ndarray, out: np.ndarray) -> None:
        """For each h: out[h] (n, rows) = x[h] (n, d) @ W_h[:, :d].T, where W_h (rows_h >= rows, ld) is packed[h] in
        `pack`'s layout with rows of ld floats (a KV cache: rows or columns beyond `rows` and `d` are not read; fewer
        rows than stored must be whole tiles).
        packed (H, ...) C-contiguous, x (H, n, d), out (H, n, rows)."""
        H, n = x.shape[0], x.shape[1]
        self._check(x, out, (H, n, d), (H, n, rows))
        per = packed.size // H
        if not (packed.flags.c_contiguous and packed.dtype == np.float32 and packed.shape[0] == H
                and d <= ld and rows * ld <= per and d % 4 == 0 and ld % 4 == 0
                and (rows % TILE == 0 or rows * ld == per)):     # fewer rows than stored: whole tiles only
            raise ValueError(f"packed weights {packed.shape} do not hold {H} problems of {rows} x {d} (rows of {ld})")
        self._fn(address(packed), rows, d, ld, address(x), n, address(out), H, 4 * per, 4 * n * d, 4 * n * rows)


class Pool:
    """The kernel on several threads: the browser's CPU fallback when the page is cross-origin isolated
    (app/cpu_pool.js). The packed weights live in a memory the threads share, outside Python's heap, and `host` (the
    JS pool, passed in by the worker; plain Python never imports it) multiplies them:
      host.store(address, nbytes) -> handle   copies packed floats from this heap into the shared memory
      host.read(handle_byte, nbytes, address) copies them back (an embedding row, a test)
      host.release(handle)                    frees them (a model unloaded)
      host.matvec(handle, rows, d, x_address, n, out_address)
                                              out (n, rows) = x (n, d) @ W.T, its output rows in chunks of whole
                                              tiles that the threads take in turn
    Every output is computed by one thread with the kernel's one order of operations, so a row's bits are the
    single-threaded kernel's (tests/test_cpu_pool.py; the page's answers equal the CLI's)."""

    def __init__(self, host):
        self._host = host
        self._matvec = host.matvec          # (looked up once: an attribute of a JS object costs microseconds)
        self.threads = int(host.threads)

    def store(self, packed: np.ndarray) -> int:
        """The handle of a copy of `packed` in the shared memory, or -1 when it is full (the caller keeps its own)."""
        packed = np.ascontiguousarray(packed, dtype=np.float32)
        return int(self._host.store(address(packed), packed.nbytes))

    def read(self, handle: int, start: int, out: np.ndarray) -> np.ndarray:
        """out (C-contiguous float32) = the stored floats start .. start + out.size of `handle`."""
        if not (out.dtype == np.float32 and out.flags.c_contiguous):
            raise ValueError("read wants a C-contiguous float32 array")
        self._host.read(handle + 4 * start, out.nbytes, address(out))
        return out

    def release(self, handle: int) -> None:
        self._host.release(handle)

    def __call__(self, handle: int, rows: int, d: int, x: np.ndarray, out: np.ndarray) -> None:
        n = x.shape[0]
        Matvec._check(x, out, (n, d), (n, rows))
        self.at(handle, rows, d, address(x), n, address(out))

    def at(self, handle: int, rows: int, d: int, x: int, n: int, out: int) -> None:
        """__call__ by address, without checks (see Matvec.rmsnorm_at)."""
        self._matvec(handle, rows, d, x, n, out)


def load(path: str | Path | None = None) -> Matvec | None:
    """The kernel for this Python, or None where there is none (then reference.py uses "gemv" or "dot"):
    in Pyodide (WebAssembly) matvec.wasm; in CPython on x86-64 with AVX, matvec.c compiled once (`native`).
    Raises OSError with the loader's reason when Pyodide's module is there but cannot be loaded (a runtime without
    WebAssembly SIMD)."""
    import ctypes
    if sys.platform != "emscripten":
        return native(path)
    lib = ctypes.CDLL(str(WASM if path is None else path))
    try:
        fn = lib.exactspec_matvec
    except AttributeError as e:                 # (Emscripten's dlopen may hand back a library without it)
        raise OSError(f"{path or WASM}: no exactspec_matvec in it ({e})") from e
    u32, i32 = ctypes.c_uint32, ctypes.c_int32      # addresses: wasm32 offsets up to 4 GiB
    fn.argtypes = [u32, i32, i32, i32, u32, i32, u32, i32, u32, u32, u32]   # w rows d ld x n out heads w_hs x_hs out_hs
    fn.restype = None
    return Matvec(fn, None, 1, *_layer_functions(lib, u32, i32))


def _layer_functions(lib, addr, i32):
    """The kernel's exactspec_exp32, _silu_mul, _rmsnorm, _rope, _attend and _kv_store, typed (addr: the address
    type)."""
    import ctypes
    ex, silu, norm, rope = lib.exactspec_exp32, lib.exactspec_silu_mul, lib.exactspec_rmsnorm, lib.exactspec_rope
    att, kv = lib.exactspec_attend, lib.exactspec_kv_store
    ex.argtypes, ex.restype = [addr, addr, i32], None                       # x out n
    silu.argtypes, silu.restype = [addr, i32, i32, addr], None              # gu rows hidden out
    norm.argtypes, norm.restype = [addr, i32, i32, addr, ctypes.c_float, addr], None   # x rows dim w eps out
    rope.argtypes, rope.restype = [addr, i32, i32, i32, i32, i32, addr, addr], None    # x n ld heads hd half cos sin
    hs = ctypes.c_int64 if addr is ctypes.c_void_p else addr                # (byte strides: int64 in C, i32 in wasm)
    att.argtypes = [addr, i32, i32, i32, addr, hs, addr, hs, i32, i32, addr, addr, addr]  # q nkv m hd k k_hs v v_hs
    att.restype = None                                                                  # cap width lohi s out
    kv.argtypes, kv.restype = [addr, addr, i32, i32, i32, i32, i32, i32, addr, addr], None   # kn vn n ld nkv hd cap
    return ex, silu, norm, rope, att, kv                                                    # start k5 v5


def native(path: str | Path | None = None) -> Matvec | None:
    """CPython on x86-64: matvec.c (the same arithmetic as matvec.wasm, so the same bits) compiled with the system C
    compiler on first use into ~/.cache/exactspec (or the temp folder) under its source's sha256; None where there is
    no compiler, no x86-64 or no AVX. path: an already built library."""
    import ctypes
    import hashlib
    import os
    import platform
    import shutil
    import subprocess
    import tempfile
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    if path is None:
        src = Path(__file__).with_name("matvec.c")
        tag = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
        path = None
        cc = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc") or shutil.which("clang")
        for base in (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"), Path(tempfile.gettempdir())):
            out = base / "exactspec" / f"matvec-{tag}.so"
            if out.exists():
                path = out
                break
            if cc is None:
                return None
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
                r = subprocess.run([cc, "-O3", "-mavx", "-ffp-contract=off", "-fPIC", "-shared", "-pthread", "-o",
                                    str(tmp), str(src)], capture_output=True, timeout=120)
                if r.returncode != 0:
                    return None
                os.replace(tmp, out)                        # atomic: parallel test workers may build it together
                path = out
                break
            except (OSError, subprocess.SubprocessError):
                continue
        if path is None:
            return None
    lib = ctypes.CDLL(str(path))
    if not lib.exactspec_matvec_ok():
        return None
    fn = lib.exactspec_matvec
    p, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    fn.argtypes = [p, i32, i32, i32, p, i32, p, i32, i64, i64, i64]       # w rows d ld x n out heads w_hs x_hs out_hs
    fn.restype = None
    ft = lib.exactspec_matvec_threads
    ft.argtypes = [p, i32, i32, i32, p, i32, p, i32]                       # w rows d ld x n out threads
    ft.restype = i32                                                        # the threads that took part
    return Matvec(fn, ft, 1, *_layer_functions(lib, p, i32))
