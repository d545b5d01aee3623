"""KV transactions: remember which tokens a backend's cache holds, so rollback and reuse are exact.

A `TrackedCache` wraps any Backend. It records the token at every cached position; `truncate` is the backend's O(1)
logical rollback. Between chat turns the session keeps the TrackedCache, and the next generate reuses the longest
common prefix of the cache and the new prompt instead of prefilling the whole conversation again. Reuse is exact
because the backends are batch-invariant: a position's logits do not depend on how the prefix was chunked.
"""
from __future__ import annotations

import inspect
from typing import Sequence

from .backend import PassThrough


class TrackedCache(PassThrough):
    def __init__(self, backend):
        if isinstance(backend, TrackedCache):
            raise TypeError("already tracked")
        self.backend = backend
        self.config = backend.config
        self.tokens: list[int] = []  # (length,) token at each cached position

    @property
    def length(self) -> int:
        return self.backend.length

    def forward(self, tokens: Sequence[int], start_pos: int, n_out: int | None = None):
        toks = [int(t) for t in tokens]
        res = self.backend.forward(toks, start_pos, n_out)
        if inspect.isawaitable(res):           # (a synchronous backend's forward stays synchronous)
            async def done():
                out = await self._call(res)
                self._record(start_pos, toks)
                return out
            return done()
        self._record(start_pos, toks)
        return res

    def truncate(self, n: int) -> None:
        self.backend.truncate(n)
        del self.tokens[n:]

    # -- the batched step (exactspec.backend): offered when the wrapped backend offers it (PassThrough: ahead_max,
    # k_limit, offers) -----------------------------------------------------------------------------------------------
    @property
    def wrapped(self):
        return self.backend

    async def _call(self, res):
        """Await a backend call's result; a failure leaves the cache unknown, so forget it."""
        try:
            return (await res) if inspect.isawaitable(res) else res
        except Exception:
            self.invalidate()
            raise

    def _record(self, start_pos: int, toks) -> None:
        """The cache now holds `toks` from start_pos on."""
        del self.tokens[start_pos:]
        self.tokens.extend(int(t) for t in toks)

    async def decode_ahead(self, token: int, start_pos: int, n: int, pick, rows: bool = True, then: int = 0,
                           stop=()):
        res = await self._call(self.backend.decode_ahead(int(token), start_pos, n, pick, rows, then=then, stop=stop))
        self._record(start_pos, [token] + list(res.ids[: n - 1]))               # what the passes were fed
        return res

    async def _with_draft(self, draft, call):
        """call(the backend under `draft`): a batched call of this backend that also runs the draft; if it fails, both
        caches are forgotten."""
        try:
            res = call(draft.backend if isinstance(draft, TrackedCache) else draft)
            if inspect.isawaitable(res):
                res = await res
        except Exception:
            self.invalidate()
            if isinstance(draft, TrackedCache):
                draft.invalidate()
            raise
        return res

    async def spec_round(self, draft, feed, draft_start: int, k: int, token: int, start_pos: int, pick,
                         rows: bool = True, copy=()):
        res = await self._with_draft(draft, lambda d: self.backend.spec_round(d, feed, draft_start, k, int(token),
                                                                              start_pos, pick, rows, copy=copy))
        props = [int(x) for x in res.proposals]
        self._record(start_pos, [token] + props)
        if isinstance(draft, TrackedCache):       # (the draft was fed its own picks, which copies may replace)
            fed = res.proposals if res.draft_picks is None else res.draft_picks
            draft._record(draft_start, list(feed) + [int(x) for x in fed][: k - 1])
        return res

    async def verify(self, tokens: Sequence[int], start_pos: int, pick, rows: bool = False):
        toks = [int(t) for t in tokens]
        res = await self._call(self.backend.verify(toks, start_pos, pick, rows))
        self._record(start_pos, toks)
        return res

    async def ngram_chain(self, seq: Sequence[int], start_pos: int, rounds: int, k: int, pick, min_ngram: int,
                          max_ngram: int, then: int = 0, stop=()):
        toks = [int(t) for t in seq]
        res = await self._call(self.backend.ngram_chain(toks, start_pos, rounds, k, pick, min_ngram, max_ngram,
                                                        then=then, stop=stop))
        self._record(start_pos, [toks[start_pos]] + res.appended()[:-1])   # what the rounds' kept rows were fed
        return res

    async def spec_chain(self, draft, seq: Sequence[int], draft_start: int, rounds: int, k: int, pick,
                         restart: bool = False, then: int = 0, stop=(), copy=None):
        toks = [int(t) for t in seq]
        start_pos = len(toks) - 1
        res = await self._with_draft(draft, lambda d: self.backend.spec_chain(d, toks, draft_start, rounds, k, pick,
                                                                              restart, then=then, stop=stop,
                                                                              copy=copy))
        grown = toks + res.appended()
        self._record(start_pos, grown[start_pos:-1])                 # what the rounds' kept rows were fed
        if isinstance(draft, TrackedCache):
            draft._record(draft_start, grown[draft_start:draft.backend.length])   # the draft keeps committed tokens
        return res

    def invalidate(self) -> None:
        """Forget what the cache holds (after a fault): the next use prefills from scratch."""
        self.tokens = []
        try:
            self.backend.truncate(0)
        except Exception:
            pass

    def common_prefix(self, seq: Sequence[int]) -> int:
        n = min(len(self.tokens), self.backend.length, len(seq))
        i = 0
        while i < n and self.tokens[i] == seq[i]:
            i += 1
        return i


def track(backend):
    """Wrap a backend (or return an existing TrackedCache unchanged)."""
    if backend is None or isinstance(backend, TrackedCache):
        return backend
    return TrackedCache(backend)
