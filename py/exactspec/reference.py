"""Numpy float32 reference forward pass for llama-family models: the oracle for every browser result.

Math (Hugging Face LlamaForCausalLM order): h = embed[tok]; per layer: h += Wo attn(RoPE(Wq n1(h)), RoPE(Wk n1(h)),
Wv n1(h)); h += Wdown (silu(Wgate n2(h)) * Wup n2(h)); logits = Wout norm(h). RMSNorm x * rsqrt(mean(x^2) + eps) * w;
RoPE is HF's rotate-half convention over the first rope_dim dims of each head (weights arrive un-permuted);
grouped-query attention with n_heads // n_kv_heads query heads per KV head; tied embeddings when there is no
output.weight.

BATCH INVARIANCE (coupled-mode exactness depends on it): the logits row of a position is bitwise identical whether
the tokens arrive one at a time, in a verify block of k+1 or in a prefill of any chunk size. A BLAS matrix-matrix
product (OpenBLAS sgemm) gives different bits for the same row depending on how many rows are multiplied (measured
here, OpenBLAS 0.3.31: n = 1 vs 2..18 vs 19+ differ, with thresholds that move with the matrix's size), so no
product here ever multiplies a varying number of rows at once:
  - every weight matrix is cut ONCE, at load, into fixed blocks of output rows (`_RowBlocks`; the cut depends only on
    the matrix's shape, never on the batch). A block is read from memory once per forward and then, while it is in
    cache, each input row is multiplied by it: k+1 rows cost one pass over the weights plus k cheap passes over
    cached blocks, instead of k+1 passes over the weights. Each (row, block) product is one call of the same kernel
    with the same shapes whatever the batch, so its bits cannot depend on the batch:
      "gemv" (numpy with a BLAS, i.e. CPython): a BLAS matrix-vector product per (row, block) (np.matmul over a
        stack of vectors runs one sgemv per vector), after a max-reduction over the block that streams it into
        cache (sgemv itself streams a cold block ~1.4x slower than a plain reduction does);
      "dot" (numpy without a BLAS, i.e. Pyodide): np.einsum's per-output dot product (one call of numpy's
        sum_of_products_contig_contig_outstride0 per output element, over the whole input row in a fixed order),
        ~2x faster in WebAssembly than numpy's BLAS-less matmul;
      "simd" (exactspec.simd): WebAssembly SIMD in Pyodide (py/exactspec/matvec.wat), the same arithmetic in C in
        CPython on x86-64 (matvec.c, compiled on first use). Each matrix packed once at load into tiles of 2 output
        rows, streamed once per forward, every weight vector it loads multiplied into several input rows; each
        output (row, column) is one accumulator over the columns in ascending order whatever the tile or chunk (the
        argument in matvec.wat's header). Its products have the same bits in CPython and in Pyodide, and so have
        whole forwards (exp: see _exp32);
    "auto" picks "simd" when it loads and every matrix's width is a multiple of 4, else "gemv" when numpy has a BLAS,
    else "dot". Different kernels give different bits: a model's kernel is fixed at construction.
  - attention: a query at position p attends over _bucket_end(p) keys (its prefix rounded up to whole buckets of
    ATT_BUCKET), the keys past p masked to -inf; all rows of a forward that share a bucket go through numpy at once,
    but every reduction is per output over exactly that fixed width (see _attend), so a row's bits depend on p and
    its prefix only ("simd": the kernel's attention, simd.Matvec.attend, over a KV cache kept in its packed layout:
    its dot products, and a softmax per row over the keys it sees with its sum in 4 lanes in key order);
  - element-wise work and row reductions (RMSNorm; "simd": the kernel's, its sum of squares in 4 lanes) run on the
    whole block; they are per-row by construction.
tests/test_reference.py proves all of it bitwise for many chunkings, row counts 1..9, 17, 64, block cuts and bucket
edges, for every kernel, in CPython and in Pyodide; tests/test_simd.py checks "simd" against a numpy emulation of its
order, bit for bit, in both.
Cost (py/bench/verify_cpu.py, SmolLM2-135M after 96 tokens, 2-core machine): a verify block still costs more than
one row, because each extra row is a real pass over cached weights: in CPython an L2-resident sgemv (~80 GB/s)
against the single row's DRAM stream (~20 GB/s), in Pyodide's scalar WebAssembly numpy (no SIMD, no BLAS) every
row is compute-bound (~1 cycle per multiply-add), so there k+1 rows cost about k+1 times one.
Weights are dequantised once to float32 at load and kept (out_features, in_features) C-contiguous; q/k/v and
gate/up are stacked into one matrix each so a position needs 4 matrix-vector products per layer plus the head.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from .backend import ModelConfig


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax in the input's float dtype."""
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


KERNELS = ("auto", "gemv", "dot", "simd")
# bytes of weights per row block: "gemv" wants a block that stays in the L2 cache while every row is multiplied by it;
# "dot" is compute-bound in WebAssembly, so bigger blocks only save Python calls (measured: 4 MiB best in Pyodide)
BLOCK_BYTES = {"gemv": 512 << 10, "dot": 4 << 20}


