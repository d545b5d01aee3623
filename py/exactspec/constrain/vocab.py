"""A model's vocabulary as the constraint engine sees it: each token's bytes, a trie to walk, string-lexer tables.

    vocab = TokenVocab.from_tokenizer(tokenizer, vocab_size)       # once per champion (a few hundred ms)

- The trie is the byte-sorted token list itself: a node is a range of tokens sharing a prefix; its children are
  found by bisection and memoised as they are visited (no dict-of-dicts for 49k tokens).
- For string bodies (where nearly every token is allowed) the engine does not walk: `lex(d)` runs every token
  through the string lexer from lexer state d at once (numpy over the (vocab, max_len) byte matrix) and records
  where each token ends up: still inside the string (lexer state, characters added) or closing it at byte j (the
  rest of the token, grouped by its bytes, then goes through the grammar).
"""
from __future__ import annotations

from bisect import bisect_left

import numpy as np

from .grammar import DEAD, EXIT, INC, LEX


class TokenVocab:
    """token_bytes: (vocab_size,) bytes, or None for tokens that are never text (special tokens, padding ids).
    eos_ids: the tokens that end an answer. encode(text) -> ids: the tokenizer, for proposing forced text the way
    the model writes it (None: longest match over the vocabulary)."""

    def __init__(self, token_bytes, eos_ids=(), encode=None):
        self.vocab_size = len(token_bytes)
        self.token_bytes = [b if b else None for b in token_bytes]          # (vocab_size,)
        self.eos_ids = sorted(set(int(e) for e in eos_ids if 0 <= int(e) < self.vocab_size))
        self.encode = encode
        text_ids = [i for i, b in enumerate(self.token_bytes) if b is not None]
        text_ids.sort(key=lambda i: self.token_bytes[i])
        self.sorted_ids = text_ids                                           # (n_text,) ids in byte order
        self.sorted_bytes = [self.token_bytes[i] for i in text_ids]          # (n_text,)
        self.single = {b[0]: i for i, b in enumerate(self.token_bytes) if b is not None and len(b) == 1}
        self._children: dict = {}
        lens = np.array([len(b) if b is not None else 0 for b in self.token_bytes], dtype=np.int64)  # (vocab,)
        self.max_len = int(lens.max()) if lens.size else 0
        # tokens ordered by length (descending): at byte position j the tokens still running are a prefix
        self._by_len = np.argsort(-lens, kind="stable")                      # (vocab,)
        self._lens_sorted = lens[self._by_len]                               # (vocab,)
        mat = np.zeros((self.vocab_size, max(1, self.max_len)), dtype=np.uint8)   # (vocab, max_len)
        blob = np.frombuffer(b"".join(b for b in self.token_bytes if b is not None), dtype=np.uint8)  # (total,)
        reps = lens.astype(np.intp)                                            # repeat counts: intp (32-bit in wasm)
        rows = np.repeat(np.arange(self.vocab_size), reps)                     # (total,) token of each byte
        cols = np.arange(blob.size) - np.repeat(np.cumsum(lens) - lens, reps)  # (total,) its place in the token
        mat[rows, cols] = blob
        self._mat_sorted = np.ascontiguousarray(mat[self._by_len])           # (vocab, max_len) in _by_len order
        self.lens = lens
        self._lex: dict = {}
        self._lex_tab = np.array(LEX, dtype=np.int8)                         # (N_LEX, 256)
        self._inc_tab = np.array(INC, dtype=np.int16)                        # (N_LEX, 256)

    @classmethod
    def from_tokenizer(cls, tokenizer, vocab_size: int | None = None) -> "TokenVocab":
        """Special tokens are not text; ids past the tokenizer's vocabulary (padding rows of the model) are None."""
        n = tokenizer.vocab_size if vocab_size is None else int(vocab_size)
        special = set(getattr(tokenizer, "special_ids", ()))
        tb = [None if (i in special or i >= tokenizer.vocab_size) else tokenizer.token_bytes(i) for i in range(n)]

        def encode(text: str):
            return tokenizer.encode(text, allow_special=False)
        return cls(tb, getattr(tokenizer, "eos_ids", ()), encode)

    # ---- the trie -------------------------------------------------------------------------------------------
    def root(self) -> tuple:
        return (0, len(self.sorted_bytes), 0)

    def node(self, lo: int, hi: int, depth: int):
        """(ids ending here, [(byte, child node), ...]) of the trie node over sorted tokens [lo, hi) at `depth`."""
        key = (lo, hi, depth)
        got = self._children.get(key)
        if got is not None:
            return got
        sb = self.sorted_bytes
        i = lo
        ends = []
        while i < hi and len(sb[i]) == depth:
            ends.append(self.sorted_ids[i])
            i += 1
        kids = []
        while i < hi:
            b = sb[i][depth]
            j = hi if b == 255 else bisect_left(sb, sb[i][:depth] + bytes((b + 1,)), i, hi)
            kids.append((b, (i, j, depth + 1)))
            i = j
        got = (ends, kids)
        self._children[key] = got
        return got

    def longest_match(self, data: bytes) -> list[int] | None:
        """Greedy longest-match token ids spelling `data` (None if some byte has no token)."""
        out = []
        pos = 0
        while pos < len(data):
            lo, hi, depth = self.root()
            best = None
            while True:
                ends, kids = self.node(lo, hi, depth)
                if ends and depth > 0:
                    best = (ends[0], depth)
                if pos + depth >= len(data):
                    break
                nxt = next((c for b, c in kids if b == data[pos + depth]), None)
                if nxt is None:
                    break
                lo, hi, depth = nxt
            if best is None:
                return None
            out.append(best[0])
            pos += best[1]
        return out

    # ---- string bodies, all tokens at once ---------------------------------------------------------------------
    def lex(self, d: int):
        """Every token run through the string lexer from lexer state d.

        Returns (end, nchars, exits): end (vocab,) int8 = the lexer state after the whole token, or EXIT / DEAD;
        nchars (vocab,) int16 = characters added before the token ended or closed the string; exits = [(rest, ids,
        nchars)], the tokens that close the string, grouped by the bytes after the closing quote."""
        got = self._lex.get(d)
        if got is not None:
            return got
        V = self.vocab_size
        lex, inc = self._lex_tab, self._inc_tab
        state = np.full(V, d, dtype=np.int8)                  # (vocab,) in _by_len order
        chars = np.zeros(V, dtype=np.int16)                   # (vocab,)
        exit_at = np.full(V, -1, dtype=np.int16)              # (vocab,)
        n_running = V
        for j in range(self.max_len):
            while n_running and self._lens_sorted[n_running - 1] <= j:
                n_running -= 1
            if not n_running:
                break
            s = state[:n_running]
            live = s >= 0
            if not live.any():
                continue
            col = self._mat_sorted[:n_running, j]
            idx = np.nonzero(live)[0]
            sd, cb = s[idx].astype(np.int64), col[idx].astype(np.int64)
            nd = lex[sd, cb]
            chars[idx] += inc[sd, cb]
            state[idx] = nd
            closed = idx[nd == EXIT]
            exit_at[closed] = j
        end = np.empty(V, dtype=np.int8)
        nch = np.empty(V, dtype=np.int16)
        ex = np.empty(V, dtype=np.int16)
        end[self._by_len] = state
        nch[self._by_len] = chars
        ex[self._by_len] = exit_at
        empty = self.lens == 0
        end[empty] = DEAD                                     # special tokens are never text
        groups: dict[bytes, list[int]] = {}
        for i in np.nonzero(end == EXIT)[0].tolist():
            groups.setdefault(self.token_bytes[i][int(ex[i]) + 1:], []).append(i)
        exits = [(rest, np.array(ids, dtype=np.int64), nch[np.array(ids, dtype=np.int64)])
                 for rest, ids in sorted(groups.items())]
        got = (end, nch, exits)
        self._lex[d] = got
        return got


__all__ = ["TokenVocab", "DEAD", "EXIT"]
