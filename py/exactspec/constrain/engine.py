"""Token masks of a grammar over a vocabulary, cached per grammar state, and the grammar's forced continuations.

    c = Constraint(Grammar(spec), vocab)
    m = c.mask(state, budget)         # (vocab,) bool: tokens whose bytes can continue a valid document
    ok = c.allows(state, t, budget)   # m[t], without computing m (allowed_step: the state after t, or None)
    state = c.advance(state, token)   # None if the token cannot
    ids = c.forced(state)             # the tokens of the only byte string the grammar admits next (may be [])

What a mask means: token t is allowed at `state` iff every byte of t is accepted by the grammar from `state` and the
document can still be completed within the token budget: min_bytes(state after t) <= budget - 1 (each byte of a
shortest completion is a token of its own in a byte-level vocabulary, which the constructor checks). EOS ids are
allowed exactly where the document is complete. With budget None only the grammar counts.

How a mask is computed (once per state; states repeat, so an answer mostly hits the cache):
- `cost(state)` (vocab,) int16 = min_bytes after each token (NO where the token is refused); the mask for any budget
  is then one comparison.
- a state inside a string body: the vocabulary's lexer tables (vocab.lex) say for every token at once whether it
  stays inside the string and with how many characters, or closes it; the bytes after a closing quote, grouped, go
  through the grammar from the enclosing state (a few hundred short walks, cached per enclosing state).
- any other state: a walk of the token trie, pruned at the first byte the grammar refuses.
"""
from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from .grammar import LIT, OBJ, PENDING, S0, STR, Grammar
from .schema import SchemaError
from .vocab import TokenVocab

NO = 32767            # cost of a refused token
CAP = 32766           # costs are clipped here (budgets are at most a few thousand tokens)
_PENDING = np.array(list(PENDING) + [0, 0], dtype=np.int32)    # indexed by lexer state; EXIT/DEAD (-1, -2) -> 0
MAX_FORCED_BYTES = 256


