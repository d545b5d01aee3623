"""The ONLY module that touches the browser (`js` / `pyodide`): adapters between JS objects and the Python core.

JsBackend wraps any JS model object into the Backend protocol of exactspec.backend:
    js model: {config: {dim, hidden_dim, ...}, length: number,
               forward(tokens: Int32Array, start_pos, n_out) -> Promise<Float32Array (n_out * vocab_size)>
                                                              | Float32Array,
               truncate(n),
               optional, the batched step (see exactspec.backend):
               aheadMax: number,
               decodeAhead(token, start_pos, n, pick: {temperature, seed}, rows: bool, then: number,
                           stop: Int32Array)
                   -> Promise<{ids: Int32Array (n), rows: Float32Array (n * vocab) | null}>,
               specRound(draftJsModel, feed: Int32Array, draft_start, k, token, start_pos, pick, rows: bool)
                   -> Promise<{proposals: Int32Array (k), ids: Int32Array (k + 1),
                               rows: Float32Array ((k + 1) * vocab) | null}>,
               chainRounds: number, chainMaxK: number,
               ngramChain(seq: Int32Array, start_pos, rounds, k, pick, ngram: [min, max], then: number,
                          stop: Int32Array)
                   -> Promise<{counts: Int32Array (rounds), accepted: Int32Array (rounds),
                               proposals: Int32Array (sum counts), ids: Int32Array (sum counts + rounds)}>}
forward returns an awaitable; exactspec.decode.generate_async awaits it, so the worker's event loop runs while the
GPU works. JsHead wraps a draft head on the device (app/gpu/head.js) the same way, with what the session needs of a
head (head_config, bind). Imports of `pyodide` happen inside functions so that CPython can import this module (tests use fakes).
"""
from __future__ import annotations

import inspect

import numpy as np

from .backend import ModelConfig, offered_count, with_copy

_CONFIG_FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "seq_len",
                  "rope_theta", "rope_dim", "norm_eps", "tied_embeddings", "arch")


def _to_py(obj):
    """JsProxy -> Python (dict/list/memoryview); plain Python values pass through."""
    to_py = getattr(obj, "to_py", None)
    if to_py is not None:
        return to_py()
    return obj


def _to_js_int32(tokens) -> object:
    arr = np.ascontiguousarray(np.asarray(tokens, dtype=np.int32))   # (n,)
    try:
        from pyodide.ffi import to_js
    except ImportError:            # CPython (tests): the fake JS object takes numpy
        return arr
    return to_js(arr)             # Int32Array copy of the buffer


def logits_from_js(result, n_out: int, vocab: int) -> np.ndarray:
    """A JS Float32Array (or any buffer / sequence) -> float32 (n_out, vocab)."""
    mv = getattr(result, "to_memoryview", None)
    if mv is not None:
        arr = np.frombuffer(mv(), dtype=np.float32)
    else:
        arr = np.asarray(_to_py(result), dtype=np.float32)
    if arr.size != n_out * vocab:
        raise ValueError(f"JS backend returned {arr.size} logits, expected {n_out} x {vocab} = {n_out * vocab}")
    return arr.reshape(n_out, vocab).copy()                          # (n_out, vocab) owned by Python


def config_from_js(cfg) -> ModelConfig:
    d = _to_py(cfg)
    if not isinstance(d, dict):
        d = {k: getattr(cfg, k) for k in _CONFIG_FIELDS if hasattr(cfg, k)}
    missing = [k for k in _CONFIG_FIELDS[:8] if k not in d]
    if missing:
        raise ValueError(f"JS model config lacks {', '.join(missing)}")
    return ModelConfig(**{k: d[k] for k in _CONFIG_FIELDS if k in d})


def _ids_from_js(arr, n: int, what: str) -> list:
    mv = getattr(arr, "to_memoryview", None)
    a = np.frombuffer(mv(), dtype=np.int32) if mv is not None else np.asarray(_to_py(arr), dtype=np.int32)
    if a.size != n:
        raise ValueError(f"JS backend returned {a.size} {what}, expected {n}")
    return [int(x) for x in a]


def _pick_to_js(pick):
    d = {"temperature": float(pick.temperature), "seed": int(pick.seed)}
    try:
        from pyodide.ffi import to_js
        from js import Object
    except ImportError:            # CPython (tests): fakes take a dict
        return d
    return to_js(d, dict_converter=Object.fromEntries)