def numpy_has_blas() -> bool:
    """True when numpy was built against a BLAS (CPython wheels: OpenBLAS); False in Pyodide, whose numpy has none."""
    try:
        return bool(np.__config__.CONFIG["Build Dependencies"]["blas"].get("found", False))
    except Exception:            # an older or unusual numpy without the config dict: take the path that needs no BLAS
        return False


class _Packed:
    """A weight matrix (rows, d) in the "simd" kernel's layout (exactspec.simd.pack), the only copy kept: `w` the
    packed floats in this heap, or with a `pool` (exactspec.simd.Pool) `handle`, where the pool's shared memory
    holds them (`w` None); `rows`, `d`."""

    __slots__ = ("w", "rows", "d", "address", "pool", "handle", "__weakref__")

    def __init__(self, w: np.ndarray, pool=None):
        from . import simd
        self.rows, self.d = w.shape
        self.pool, self.handle, self.address = pool, None, None
        self.w = simd.pack(w)                                                       # (rows * d,)
        handle = pool.store(self.w) if pool is not None else -1     # -1: the pool's memory is full
        if handle >= 0:
            import weakref
            self.handle, self.w = handle, None  # (the pool's copy is the only one)
            weakref.finalize(self, pool.release, handle)
        else:
            self.pool = None                    # kept here, multiplied on this thread
            self.address = simd.address(self.w)                                     # (numpy never moves it)

    @property
    def nbytes(self) -> int:
        return 4 * self.rows * self.d

    def floats(self, start: int, stop: int) -> np.ndarray:
        """The packed floats start .. stop (a view in this heap, or a copy read from the pool)."""
        if self.w is not None:
            return self.w[start:stop]
        return self.pool.read(self.handle, start, np.empty(stop - start, np.float32))

    def matrix(self) -> np.ndarray:
        """The matrix (rows, d), unpacked (a copy)."""
        from .simd import unpack
        return unpack(self.floats(0, self.rows * self.d), self.rows, self.d)

    def take(self, ids: np.ndarray) -> np.ndarray:
        """Rows ids (n,) of the matrix, (n, d) float32 (an embedding lookup in a tied head)."""
        from .simd import TILE
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        d, full = self.d, self.rows - self.rows % TILE
        out = np.empty((ids.shape[0], d), np.float32)                               # (n, d)
        for j, i in enumerate(ids.tolist()):
            if i < full:                        # its tile (d / 4, TILE, 4): the row's 4 floats of each column group
                t0 = (i // TILE) * TILE * d
                out[j] = self.floats(t0, t0 + TILE * d).reshape(d // 4, TILE, 4)[:, i % TILE, :].reshape(d)
            else:
                out[j] = self.floats(full * d + (i - full) * d, full * d + (i - full + 1) * d)
        return out


class _RowBlocks:
    """A weight matrix (rows, d) and its fixed cut into blocks of output rows (see BATCH INVARIANCE).

    The cut depends only on the matrix's shape and the block size; `blocks` holds (r0, r1, w[r0:r1]) views."""

    __slots__ = ("w", "blocks")

    def __init__(self, w: np.ndarray, block_bytes: int):
        rows, d = w.shape
        step = max(1, block_bytes // (4 * d))
        if step >= 4:
            step -= step % 4        # whole groups of 4 rows (OpenBLAS's sgemv works on 4 output rows at a time)
        self.w = w                                                                  # (rows, d)
        self.blocks = [(r0, min(rows, r0 + step), w[r0: r0 + step]) for r0 in range(0, rows, step)]

    def matrix(self) -> np.ndarray:
        """The matrix (rows, d)."""
        return self.w


def _simd_fits(c: ModelConfig) -> bool:
    """Whether every matrix of a model with config c has a width the "simd" kernel takes (a multiple of 4; the
    attention's head_dim too: the KV cache is packed)."""
    from .simd import packable
    return all(packable(1, w) for w in (c.dim, c.hidden_dim, c.n_heads * c.head_dim, c.head_dim))


def _exp32(x: np.ndarray) -> np.ndarray:
    """exp of float32 x, float32: computed in float64 and rounded once, so the same bits in every numpy build (its
    float32 exp differs between CPython's and Pyodide's in the last bit for ~40% of inputs; float64 exps differ in
    their last bit, which one rounding to float32 hides: measured equal on 10^6 inputs). Every other operation of a
    forward is correctly rounded or a sum in numpy's fixed pairwise order. With "simd" the kernel's exp32 replaces
    it (exactspec.simd: the same float64-then-round recipe in one pass, the same bits in C and WebAssembly; equal to
    this on 3 x 10^6 inputs), so a forward gives the same bits in CPython and in Pyodide."""
    return np.exp(x, dtype=np.float64).astype(np.float32)


def _zero_columns(v5: np.ndarray, a: int, b: int) -> None:
    """Columns (positions) a..b-1 of a packed values^T cache v5 (n_kv, hd/2, cap/4, 2, 4) set to 0."""
    p = a
    while p < b and p % 4:
        v5[:, :, p // 4, :, p % 4] = 0
        p += 1
    if p // 4 < b // 4:
        v5[:, :, p // 4: b // 4] = 0
        p = 4 * (b // 4)
    while p < b:
        v5[:, :, p // 4, :, p % 4] = 0
        p += 1


ATT_BUCKET = 64   # keys per attention bucket: a query at position p attends over _bucket_end(p) keys, masked


def _bucket_end(p: int) -> int:
    """Number of keys a query at position p attends over: its prefix 0..p rounded up to whole buckets."""
    return (p // ATT_BUCKET + 1) * ATT_BUCKET


def rope_tables(config: ModelConfig, n_pos: int) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin (n_pos, rope_dim // 2) float32, computed in float64 then rounded once."""
    r = config.rope_dim or config.head_dim
    inv = 1.0 / (config.rope_theta ** (np.arange(0, r, 2, dtype=np.float64) / r))   # (r/2,)
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv[None, :]               # (n_pos, r/2)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


class ReferenceModel:
    """Backend protocol implementation (see exactspec.backend) on numpy float32."""

    def __init__(self, config: ModelConfig, weights: Mapping[str, np.ndarray], max_len: int | None = None,
                 keep_features: bool = False, window: int = 0, kernel: str = "auto", block_bytes: int | None = None,
                 shared_head=None, pool=None, threads: int = 1):
        """keep_features: also keep the final hidden state of every row computed, by absolute position (see
        `feature_rows`; a draft head reads them). window > 0: each position attends to its last `window` positions
        only (itself included); 0: to its whole prefix. kernel, block_bytes: the matrix products (see KERNELS).
        shared_head: another model's `head_blocks` (same kernel, its LM head is these weights' output matrix) used
        instead of cutting or packing a second copy (a draft head shares the champion's tied LM head).
        pool: an exactspec.simd.Pool (the browser's threads, app/cpu_pool.js) that holds the packed matrices and
        multiplies them, with "simd" (used only when "simd" is the kernel; the same bits either way).
        threads: with "simd" in CPython (matvec.c), each matrix product on this many threads (this one and helpers;
        the same bits as one: simd.Matvec.with_threads); elsewhere (Pyodide, whose threads are a pool's, or another
        kernel) products run on one thread whatever it says."""
        c = config
        self.config = c
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        auto = kernel == "auto"
        self._simd = None
        qd, kd = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        fallback = "gemv" if numpy_has_blas() else "dot"
        if kernel == "auto":
            kernel = "simd" if _simd_fits(c) else fallback
        if kernel == "simd":
            from . import simd
            if not _simd_fits(c):
                raise ValueError(f"kernel 'simd' needs every matrix width a multiple of 4 (dim {c.dim}, hidden_dim "
                                 f"{c.hidden_dim}, n_heads * head_dim {qd}, head_dim {c.head_dim})")
            try:
                self._simd = simd.load()
            except OSError as e:
                if not auto:
                    raise ValueError(f"kernel 'simd' could not be loaded here: {e}") from e
            if self._simd is None:
                if not auto:
                    raise ValueError("kernel 'simd' runs in Pyodide, or in CPython on x86-64 with AVX and a C "
                                     "compiler (none here)")
                kernel = fallback
        self.kernel = kernel
        self.pool = pool if kernel == "simd" else None
        if self._simd is not None and self.pool is None and threads != 1:
            self._simd = self._simd.with_threads(threads)       # (validates threads)
        if self.kernel == "simd":                 # no row blocks: the kernel tiles the packed matrix itself
            if block_bytes not in (None, 0):
                raise ValueError(f"block_bytes is not used by kernel 'simd', got {block_bytes!r}")
            block_bytes = 0
        elif block_bytes is None:
            block_bytes = BLOCK_BYTES[self.kernel]
        elif not isinstance(block_bytes, int) or block_bytes <= 0:
            raise ValueError(f"block_bytes must be a positive integer, got {block_bytes!r}")
        if c.n_heads % c.n_kv_heads:
            raise ValueError(f"n_heads {c.n_heads} is not a multiple of n_kv_heads {c.n_kv_heads}")
        rope_dim = c.rope_dim or c.head_dim
        if rope_dim % 2 or rope_dim > c.head_dim:
            raise ValueError(f"rope_dim {rope_dim} must be even and <= head_dim {c.head_dim}")
        self.rope_dim = rope_dim

        from .formats.quant import FormatError     # (a ValueError) the weights a file gave cannot be used

        def get(name: str, shape: tuple) -> np.ndarray:
            if name not in weights:
                raise FormatError(f"missing weight {name}")
            w = np.asarray(weights[name])
            if tuple(w.shape) != shape:
                raise FormatError(f"weight {name} has shape {tuple(w.shape)}, expected {shape}")
            if not np.all(np.isfinite(w)):
                raise FormatError(f"weight {name} has non-finite values (NaN or Inf)")
            return np.ascontiguousarray(w, dtype=np.float32)

        if shared_head is not None and "token_embd.weight" not in weights:
            if not c.tied_embeddings:
                raise ValueError("a model without its token embedding must have a tied, shared head")
            self.embed = None                                                         # read from the shared head
        else:
            self.embed = get("token_embd.weight", (c.vocab_size, c.dim))              # (vocab, dim)
        self.out_norm = get("output_norm.weight", (c.dim,))                           # (dim,)
        if shared_head is not None:
            size = shared_head.rows * shared_head.d if isinstance(shared_head, _Packed) else shared_head.w.size
            if size != c.vocab_size * c.dim or (self.kernel == "simd") != isinstance(shared_head, _Packed):
                raise ValueError(f"shared_head does not fit: vocab {c.vocab_size} x dim {c.dim}, kernel {self.kernel}")
            self.out = None
        elif c.tied_embeddings:
            self.out = self.embed                                                     # (vocab, dim)
        else:
            self.out = get("output.weight", (c.vocab_size, c.dim))                    # (vocab, dim)
        # every matrix cut once into its fixed row blocks, or packed ("simd": as soon as it is read, so the unpacked
        # copies do not all live at once: in Pyodide the heap never shrinks)
        self.block_bytes = block_bytes
        self._head = shared_head if shared_head is not None else self.blocked(self.out)
        if self.kernel == "simd":
            self.out = None                       # packed in _head: the only copy kept (see embed_rows)
            if c.tied_embeddings:
                self.embed = None
        elif shared_head is not None and self.embed is None:
            self.embed = shared_head.w            # tied: the shared (vocab, dim) matrix is the embedding
        self.layers = []
        for i in range(c.n_layers):
            p = f"blk.{i}."
            self.layers.append({
                "attn_norm": get(p + "attn_norm.weight", (c.dim,)),                  # (dim,)
                "wqkv": self.blocked(np.concatenate([                                 # (qd + 2 kd, dim)
                    get(p + "attn_q.weight", (qd, c.dim)), get(p + "attn_k.weight", (kd, c.dim)),
                    get(p + "attn_v.weight", (kd, c.dim))], axis=0)),
                "wo": self.blocked(get(p + "attn_output.weight", (c.dim, qd))),       # (dim, qd)
                "ffn_norm": get(p + "ffn_norm.weight", (c.dim,)),                     # (dim,)
                "w13": self.blocked(np.concatenate([                                  # (2 hidden, dim)
                    get(p + "ffn_gate.weight", (c.hidden_dim, c.dim)),
                    get(p + "ffn_up.weight", (c.hidden_dim, c.dim))], axis=0)),
                "w2": self.blocked(get(p + "ffn_down.weight", (c.dim, c.hidden_dim))),   # (dim, hidden)
            })
        if self._simd is not None:            # the norms' weights by address (forward, the kernel's rmsnorm_at)
            from .simd import address
            self._norm_at = [(address(L["attn_norm"]), address(L["ffn_norm"])) for L in self.layers]
        self.max_len = c.seq_len if max_len is None else min(int(max_len), c.seq_len)
        if self.max_len <= 0:
            raise ValueError("max_len must be positive")
        self._cap = 0
        self._k: list[np.ndarray] = []     # per layer (n_kv_heads, cap, head_dim)
        self._vt: list[np.ndarray] = []    # per layer (n_kv_heads, head_dim, cap): values, transposed
        self._cos = self._sin = np.zeros((0, rope_dim // 2), np.float32)   # (cap, rope_dim/2)
        self._feat = np.zeros((0, c.dim), np.float32) if keep_features else None   # (cap, dim) or None
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        self.window = int(window)
        self._length = 0
        self._written = 0      # cached values past this position are exact zeros: never written, or zeroed since
        self._grow(min(self.max_len, 256))

    @property
    def threads(self) -> int:
        """Threads that multiply this model's matrices (its pool's, or its kernel's in CPython; 1 otherwise)."""
        if self.pool is not None:
            return int(self.pool.threads)
        return self._simd.threads if self._simd is not None else 1

    # -- construction ---------------------------------------------------------------------------------------------
    @classmethod
    def from_weights(cls, config: ModelConfig, weights: Mapping[str, np.ndarray], max_len: int | None = None,
                     **options):
        return cls(config, weights, max_len=max_len, **options)

    @classmethod
    def from_file(cls, path: str | os.PathLike, max_len: int | None = None, **options) -> "ReferenceModel":
        """options: keep_features, window, kernel, block_bytes (see the constructor)."""
        from .formats import load_model_file
        config, weights = load_model_file(path)
        return cls(config, weights, max_len=max_len, **options)

    # -- KV cache -------------------------------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self._length

    def truncate(self, n: int) -> None:
        """O(1) rollback of the logical KV length (no zeroing)."""
        n = int(n)
        if not 0 <= n <= self._length:
            raise ValueError(f"truncate({n}) outside 0..{self._length}")
        self._length = n

    def reset(self) -> None:
        self._length = 0

    def _grow(self, need: int) -> None:
        if need > self.max_len:
            raise ValueError(f"context overflow: {need} positions > max_len {self.max_len}")
        if need <= self._cap:
            return
        c = self.config
        cap = _bucket_end(min(self.max_len, max(need, 2 * self._cap)) - 1)      # whole attention buckets
        old = self._cap
        nkv, hd = c.n_kv_heads, c.head_dim
        if self._simd is not None:            # the "simd" kernel's layout (simd.Matvec.attend): tiles of 2 rows
            k_shape = (nkv, cap // 2, hd // 4, 2, 4)      # keys: rows = positions, columns = head_dim
            v_shape = (nkv, hd // 2, cap // 4, 2, 4)      # values^T: rows = head_dim, columns = positions
            k_old, v_old = np.s_[:, : old // 2], np.s_[:, :, : old // 4]
        else:
            k_shape, v_shape = (nkv, cap, hd), (nkv, hd, cap)   # (n_kv_heads, cap, head_dim), (n_kv, head_dim, cap)
            k_old, v_old = np.s_[:, :old], np.s_[:, :, :old]
        for i in range(c.n_layers):
            k, vt = np.zeros(k_shape, np.float32), np.zeros(v_shape, np.float32)
            if i < len(self._k):
                k[k_old] = self._k[i][k_old]
                vt[v_old] = self._vt[i][v_old]
                self._k[i], self._vt[i] = k, vt
            else:
                self._k.append(k)
                self._vt.append(vt)
        if self._simd is not None:                                              # (forward's kernel calls)
            from .simd import address
            self._kv_at = [(address(k), address(v)) for k, v in zip(self._k, self._vt)]
        self._cos, self._sin = rope_tables(c, cap)                              # (cap, rope_dim/2)
        if self._feat is not None:
            feat = np.zeros((cap, c.dim), np.float32)                           # (cap, dim)
            feat[: self._cap] = self._feat[: self._cap]
            self._feat = feat
        self._cap = cap

    # -- forward --------------------------------------------------------------------------------------------------
    def blocked(self, w: np.ndarray) -> _RowBlocks | _Packed:
        """w (rows, d) float32 cut into this model's fixed row blocks, or packed for "simd": what _matvec multiplies
        (a draft head's own matrices go through its layer's _matvec this way)."""
        w = np.ascontiguousarray(w, dtype=np.float32)
        return _Packed(w, self.pool) if self.kernel == "simd" else _RowBlocks(w, self.block_bytes)

    @property
    def head_blocks(self) -> _RowBlocks | _Packed:
        """The LM head as _matvec multiplies it (see shared_head)."""
        return self._head

    def embed_rows(self, ids) -> np.ndarray:
        """The token embeddings of ids (n,): (n, dim) float32 (with "simd" and a tied head, read from the packed
        head: the embedding matrix is not kept twice)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if self.embed is None:
            return self._head.take(ids)
        return self.embed[ids].astype(np.float32)

    def _matvec(self, m: _RowBlocks | _Packed, x: np.ndarray, out: np.ndarray) -> None:
        """out (n, rows) = x (n, d) @ W (rows, d).T, C-contiguous float32, each row by itself (BATCH INVARIANCE)."""
        if self._simd is not None:
            if m.handle is not None:
                m.pool(m.handle, m.rows, m.d, x, out)
            else:
                self._simd(m.w, m.rows, m.d, x, out, m.address)
            return
        if self.kernel == "dot":
            for r0, r1, wb in m.blocks:                                         # wb (r1 - r0, d)
                np.einsum("nj,ij->ni", x, wb, out=out[:, r0:r1])
            return
        xs = x[:, :, None]                                                      # (n, d, 1): a stack of vectors
        for r0, r1, wb in m.blocks:
            np.maximum.reduce(wb, axis=None)                                    # streams the block into cache
            np.matmul(wb, xs, out=out[:, r0:r1, None])                          # one sgemv per row

    def _matvec_at(self, m: _Packed, x: int, n: int, out: int) -> None:
        """_matvec with "simd" by address (x (n, d), out (n, rows): the forward's own buffers, unchecked)."""
        if m.handle is not None:
            m.pool.at(m.handle, m.rows, m.d, x, n, out)
        else:
            self._simd.at(m.address, m.rows, m.d, x, n, out)

    def _rmsnorm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        if self._simd is not None:      # the kernel's: one call, its sum of squares in the products' 4-lane order
            return self._simd.rmsnorm(np.ascontiguousarray(x), w, self.config.norm_eps)
        # np.mean(x * x, axis=-1, dtype=float32) bit for bit, without np.mean's Python-level overhead (~25 us a call in
        # Pyodide): a float32 pairwise sum per row, then one correctly rounded division
        ms = np.add.reduce(x * x, axis=-1, keepdims=True) / np.float32(x.shape[-1])   # (n, 1)
        return (x * (np.float32(1.0) / np.sqrt(ms + np.float32(self.config.norm_eps)))) * w

    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> None:
        """In place on x (n, heads, head_dim); HF rotate-half over the first rope_dim dims; cos, sin (n, 1, r/2)."""
        h = self.rope_dim // 2
        x1 = x[:, :, :h].copy()                                                 # (n, heads, r/2)
        x2 = x[:, :, h: 2 * h].copy()                                           # (n, heads, r/2)
        x[:, :, :h] = x1 * cos - x2 * sin
        x[:, :, h: 2 * h] = x2 * cos + x1 * sin

    def forward(self, tokens: Sequence[int], start_pos: int, n_out: int | None = None, features: bool = False,
                embeds: np.ndarray | None = None):
        """tokens (n,) at positions start_pos.. -> logits float32 (n_out, vocab) of the last n_out positions.

        features=True: returns (logits, feats) with feats float32 (n_out, dim) the final hidden state of those rows
        (the residual stream after the last layer, before the output norm): what a draft head reads.
        embeds (n, dim): the layers' input rows instead of the tokens' embeddings (a draft head makes its own);
        the tokens then only count the rows."""
        c = self.config
        toks = np.asarray(tokens, dtype=np.int64).reshape(-1)                   # (n,)
        n = toks.shape[0]
        if start_pos != self._length:
            raise ValueError(f"forward at start_pos {start_pos} but the KV cache holds {self._length} positions")
        if n == 0:
            raise ValueError("forward needs at least one token")
        n_out = n if n_out is None else int(n_out)
        if not 0 <= n_out <= n:
            raise ValueError(f"n_out {n_out} outside 0..{n}")
        if embeds is None and (toks.min() < 0 or toks.max() >= c.vocab_size):
            raise ValueError(f"token id outside 0..{c.vocab_size - 1}")
        self._grow(start_pos + n)
        hd, nh, nkv = c.head_dim, c.n_heads, c.n_kv_heads
        rep = nh // nkv
        qd, kd = nh * hd, nkv * hd
        scale = np.float32(1.0 / np.sqrt(hd))
        end = start_pos + n
        pos = np.arange(start_pos, end)                                          # (n,)
        cs, sn = self._cos[start_pos:end], self._sin[start_pos:end]             # (n, r/2) each, contiguous views
        # attention groups: rows whose bucket (see _bucket_end) is the same, each with its causal mask
        groups = []
        i0 = 0
        while i0 < n:
            width = _bucket_end(start_pos + i0)                                 # keys 0..width-1
            i1 = min(n, width - start_pos)
            if self._simd is not None:          # the kernel's attention takes each row's keys [lo, hi): causal,
                p = pos[i0:i1]                  # and the last `window` keys only
                lo = np.maximum(p - self.window + 1, 0) if self.window else np.zeros_like(p)
                lohi = np.repeat(np.stack([lo, p + 1], axis=1).astype(np.int32), nh // nkv, axis=0)   # (rows rep, 2)
                groups.append((i0, i1, width, lohi))
            else:
                keys = np.arange(width)[None, :]
                seen = keys <= pos[i0:i1, None]                                 # causal
                if self.window:                                                 # and the last `window` keys only
                    seen &= keys > pos[i0:i1, None] - self.window
                mask = np.where(seen, np.float32(0), np.float32(-np.inf))
                groups.append((i0, i1, width, mask.astype(np.float32)[:, None, None, :]))   # (rows, 1, 1, width)
            i0 = i1
        width_max = groups[-1][2]

        if embeds is None:
            x = self.embed_rows(toks)                                           # (n, dim)
        else:
            x = np.array(embeds, dtype=np.float32).reshape(n, c.dim)            # (n, dim)
        qkv = np.empty((n, qd + 2 * kd), np.float32)                            # (n, qd + 2 kd)
        att = np.empty((n, qd), np.float32)                                     # (n, qd)
        proj = np.empty((n, c.dim), np.float32)                                 # (n, dim)
        ffh = np.empty((n, 2 * c.hidden_dim), np.float32)                       # (n, 2 hidden)
        stale = self._written                   # until every layer is done: what may hold values
        self._written = max(stale, end)
        sm = self._simd
        if sm is not None:
            # the kernel's functions by address, each buffer's address taken once a forward (in Pyodide an address
            # costs ~2 us, a numpy operation a few: ~60 a layer otherwise); the numpy path's math, with the RMS norm's
            # and the softmax's sums in the kernel's 4-lane order
            from .simd import address as A
            x = np.ascontiguousarray(x)
            xn = np.empty((n, c.dim), np.float32)                               # (n, dim)
            hact = np.empty((n, c.hidden_dim), np.float32)                      # (n, hidden)
            ax, axn, aqkv, aatt, aproj, affh, ahact = map(A, (x, xn, qkv, att, proj, ffh, hact))
            half = self.rope_dim // 2
            acs, asn = A(cs), A(sn)
            eps, cap, ld = float(c.norm_eps), self._cap, qd + 2 * kd
            bufs = []
            for i0, i1, width, lohi in groups:  # per group: scaled queries by KV head, scores, outputs
                g = i1 - i0
                qt = np.empty((nkv, g * rep, hd), np.float32)                   # (n_kv, g rep, head_dim)
                sc = np.empty((nkv, g * rep, width), np.float32)                # (n_kv, g rep, width)
                ob = np.empty((nkv, g * rep, hd), np.float32)                   # (n_kv, g rep, head_dim)
                bufs.append((i0, i1, width, qt, ob, A(qt), A(lohi), A(sc), A(ob), sc))   # (sc: kept alive)
        for li, L in enumerate(self.layers):
            if sm is not None:
                a_norm, f_norm = self._norm_at[li]
                ak5, av5 = self._kv_at[li]
                sm.rmsnorm_at(ax, n, c.dim, a_norm, eps, axn)
                self._matvec_at(L["wqkv"], axn, n, aqkv)
                qk = qkv[:, : qd + kd].reshape(n, nh + nkv, hd)                 # (n, n_heads + n_kv_heads, head_dim)
                if half % 4 == 0:
                    sm.rope_at(aqkv, n, ld, nh + nkv, hd, half, acs, asn)       # q and k heads at once, in place
                else:
                    self._rope(qk, cs[:, None, :], sn[:, None, :])
                sm.kv_store_at(aqkv + 4 * qd, aqkv + 4 * (qd + kd), n, ld, nkv, hd, cap, start_pos, ak5, av5)
                if stale > end:                         # stale values past the end (a rollback): exact zeros
                    _zero_columns(self._vt[li], end, min(width_max, stale))      # (see _attend)
                for i0, i1, width, qt, ob, aq, alohi, asc, aob, _ in bufs:
                    g = i1 - i0
                    np.multiply(qk[i0:i1, :nh].reshape(g, nkv, rep, hd).transpose(1, 0, 2, 3), scale,
                                out=qt.reshape(nkv, g, rep, hd))
                    sm.attend_at(aq, nkv, g * rep, hd, ak5, 4 * cap * hd, av5, 4 * hd * cap, cap, width, alohi,
                                 asc, aob)
                    att[i0:i1] = ob.reshape(nkv, g, rep, hd).transpose(1, 0, 2, 3).reshape(g, qd)
                self._matvec_at(L["wo"], aatt, n, aproj)
                np.add(x, proj, out=x)
                sm.rmsnorm_at(ax, n, c.dim, f_norm, eps, axn)
                self._matvec_at(L["w13"], axn, n, affh)
                sm.silu_mul_at(affh, n, c.hidden_dim, ahact)
                self._matvec_at(L["w2"], ahact, n, aproj)
                np.add(x, proj, out=x)
                continue
            xn = self._rmsnorm(x, L["attn_norm"])                               # (n, dim)
            self._matvec(L["wqkv"], xn, qkv)
            qk = qkv[:, : qd + kd].reshape(n, nh + nkv, hd)                     # (n, n_heads + n_kv_heads, head_dim)
            self._rope(qk, cs[:, None, :], sn[:, None, :])                      # q and k heads at once, in place
            qg = (qk[:, :nh] * scale).reshape(n, nkv, rep, hd)                  # (n, n_kv, rep, head_dim)
            kc, vt = self._k[li], self._vt[li]                  # (n_kv_heads, cap, head_dim), (n_kv, head_dim, cap)
            kc[:, start_pos: end] = qk[:, nh:].transpose(1, 0, 2)
            vt[:, :, start_pos: end] = qkv[:, qd + kd:].reshape(n, nkv, hd).transpose(1, 2, 0)
            if stale > end:                                     # stale values past the end (a rollback): exact zeros
                vt[:, :, end: min(width_max, stale)] = 0        # (see _attend)
            for i0, i1, width, mask in groups:
                self._attend(qg[i0:i1], kc[:, :width], vt[:, :, :width], mask,
                             att[i0:i1].reshape(i1 - i0, nkv, rep, hd))
            self._matvec(L["wo"], att, proj)
            x = x + proj
            xn = self._rmsnorm(x, L["ffn_norm"])                                # (n, dim)
            self._matvec(L["w13"], xn, ffh)
            g = ffh[:, : c.hidden_dim]                                          # (n, hidden)
            u = ffh[:, c.hidden_dim:]                                           # (n, hidden)
            hact = np.ascontiguousarray((g / (np.float32(1.0) + _exp32(-g))) * u)   # (n, hidden)
            self._matvec(L["w2"], hact, proj)
            x = x + proj
        self._length = end
        self._written = end if stale <= width_max else stale    # every layer wrote start..end, zeroed end..width_max
        if self._feat is not None:
            self._feat[start_pos: end] = x
        xn = self._rmsnorm(x[n - n_out:], self.out_norm)                        # (n_out, dim)
        logits = np.empty((n_out, c.vocab_size), np.float32)                    # (n_out, vocab)
        self._matvec(self._head, xn, logits)
        if features:
            return logits, np.ascontiguousarray(x[n - n_out:])                   # (n_out, dim)
        return logits

    def memory(self) -> dict:
        """Bytes this model holds in numpy arrays (exactspec.memory(), the bench matrix): weights (float32 as
        multiplied; a tied head and shared arrays counted once), the KV cache as allocated (it grows in whole
        attention buckets and never shrinks, so this is also its peak), the kept features, scratch (rope tables)."""
        seen, weights = set(), 0
        arrays = [self.embed, self.out_norm, self._head]
        for L in self.layers:
            arrays += list(L.values())
        for a in arrays:
            a = a.w if isinstance(a, _RowBlocks) else a                      # (_Packed: in this heap or the pool's)
            if a is not None and id(a) not in seen:
                seen.add(id(a))
                weights += a.nbytes
        kv = sum(a.nbytes for a in self._k) + sum(a.nbytes for a in self._vt)
        feat = 0 if self._feat is None else self._feat.nbytes
        scratch = self._cos.nbytes + self._sin.nbytes
        return {"weights": int(weights), "kv": int(kv), "features": int(feat), "scratch": int(scratch),
                "total": int(weights + kv + feat + scratch), "kv_positions": int(self._cap)}

    def feature_rows(self, start: int, stop: int) -> np.ndarray:
        """(stop - start, dim) float32: the final hidden states kept (keep_features) for positions start..stop-1,
        all below `length`."""
        if self._feat is None:
            raise ValueError("this model does not keep its features (keep_features=False)")
        if not 0 <= start <= stop <= self._length:
            raise ValueError(f"feature rows {start}..{stop} outside the {self._length} positions held")
        return self._feat[start:stop]

    @staticmethod
    def _attend(q: np.ndarray, k: np.ndarray, vt: np.ndarray, mask: np.ndarray, out: np.ndarray) -> None:
        """Causal softmax attention of g query rows whose positions share one bucket of `width` keys.

        q (g, n_kv, rep, head_dim) scaled queries; k (n_kv, width, head_dim); vt (n_kv, head_dim, width);
        mask (g, 1, 1, width): 0 for the row's own prefix, -inf after it; out (g, n_kv, rep, head_dim).
        Every reduction runs over exactly `width` values in an order fixed by width alone: per-output einsum dot
        products (numpy's contiguous sum_of_products kernel) and per-row reductions over the last axis. A masked key
        adds exp(-inf) = 0 to the softmax sum and 0 * v = 0 to the output (vt past the cache's end is zeroed, so
        stale values cannot even change the sign of a zero), so a row's bits depend on its position and its prefix
        only, never on the other rows."""
        s = np.einsum("gkrd,ktd->gkrt", q, k)                                  # (g, n_kv, rep, width)
        s += mask
        s -= s.max(axis=-1, keepdims=True)
        s[...] = _exp32(s)
        s /= s.sum(axis=-1, keepdims=True)
        np.einsum("gkrt,kdt->gkrd", s, vt, out=out)

    # -- the batched step (exactspec.backend): the same passes one after another, with the same meaning ----------
    ahead_max = 0   # decode_ahead gains nothing on a CPU (no round trips to save): the decode loop leaves it unused

    def decode_ahead(self, token: int, start_pos: int, n: int, pick, rows: bool = True, then: int = 0, stop=()):
        from .backend import decode_ahead_by_forwards
        return decode_ahead_by_forwards(self, token, start_pos, n, pick, rows, then=then, stop=stop)

    def spec_round(self, draft, feed, draft_start: int, k: int, token: int, start_pos: int, pick, rows: bool = True,
                   copy=()):
        from .backend import spec_round_by_forwards
        return spec_round_by_forwards(self, draft, feed, draft_start, k, token, start_pos, pick, rows, copy=copy)

    def verify(self, tokens, start_pos: int, pick, rows: bool = False):
        from .backend import verify_by_forwards
        return verify_by_forwards(self, tokens, start_pos, pick, rows)

    def ngram_chain(self, seq, start_pos: int, rounds: int, k: int, pick, min_ngram: int, max_ngram: int, then=0,
                    stop=()):
        from .backend import ngram_chain_by_forwards
        return ngram_chain_by_forwards(self, seq, start_pos, rounds, k, pick, min_ngram, max_ngram)

    def spec_chain(self, draft, seq, draft_start: int, rounds: int, k: int, pick, restart: bool = False, then=0,
                   stop=(), copy=None):
        from .backend import spec_chain_by_forwards
        return spec_chain_by_forwards(self, draft, seq, draft_start, rounds, k, pick, restart, copy=copy)