class Constraint:
    """Masks, transitions and forced continuations of `grammar` over `vocab` (one per schema and champion)."""

    def __init__(self, grammar: Grammar, vocab: TokenVocab, cache_size: int = 256):
        self.grammar = grammar
        self.vocab = vocab
        self.start = grammar.start
        self.cache_size = cache_size
        self._cost: OrderedDict = OrderedDict()      # state -> (vocab,) int16, or (ids, costs) when few are allowed
        self._exits: dict = {}                       # (enclosing state, lexer state) -> [(ids, nchars, cost)]
        self._forced: dict = {}                      # state -> [ids]
        self.seconds = 0.0          # time spent in this object (masks, steps, forced runs; cache hits included)
        self._check_vocab()

    def _check_vocab(self) -> None:
        """Every byte a shortest completion may need must be a token of its own (see the module docstring)."""
        g = self.grammar
        need = set(b'{}[],:" -.eE+0123456789abcdefABCDEF\\/trulsn') | set(range(0x80, 0xC0))
        for n, k in enumerate(g.kind):
            if k == LIT:
                for lit in g.data[n][0]:
                    need.update(lit)
            elif k == OBJ:
                for key in g.data[n][0]:
                    need.update(key)
        missing = sorted(b for b in need if b not in self.vocab.single)
        if missing:
            raise SchemaError("the model's vocabulary has no single-byte token for "
                              + ", ".join(f"0x{b:02x}" for b in missing[:8])
                              + ": JSON mode cannot guarantee a complete answer with it")

    # ---- masks ------------------------------------------------------------------------------------------------
    def cost(self, state: tuple) -> np.ndarray:
        """(vocab,) int16: shortest completion (bytes) after each token, NO where the grammar refuses it."""
        t0 = time.perf_counter()
        c = self._row(state)
        self.seconds += time.perf_counter() - t0
        return c

    def _row(self, state: tuple) -> np.ndarray:
        """cost(state), untimed (the public methods time themselves, cache hits included)."""
        c = self._cost.get(state)
        if c is not None:
            self._cost.move_to_end(state)
            if isinstance(c, tuple):                 # stored sparse: (ids, costs) of the allowed tokens
                dense = np.full(self.vocab.vocab_size, NO, dtype=np.int16)   # (vocab,)
                dense[c[0]] = c[1]
                dense.setflags(write=False)
                return dense
            return c
        top = state[-1] if state else None
        if top is not None and self.grammar.kind[top[0]] == STR and top[1] == 1:
            c = self._string_cost(state)
        else:
            c = self._walk_cost(state)
        if self.vocab.eos_ids:
            c[self.vocab.eos_ids] = 0 if self.grammar.accepting(state) else NO
        c.setflags(write=False)
        ids = np.flatnonzero(c < NO)
        # most states outside strings allow a few tokens: keep those (a dense row is 2 bytes per vocabulary entry)
        self._cost[state] = (ids.astype(np.int32), c[ids]) if ids.size * 3 < c.size else c
        if len(self._cost) > self.cache_size:
            self._cost.popitem(last=False)
        return c

    def mask(self, state: tuple, budget: int | None = None) -> np.ndarray:
        """(vocab,) bool: the tokens allowed at `state` when `budget` tokens at most may still be emitted
        (counting this one; None: no limit)."""
        t0 = time.perf_counter()
        c = self._row(state)
        m = (c < NO) if budget is None or budget > CAP else (c <= budget - 1)
        self.seconds += time.perf_counter() - t0
        return m

    def allows(self, state: tuple, token: int, budget: int | None = None) -> bool:
        """mask(state, budget)[token], without the mask (allowed_step)."""
        return self.allowed_step(state, token, budget) is not None

    def allowed_step(self, state: tuple, token: int, budget: int | None = None):
        """advance(state, token) where mask(state, budget)[token], else None, without the mask: the token's bytes
        walked through the grammar (a device's pick is checked so, and the whole mask is computed only where it is
        refused)."""
        t0 = time.perf_counter()
        g, vocab = self.grammar, self.vocab
        tb = vocab.token_bytes[token] if 0 <= token < vocab.vocab_size else None
        if token in vocab.eos_ids:
            out = state if g.accepting(state) and (budget is None or budget >= 1) else None
        elif tb is None:
            out = None
        else:
            out = g.walk(state, tb)
            if out is not None and not (budget is None or budget > CAP or min(g.min_bytes(out), CAP) <= budget - 1):
                out = None
        self.seconds += time.perf_counter() - t0
        return out

    def _walk_cost(self, state: tuple) -> np.ndarray:
        g, vocab = self.grammar, self.vocab
        cost = np.full(vocab.vocab_size, NO, dtype=np.int16)       # (vocab,)
        step, min_bytes, node = g.step, g.min_bytes, vocab.node

        def visit(st, lo, hi, depth):
            ends, kids = node(lo, hi, depth)
            if ends and depth:
                cost[ends] = min(min_bytes(st), CAP)
            for b, (clo, chi, cd) in kids:
                s2 = step(st, b)
                if s2 is not None:
                    visit(s2, clo, chi, cd)
        visit(state, *vocab.root())
        return cost

    def _string_cost(self, state: tuple) -> np.ndarray:
        g, vocab = self.grammar, self.vocab
        n, _ph, d, count = state[-1]
        lo, hi = g.data[n]
        end, nch, _exits = vocab.lex(d)
        parent = state[:-1]
        total = count + nch.astype(np.int32)                           # (vocab,) characters after the token
        inside = end >= 0
        if hi is not None:
            inside &= total <= hi
        # still inside: finish the character in progress, reach minLength, close the quote, finish the parent
        need = g.min_bytes(parent) + 1 + _PENDING[end] + np.maximum(0, lo - total)
        cost = np.where(inside, np.minimum(need, CAP), NO).astype(np.int16)    # (vocab,)
        for ids, nchars, c in self._string_exits(parent, d):
            t = count + nchars.astype(np.int32)
            ok = t >= lo
            if hi is not None:
                ok &= t <= hi
            cost[ids[ok]] = c
        return cost

    def _string_exits(self, parent: tuple, d: int):
        """The token groups that close the string and whose remaining bytes the enclosing state accepts."""
        key = (parent, d)
        got = self._exits.get(key)
        if got is None:
            g = self.grammar
            got = []
            for rest, ids, nchars in self.vocab.lex(d)[2]:
                s = g.walk(parent, rest)
                if s is not None:
                    got.append((ids, nchars, min(g.min_bytes(s), CAP)))
            if len(self._exits) > 4 * self.cache_size:
                self._exits.clear()
            self._exits[key] = got
        return got

    # ---- transitions ------------------------------------------------------------------------------------------
    def advance(self, state: tuple, token: int):
        """The state after `token`, or None if the grammar refuses it. An EOS id is accepted (state unchanged)
        where the document is complete."""
        t0 = time.perf_counter()
        tb = self.vocab.token_bytes[token] if 0 <= token < self.vocab.vocab_size else None
        if tb is None:
            out = state if (token in self.vocab.eos_ids and self.grammar.accepting(state)) else None
        else:
            out = self.grammar.walk(state, tb)
        self.seconds += time.perf_counter() - t0
        return out

    def done(self, state: tuple) -> bool:
        """Complete, and nothing may follow: the answer ends here (only EOS is allowed)."""
        t0 = time.perf_counter()
        out = False
        if self.grammar.accepting(state):
            allowed = self._row(state) < NO
            allowed[self.vocab.eos_ids] = False
            out = not allowed.any()
        self.seconds += time.perf_counter() - t0
        return out

    def min_tokens(self, state: tuple) -> int:
        """Tokens needed at most to complete the document (one per byte of a shortest completion)."""
        return self.grammar.min_bytes(state)

    def in_free_string(self, state: tuple) -> bool:
        """Inside a string body where at least two bytes are allowed (so nothing is forced)."""
        if not state:
            return False
        n, ph, d, count = state[-1]
        g = self.grammar
        if g.kind[n] != STR or ph != 1 or d != S0:
            return False
        lo, hi = g.data[n]
        return hi is None or count < hi

    def forced(self, state: tuple) -> list[int]:
        """Token ids spelling the longest byte string the grammar forces from `state` (nothing else is possible
        and the document is not complete), tokenised the way the model writes text; [] when nothing is forced."""
        t0 = time.perf_counter()
        got = self._forced.get(state)
        if got is not None:
            self.seconds += time.perf_counter() - t0
            return got
        g = self.grammar
        data = bytearray()
        s = state
        while len(data) < MAX_FORCED_BYTES and not self.in_free_string(s) and not g.accepting(s):
            nb = g.only_byte(s)
            if nb is None:
                break
            data.append(nb)
            s = g.step(s, nb)
        ids = self._tokenize(bytes(data), state)
        if ids and b"".join(self.vocab.token_bytes[i] for i in ids) == data:
            ids = self.unmerge_tail(bytes(data), s, ids)
        if len(self._forced) > 16 * self.cache_size:
            self._forced.clear()
        self._forced[state] = ids
        self.seconds += time.perf_counter() - t0
        return ids

    def unmerge_tail(self, data: bytes, end: tuple, ids: list[int]) -> list[int]:
        """Drop the run's last token when whatever the grammar allows after the run would merge with it: a
        tokenizer writes ` [{` rather than ` [` + `{`, so ` [` alone would be rejected (the next free proposal
        or the champion picks the merged token instead). Only punctuation merges (the pre-tokenizer splits letters,
        digits and spaces off), so only runs followed by punctuation alone are checked."""
        g, encode = self.grammar, self.vocab.encode
        if encode is None or self.in_free_string(end) or g.accepting(end):
            return ids
        nxt = g.next_bytes(end)
        if not nxt or len(nxt) > 16 or not all(0x21 <= b < 0x7F and not chr(b).isalnum() for b in nxt):
            return ids
        for b in nxt:
            if [int(i) for i in encode((data + bytes((b,))).decode("utf-8"))][:len(ids)] == ids:
                return ids                           # this continuation keeps the run's tokens
        return ids[:-1]

    def _tokenize(self, data: bytes, state: tuple) -> list[int]:
        # whole characters only: a forced run can stop inside a multi-byte character
        cut = len(data)
        while cut:
            try:
                text = data[:cut].decode("utf-8")
                break
            except UnicodeDecodeError:
                cut -= 1
        else:
            return []
        ids = None
        if self.vocab.encode is not None:
            ids = [int(i) for i in self.vocab.encode(text)]
            if b"".join(self.vocab.token_bytes[i] or b"\x00" for i in ids) != data[:cut]:
                ids = None
        if ids is None:
            ids = self.vocab.longest_match(data[:cut]) or []
        # the grammar decides: keep the tokens it accepts (all of them, unless the tokenizer surprised us)
        out, s = [], state
        for i in ids:
            s = self.grammar.walk(s, self.vocab.token_bytes[i])
            if s is None:
                break
            out.append(i)
        return out