def _get(obj, key):
    v = getattr(obj, key, None)
    if v is None and isinstance(obj, dict):
        v = obj.get(key)
    return v


class _JsBatched:
    """JsBackend's batched step (exactspec.backend), over the JS model's decodeAhead / specRound / verify."""

    @property
    def ahead_max(self) -> int:
        return offered_count(self._js, "aheadMax", self.offers("decode_ahead"))

    def offers(self, method: str) -> bool:
        name = {"decode_ahead": "decodeAhead", "spec_round": "specRound", "verify": "verify",
                "ngram_chain": "ngramChain", "spec_chain": "specChain"}.get(method)
        return name is not None and getattr(self._js, name, None) is not None

    @property
    def chain_rounds(self) -> int:
        return offered_count(self._js, "chainRounds", self.offers("ngram_chain"))

    @property
    def chain_k_max(self) -> int:
        return offered_count(self._js, "chainMaxK", self.offers("ngram_chain"))

    def _check_start(self, what: str, start_pos: int) -> None:
        if start_pos != self.length:
            raise ValueError(f"{what} at start_pos {start_pos} but the KV cache holds {self.length} positions")

    def _ahead(self, pending, n: int, rows: bool):
        """Ahead(ids (n,), rows (n, vocab) | None) from a JS call's {ids, rows} (decodeAhead, verify)."""
        from .backend import Ahead
        vocab = self.config.vocab_size

        async def finish():
            r = await pending if inspect.isawaitable(pending) else pending
            ids = _ids_from_js(_get(r, "ids"), n, "ids")
            return Ahead(ids, logits_from_js(_get(r, "rows"), n, vocab) if rows else None)   # rows (n, vocab)
        return finish()

    def decode_ahead(self, token, start_pos, n, pick, rows=True, then=0, stop=()):
        self._check_start("decode_ahead", start_pos)
        return self._ahead(self._js.decodeAhead(int(token), int(start_pos), int(n), _pick_to_js(pick), bool(rows),
                                                int(then), _to_js_int32(list(stop))), n, rows)

    def spec_round(self, draft, feed, draft_start, k, token, start_pos, pick, rows=True, copy=()):
        from .backend import Round
        if not isinstance(draft, JsBackend):
            raise TypeError("spec_round needs a draft on the same device (a JsBackend)")
        self._check_start("spec_round", start_pos)
        vocab = self.config.vocab_size
        pending = self._js.specRound(draft._js, _to_js_int32(feed), int(draft_start), int(k), int(token),
                                     int(start_pos), _pick_to_js(pick), bool(rows),
                                     _to_js_int32(list(copy)) if len(copy) else None)   # (none: no array a round)

        async def finish():
            r = await pending if inspect.isawaitable(pending) else pending
            picks = _ids_from_js(_get(r, "proposals"), k, "proposals")            # the draft's picks
            props = with_copy(copy, picks)
            ids = _ids_from_js(_get(r, "ids"), k + 1, "ids")
            rr = _get(r, "rows")
            return Round(props, ids, logits_from_js(rr, k + 1, vocab) if rows else None,   # rows (k+1, vocab)
                         picks if len(copy) else None)
        return finish()

    def verify(self, tokens, start_pos, pick, rows=False):
        self._check_start("verify", start_pos)
        return self._ahead(self._js.verify(_to_js_int32(tokens), int(start_pos), _pick_to_js(pick), bool(rows)),
                           len(tokens), rows)

    def ngram_chain(self, seq, start_pos, rounds, k, pick, min_ngram, max_ngram, then=0, stop=()):
        self._check_start("ngram_chain", start_pos)
        return self._chain(self._js.ngramChain(_to_js_int32(seq), int(start_pos), int(rounds), int(k),
                                               _pick_to_js(pick), _to_js_int32([int(min_ngram), int(max_ngram)]),
                                               int(then), _to_js_int32(list(stop))), rounds, k, "ngram_chain")

    def _chain(self, pending, rounds: int, k: int, what: str):
        """Chain from a JS chain call's {counts, accepted, proposals, ids} (ngramChain, specChain), checked."""
        from .backend import chain_from_flat

        async def finish():
            r = await pending if inspect.isawaitable(pending) else pending
            counts = _ids_from_js(_get(r, "counts"), rounds, "counts")
            accepted = _ids_from_js(_get(r, "accepted"), rounds, "accepted")
            props = _ids_from_js(_get(r, "proposals"), sum(counts), "proposals")
            ids = _ids_from_js(_get(r, "ids"), sum(counts) + rounds, "ids")
            return chain_from_flat(counts, accepted, props, ids, k, what)
        return finish()

    def spec_chain(self, draft, seq, draft_start, rounds, k, pick, restart=False, then=0, stop=(), copy=None):
        if not isinstance(draft, JsBackend):
            raise TypeError("spec_chain needs a draft on the same device (a JsBackend)")
        self._check_start("spec_chain", len(seq) - 1)
        return self._chain(self._js.specChain(draft._js, _to_js_int32(seq), int(draft_start), int(rounds), int(k),
                                              _pick_to_js(pick), bool(restart), int(then), _to_js_int32(list(stop)),
                                              _to_js_int32([int(x) for x in copy]) if copy else None),
                           rounds, k, "spec_chain")


def json_to_js(text: str):
    """A JSON string -> a JS object (for handing describe() output to the engine)."""
    from js import JSON
    return JSON.parse(text)


class JsBackend(_JsBatched):
    """Backend protocol over a JS model object (the WebGPU engine, or anything shaped like it)."""

    def __init__(self, js_model, config: ModelConfig | None = None):
        self._js = js_model
        self.config = config if config is not None else config_from_js(js_model.config)

    @property
    def length(self) -> int:
        return int(self._js.length)

    def truncate(self, n: int) -> None:
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate({n}) outside [0, {self.length}]")
        self._js.truncate(int(n))

    def forward(self, tokens, start_pos: int, n_out: int | None = None):
        n = len(tokens)
        if start_pos != self.length:
            raise ValueError(f"forward at start_pos {start_pos} but the KV cache holds {self.length} positions")
        n_out = n if n_out is None else int(n_out)
        if not 1 <= n_out <= n:
            raise ValueError(f"n_out {n_out} must be in [1, {n}]")
        vocab = self.config.vocab_size
        pending = self._js.forward(_to_js_int32(tokens), int(start_pos), n_out)

        async def finish():
            r = await pending if inspect.isawaitable(pending) else pending
            return logits_from_js(r, n_out, vocab)                   # (n_out, vocab)
        return finish()


class JsHead(JsBackend):
    """A draft head on the device (app/gpu/head.js, engine.loadHead) as the session's head backend: the Backend
    protocol (forward, truncate, length) over the JS head, the draft of the champion's spec_round (its k passes run
    on the GPU inside the round's submission), and what the session asks of a head: `head_config`, `source` (the
    champion backend whose features it reads) and `bind(champion)`.

    js head: the JS model interface above plus headConfig (HeadConfig fields) and bind(jsChampion)."""

    device = True                   # the session re-computes the champion's cache when it binds one (features)

    def __init__(self, js_head, head_config=None, champion=None):
        super().__init__(js_head)
        if head_config is None:
            from dataclasses import fields
            from .drafters.head import HeadConfig
            d = _to_py(js_head.headConfig)
            if not isinstance(d, dict):
                d = {f.name: getattr(js_head.headConfig, f.name) for f in fields(HeadConfig)
                     if hasattr(js_head.headConfig, f.name)}
            names = {f.name for f in fields(HeadConfig)}
            head_config = HeadConfig(**{k: v for k, v in d.items() if k in names})
        self.head_config = head_config
        self.source = champion      # the champion backend (JsBackend) it reads; None until bound

    def offers(self, method: str) -> bool:
        return False                # a draft: neither decode_ahead nor spec_round of its own

    @property
    def ahead_max(self) -> int:
        return 0

    def bind(self, champion) -> None:
        """Read the features of `champion` (a JsBackend on the same device) from now on; forgets the head's KV."""
        from .drafters.head import HeadError, check_champion
        if not isinstance(champion, JsBackend) or isinstance(champion, JsHead):
            raise HeadError("this draft head runs on the GPU and reads the features of a champion on the GPU: the "
                            "champion is not there (load the head again to run it on the CPU)")
        check_champion(self.head_config, champion.config, None)
        if champion is not self.source:
            self._js.bind(champion._js)
            self.source = champion
        self.truncate(0)
