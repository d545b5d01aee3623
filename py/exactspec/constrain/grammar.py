"""A byte-level JSON grammar compiled from a node spec (exactspec.constrain.schema): a deterministic stack machine.

A grammar state is an immutable tuple of frames (the stack, innermost last); a frame is a 4-tuple of ints/bytes
`(node, phase, a, b)`. `step(state, byte)` returns the next state or None; states are hashable, so masks and forced
continuations are cached per state (exactspec.constrain.engine).

Whitespace policy (stated once, here): answers are written on one line the way Python's `json.dumps` writes them,
`{"name": "Lena", "tags": ["a", "b"]}` ("spaced", the default: ", " between items, ": " after keys, nothing else)
or `{"name":"Lena","tags":["a","b"]}` ("compact"). No whitespace anywhere else, none before the end of the answer.
Other policies of the generator (the documents are still exactly what the schema allows, minus these):
- object properties are written in the schema's order; optional ones may be left out; undeclared ones never appear;
- strings: any character but raw control characters; escapes \\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX except
  surrogates (\\uD800-\\uDFFF; write the character itself); raw UTF-8 must be valid (no overlongs, no surrogates);
- numbers: at most 15 integer digits (exact in a JS number), 15 fraction digits, 2 exponent digits; "integer" has
  no fraction or exponent;
- enum / const values are written as `json.dumps` writes them (with the same separators).

`min_bytes(state)` is the exact length of the shortest completion (the decode loop keeps every answer completable
within its token budget with it: each byte of a shortest completion is one token of a byte-level vocabulary).
"""
from __future__ import annotations

import json
from bisect import bisect_left

# node kinds
OBJ, FOBJ, ARR, STR, LIT, NUM, UNION = range(7)
MAX_INT_DIGITS, MAX_FRAC_DIGITS, MAX_EXP_DIGITS = 15, 15, 2
WHITESPACE = {"spaced": (b", ", b": "), "compact": (b",", b":")}

# ---- the string-body lexer: a UTF-8 + JSON-escape DFA shared by the stepper and the vectorised token tables --------
S0, ESC, U1, U2, U2L, U3, U4, C1, C2, C3, E0, ED, F0, F4 = range(14)
N_LEX = 14
EXIT, DEAD = -1, -2
# bytes still needed to finish the character (or escape) in progress, per lexer state
PENDING = (0, 1, 4, 3, 3, 2, 1, 1, 2, 3, 2, 2, 3, 3)
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _lexer_tables():
    """(LEX, INC): LEX[d][b] = next lexer state (EXIT: the closing quote, DEAD: invalid); INC[d][b] = 1 where the
    byte starts a new character (JSON Schema's length counts characters; an escape is one)."""
    lex = [[DEAD] * 256 for _ in range(N_LEX)]
    inc = [[0] * 256 for _ in range(N_LEX)]
    for b in range(256):
        if b < 0x20:
            nd = DEAD
        elif b == 0x22:
            nd = EXIT
        elif b == 0x5C:
            nd = ESC
        elif b < 0x80:
            nd = S0
        elif 0xC2 <= b <= 0xDF:
            nd = C1
        elif b == 0xE0:
            nd = E0
        elif b == 0xED:
            nd = ED
        elif 0xE1 <= b <= 0xEF:
            nd = C2
        elif b == 0xF0:
            nd = F0
        elif 0xF1 <= b <= 0xF3:
            nd = C3
        elif b == 0xF4:
            nd = F4
        else:
            nd = DEAD
        lex[S0][b] = nd
        inc[S0][b] = 1 if nd not in (DEAD, EXIT) else 0
    for b in b'"\\/bfnrt':
        lex[ESC][b] = S0
    lex[ESC][ord("u")] = U1
    for b in _HEX:
        lex[U1][b] = U2L if b in b"dD" else U2
        lex[U2][b] = U3
        lex[U3][b] = U4
        lex[U4][b] = S0
    for b in b"01234567":
        lex[U2L][b] = U3          # \uD800-\uDFFF (surrogates) are refused
    for b in range(0x80, 0xC0):
        lex[C1][b] = S0
        lex[C2][b] = C1
        lex[C3][b] = C2
        if b >= 0xA0:
            lex[E0][b] = C1       # no overlong 3-byte forms
        else:
            lex[ED][b] = C1       # no surrogates
        if b >= 0x90:
            lex[F0][b] = C2       # no overlong 4-byte forms
        else:
            lex[F4][b] = C2       # nothing above U+10FFFF
    return tuple(tuple(r) for r in lex), tuple(tuple(r) for r in inc)


LEX, INC = _lexer_tables()
FRAME_BYTES_CACHE = 1 << 16     # frames whose accepted bytes a grammar keeps (then it starts over)
NUMBER_BYTES = frozenset(b"-+.eE0123456789")    # the bytes a JSON number is written with


class Grammar:
    """The stack machine of one node spec. Build with `Grammar(spec, whitespace="spaced")`."""

    def __init__(self, spec: tuple, whitespace: str = "spaced"):
        if whitespace not in WHITESPACE:
            raise ValueError(f"whitespace must be one of {', '.join(WHITESPACE)}, not {whitespace!r}")
        self.whitespace = whitespace
        self.sep, self.colon = WHITESPACE[whitespace]
        self.kind: list[int] = []
        self.data: list = []
        self._any = None
        self.root = self._build(spec)
        self.minlen = [None] * len(self.kind)
        for n in range(len(self.kind)):
            self._min(n, set())
        self._feeders = (self._feed_obj, self._feed_fobj, self._feed_arr, self._feed_str, self._feed_lit,
                         self._feed_num, self._feed_union)
        self._mc: dict = {}             # frame -> bytes to finish it (memo)
        self._fb: dict = {}             # frame -> the bytes its own feeder accepts (memo: frame_bytes)
        self.start = (self.frame0(self.root),)

    # ---- compile ---------------------------------------------------------------------------------------------
    def _node(self, kind: int, data) -> int:
        self.kind.append(kind)
        self.data.append(data)
        return len(self.kind) - 1

    def _literal_bytes(self, v) -> bytes:
        return json.dumps(v, ensure_ascii=False, separators=(self.sep.decode(), self.colon.decode()),
                          allow_nan=False).encode("utf-8")

    def _build(self, spec: tuple) -> int:
        kind = spec[0]
        if kind == "object":
            n = self._node(OBJ, None)
            props = spec[1]
            keys = [json.dumps(k, ensure_ascii=False).encode("utf-8") for k, _s, _r in props]
            children = [self._build(s) for _k, s, _r in props]
            req = [bool(r) for _k, _s, r in props]
            m = len(props)
            # lim[i]: the last property that may come next when the previous one written was i - 1 (optional ones
            # can be skipped, a required one cannot); req_from[i]: is any property from i on required?
            lim = [next((j for j in range(i, m) if req[j]), m - 1) for i in range(m + 1)]
            req_from = [any(req[i:]) for i in range(m + 1)]
            self.data[n] = (keys, children, req, lim, req_from)
            return n
        if kind == "any_object":
            return self._build_any_object()
        if kind == "array":
            n = self._node(ARR, None)
            self.data[n] = (self._build(spec[1]), int(spec[2]), None if spec[3] is None else int(spec[3]))
            return n
        if kind == "string":
            return self._node(STR, (int(spec[1]), None if spec[2] is None else int(spec[2])))
        if kind == "literal":
            lits = sorted(set(self._literal_bytes(v) for v in spec[1]))
            return self._node(LIT, (lits, frozenset(lits)))
        if kind == "number":
            return self._node(NUM, bool(spec[1]))
        if kind == "union":
            alts = [self._build(s) for s in spec[1]]
            return self._union(alts)
        if kind == "any":
            return self._build_any()
        raise ValueError(f"unknown node spec {kind!r}")

    def _union(self, alts: list[int]) -> int:
        first: dict[int, int] = {}
        for a in alts:
            for b in self.first_bytes(a):
                if b in first and first[b] != a:
                    raise ValueError("union alternatives must start with different bytes")
                first[b] = a
        return self._node(UNION, first)

    def _build_any(self) -> int:
        if self._any is None:
            n = self._node(UNION, None)           # filled below: its alternatives refer back to it
            self._any = n
            key = self._node(STR, (0, None))
            obj = self._node(FOBJ, (key, n))
            arr = self._node(ARR, (n, 0, None))
            alts = [self._node(STR, (0, None)), obj, arr, self._node(NUM, False),
                    self._node(LIT, (sorted([b"true", b"false", b"null"]), frozenset((b"true", b"false", b"null"))))]
            first = {}
            for a in alts:
                for b in self.first_bytes(a):
                    first[b] = a
            self.data[n] = first
        return self._any

    def _build_any_object(self) -> int:
        any_value = self._build_any()
        return self.data[any_value][ord("{")]

    def first_bytes(self, n: int) -> list[int]:
        k, d = self.kind[n], self.data[n]
        if k in (OBJ, FOBJ):
            return [ord("{")]
        if k == ARR:
            return [ord("[")]
        if k == STR:
            return [ord('"')]
        if k == LIT:
            return sorted(set(x[0] for x in d[0]))
        if k == NUM:
            return list(b"-0123456789")
        return sorted(d)

    def _min(self, n: int, visiting: set) -> int:
        """Length of the shortest value of node n (memoised; the 'any' cycle is broken by its free containers)."""
        if self.minlen[n] is not None:
            return self.minlen[n]
        if n in visiting:
            return 1 << 20
        visiting.add(n)
        k, d = self.kind[n], self.data[n]
        if k == OBJ:
            keys, children, req, _lim, _rf = d
            v = 2 + sum(len(keys[j]) + len(self.colon) + self._min(children[j], visiting)
                        for j in range(len(keys)) if req[j])
            nreq = sum(req)
            v += max(0, nreq - 1) * len(self.sep)
        elif k == FOBJ:
            v = 2
        elif k == ARR:
            item, lo, _hi = d
            v = 2 + (lo * self._min(item, visiting) + (lo - 1) * len(self.sep) if lo else 0)
        elif k == STR:
            v = 2 + d[0]
        elif k == LIT:
            v = min(len(x) for x in d[0])
        elif k == NUM:
            v = 1
        else:
            v = min(self._min(a, visiting) for a in set(d.values()))
        visiting.discard(n)
        self.minlen[n] = v
        return v

    # ---- run ----------------------------------------------------------------------------------------------------
    def frame0(self, n: int) -> tuple:
        return (n, 0, b"", 0) if self.kind[n] == LIT else (n, 0, 0, 0)

    def step(self, state: tuple, b: int):
        """The state after byte b, or None if b cannot continue a valid document."""
        feeders, kind = self._feeders, self.kind
        while state:
            top = state[-1]
            r = feeders[kind[top[0]]](top, b)
            if r is not None:
                return state[:-1] + r
            if not self.can_end(top):
                return None
            state = state[:-1]       # the innermost value is complete: b belongs to its parent
        return None

    def walk(self, state: tuple, data: bytes):
        for b in data:
            state = self.step(state, b)
            if state is None:
                return None
        return state

    def can_end(self, f: tuple) -> bool:
        k = self.kind[f[0]]
        if k == NUM:
            return f[1] in (2, 3, 5, 8)
        if k == LIT:
            return f[2] in self.data[f[0]][1]
        return False

    def accepting(self, state: tuple) -> bool:
        """Is the document complete (the answer may end here)?"""
        return all(self.can_end(f) for f in state)

    def min_bytes(self, state: tuple) -> int:
        """Exact length of the shortest byte string that completes the document from `state`."""
        mc = self._mc
        total = 0
        for f in state:
            v = mc.get(f)
            if v is None:
                v = self._frame_min(f)
                mc[f] = v
            total += v
        return total

    def frame_bytes(self, f: tuple) -> frozenset:
        """The bytes frame f itself accepts (its feeder's; memoised per frame: feeders are pure functions of the frame
        and the byte). step() gives a byte to the innermost frame and, where that frame refuses it but may end, to
        the frame under it, and so on: so the bytes a state allows are the union of its frames' frame_bytes from the
        top down to the first frame that cannot end (next_bytes, only_byte)."""
        got = self._fb.get(f)
        if got is None:
            feed = self._feeders[self.kind[f[0]]]
            got = frozenset(b for b in self._candidates(f) if feed(f, b) is not None)
            if len(self._fb) > FRAME_BYTES_CACHE:
                self._fb.clear()
            self._fb[f] = got
        return got

    def _candidates(self, f: tuple):
        """Bytes frame f's feeder may accept, a superset read off the frame (the feeder then decides each): an object's
        or array's punctuation, the next byte of the keys or literals its prefix may continue, a number's bytes, a
        union's first bytes; inside a string every byte. (tests/test_json_mode.py's random documents check
        next_bytes against every byte stepped through the grammar.)"""
        n, ph = f[0], f[1]
        k, d = self.kind[n], self.data[n]
        if k == OBJ or k == FOBJ:
            if ph == 0:
                return (0x7B,)
            if ph == 1:
                return (0x7D, 0x22)                   # } or a key's opening quote
            if ph == 2:
                return (0x2C, 0x7D)
            if ph == 4:
                return (self.sep[f[3]],)
            if ph == 5:
                return (self.colon[f[3]],)
            if ph == 3:
                if k == FOBJ:
                    return (0x22,)
                x, i = f[3], f[2]
                return {key[len(x)] for key in d[0][i:d[3][i] + 1] if len(key) > len(x)}
            return self._candidates(self.frame0(d[1][f[2]] if k == OBJ else d[1]))     # ph 6: the value
        if k == ARR:
            if ph == 0:
                return (0x5B,)
            if ph == 1:
                return (0x5D, *self._candidates(self.frame0(d[0])))
            if ph == 2:
                return (0x2C, 0x5D)
            if ph == 4:
                return (self.sep[f[3]],)
            return self._candidates(self.frame0(d[0]))                                  # ph 6: the next item
        if k == STR and ph == 0:
            return (0x22,)
        if k == LIT:
            p = f[2]
            return {lit[len(p)] for lit in d[0] if len(lit) > len(p)}
        if k == NUM:
            return NUMBER_BYTES
        if k == UNION and d is not None:
            return tuple(d)
        return range(256)

    def next_bytes(self, state: tuple) -> list[int]:
        """The bytes that may follow `state`, ascending: [b for b in range(256) if step(state, b) is not None]."""
        out: set = set()
        for f in reversed(state):
            out |= self.frame_bytes(f)
            if not self.can_end(f):
                break
        return sorted(out)

    def only_byte(self, state: tuple):
        """The one byte that may follow `state`, or None where none or several may."""
        found = None
        for f in reversed(state):
            for b in self.frame_bytes(f):
                if b != found:
                    if found is not None:
                        return None
                    found = b
            if not self.can_end(f):
                break
        return found

    # ---- per-kind transitions (return the frames replacing f, () when f is complete, None when b is invalid) --
    @staticmethod
    def _match(n: int, ph: int, a: int, pos: int, b: int, lit: bytes, done: tuple):
        """Byte `pos` of a fixed string (", " or ": ") in phase ph of node n; after its last byte go to `done`."""
        if b != lit[pos]:
            return None
        return (done,) if pos + 1 == len(lit) else ((n, ph, a, pos + 1),)

    def _feed_obj(self, f, b):
        n, ph, a, x = f
        keys, children, req, lim, req_from = self.data[n]
        if ph == 0:                                   # {
            return ((n, 1, 0, 0),) if b == 0x7B else None
        if ph == 1:                                   # after {: } or the first key
            if b == 0x7D:
                return () if not req_from[0] else None
            return self._obj_key(n, 0, b"", b) if keys else None
        if ph == 2:                                   # after a value (a = next property index): , or }
            if b == 0x2C and a < len(keys):
                return self._match(n, 4, a, 0, b, self.sep, (n, 3, a, b""))
            if b == 0x7D and not req_from[a]:
                return ()
            return None
        if ph == 4:                                   # inside the separator
            return self._match(n, 4, a, x, b, self.sep, (n, 3, a, b""))
        if ph == 3:                                   # a key, x = bytes so far
            return self._obj_key(n, a, x, b)
        if ph == 5:                                   # ": " after key a
            return self._match(n, 5, a, x, b, self.colon, (n, 6, a, 0))
        # ph 6: the value of property a
        child = children[a]
        r = self._feeders[self.kind[child]](self.frame0(child), b)
        return None if r is None else ((n, 2, a + 1, 0),) + r

    def _obj_key(self, n, i, prefix, b):
        keys, _children, _req, lim, _rf = self.data[n]
        p = prefix + bytes((b,))
        hit = None
        for j in range(i, lim[i] + 1):
            kj = keys[j]
            if kj.startswith(p):
                if kj == p:
                    return ((n, 5, j, 0),)            # keys are quoted: a complete key is no other key's prefix
                hit = j
        return None if hit is None else ((n, 3, i, p),)

    def _feed_fobj(self, f, b):
        n, ph, a, x = f
        key, value = self.data[n]
        if ph == 0:
            return ((n, 1, 0, 0),) if b == 0x7B else None
        if ph == 1:                                   # after {: } or a key
            if b == 0x7D:
                return ()
            return ((n, 5, 0, 0), (key, 1, S0, 0)) if b == 0x22 else None
        if ph == 2:                                   # after a value
            if b == 0x2C:
                return self._match(n, 4, 0, 0, b, self.sep, (n, 3, 0, 0))
            return () if b == 0x7D else None
        if ph == 4:
            return self._match(n, 4, 0, x, b, self.sep, (n, 3, 0, 0))
        if ph == 3:                                   # the next key's opening quote
            return ((n, 5, 0, 0), (key, 1, S0, 0)) if b == 0x22 else None
        if ph == 5:
            return self._match(n, 5, 0, x, b, self.colon, (n, 6, 0, 0))
        r = self._feeders[self.kind[value]](self.frame0(value), b)
        return None if r is None else ((n, 2, 0, 0),) + r

    def _arr_count(self, n: int, c: int) -> int:
        _item, lo, hi = self.data[n]
        return c if hi is not None else min(c, lo)     # without maxItems only "have we reached minItems" matters

    def _feed_arr(self, f, b):
        n, ph, c, x = f
        item, lo, hi = self.data[n]
        if ph == 0:
            return ((n, 1, 0, 0),) if b == 0x5B else None
        if ph == 1:                                   # after [: ] or the first item
            if b == 0x5D:
                return () if lo == 0 else None
            if hi == 0:
                return None
            r = self._feeders[self.kind[item]](self.frame0(item), b)
            return None if r is None else ((n, 2, self._arr_count(n, 1), 0),) + r
        if ph == 2:                                   # after item number c
            if b == 0x2C and (hi is None or c < hi):
                return self._match(n, 4, c, 0, b, self.sep, (n, 6, c, 0))
            if b == 0x5D and c >= lo:
                return ()
            return None
        if ph == 4:
            return self._match(n, 4, c, x, b, self.sep, (n, 6, c, 0))
        r = self._feeders[self.kind[item]](self.frame0(item), b)     # ph 6: the next item
        return None if r is None else ((n, 2, self._arr_count(n, c + 1), 0),) + r

    def _feed_str(self, f, b):
        n, ph, d, c = f
        lo, hi = self.data[n]
        if ph == 0:
            return ((n, 1, S0, 0),) if b == 0x22 else None
        nd = LEX[d][b]
        if nd == DEAD:
            return None
        if nd == EXIT:
            return () if c >= lo else None
        c2 = c + INC[d][b]
        if hi is None:
            c2 = min(c2, lo)                           # without maxLength only "have we reached minLength" matters
        elif c2 > hi:
            return None
        return ((n, 1, nd, c2),)

    def _feed_lit(self, f, b):
        n, _ph, prefix, _x = f
        lits = self.data[n][0]
        p = prefix + bytes((b,))
        i = bisect_left(lits, p)
        if i == len(lits) or not lits[i].startswith(p):
            return None
        if lits[i] == p and not (i + 1 < len(lits) and lits[i + 1].startswith(p)):
            return ()                                 # complete, and no other literal continues it
        return ((n, 0, p, 0),)

    def _feed_num(self, f, b):
        n, ph, k, _x = f
        integer = self.data[n]
        digit = 0x30 <= b <= 0x39
        if ph == 0 or ph == 1:                        # start / after '-'
            if b == 0x2D and ph == 0:
                return ((n, 1, 0, 0),)
            if b == 0x30:
                return ((n, 2, 0, 0),)
            return ((n, 3, 1, 0),) if digit else None
        if ph in (2, 3):                              # after 0 / after k integer digits
            if digit and ph == 3 and k < MAX_INT_DIGITS:
                return ((n, 3, k + 1, 0),)
            if integer:
                return None
            if b == 0x2E:
                return ((n, 4, 0, 0),)
            return ((n, 6, 0, 0),) if b in (0x65, 0x45) else None
        if ph == 4:                                   # after '.'
            return ((n, 5, 1, 0),) if digit else None
        if ph == 5:                                   # k fraction digits
            if digit and k < MAX_FRAC_DIGITS:
                return ((n, 5, k + 1, 0),)
            return ((n, 6, 0, 0),) if b in (0x65, 0x45) else None
        if ph == 6:                                   # after 'e'
            if b in (0x2B, 0x2D):
                return ((n, 7, 0, 0),)
            return ((n, 8, 1, 0),) if digit else None
        if ph == 7:
            return ((n, 8, 1, 0),) if digit else None
        return ((n, 8, k + 1, 0),) if digit and k < MAX_EXP_DIGITS else None     # ph 8

    def _feed_union(self, f, b):
        alt = self.data[f[0]].get(b)
        if alt is None:
            return None
        return self._feeders[self.kind[alt]](self.frame0(alt), b)

    # ---- shortest completions -------------------------------------------------------------------------------
    def _obj_rest(self, n: int, i: int) -> int:
        """Bytes to finish an object after its value number i - 1: the required properties from i on, then }."""
        keys, children, req, _lim, _rf = self.data[n]
        return 1 + sum(len(self.sep) + len(keys[j]) + len(self.colon) + self.minlen[children[j]]
                       for j in range(i, len(keys)) if req[j])

    def _obj_key_cost(self, n: int, i: int, done: int) -> int:
        """Shortest way to write one of the keys that may come next (done = key bytes already written) and finish."""
        keys, children, req, lim, _rf = self.data[n]
        return min(len(keys[j]) - done + len(self.colon) + self.minlen[children[j]] + self._obj_rest(n, j + 1)
                   for j in range(i, lim[i] + 1))

    def _frame_min(self, f: tuple) -> int:
        n, ph, a, x = f
        k, d = self.kind[n], self.data[n]
        ml = self.minlen
        if k == OBJ:
            keys, children, req, lim, req_from = d
            if ph == 0:
                return ml[n]
            if ph == 1:
                best = 1 if not req_from[0] else 1 << 30
                return min(best, self._obj_key_cost(n, 0, 0)) if keys else best
            if ph == 2:
                return self._obj_rest(n, a)
            if ph == 4:
                return len(self.sep) - x + self._obj_key_cost(n, a, 0)
            if ph == 3:
                return min(len(keys[j]) - len(x) + len(self.colon) + ml[children[j]] + self._obj_rest(n, j + 1)
                           for j in range(a, lim[a] + 1) if keys[j].startswith(x))
            if ph == 5:
                return len(self.colon) - x + ml[children[a]] + self._obj_rest(n, a + 1)
            return ml[children[a]] + self._obj_rest(n, a + 1)
        if k == FOBJ:
            value = ml[d[1]]
            entry = 2 + len(self.colon) + value + 1    # "": v}
            return {0: 2, 1: 1, 2: 1, 3: entry, 4: len(self.sep) - x + entry,
                    5: len(self.colon) - x + value + 1, 6: value + 1}[ph]
        if k == ARR:
            item, lo, _hi = d
            more = len(self.sep) + ml[item]
            if ph == 0:
                return ml[n]
            if ph == 1:
                return 1 + (lo * ml[item] + (lo - 1) * len(self.sep) if lo else 0)
            if ph == 2:
                return 1 + max(0, lo - a) * more
            if ph == 4:
                return len(self.sep) - x + ml[item] + 1 + max(0, lo - a - 1) * more
            return ml[item] + 1 + max(0, lo - a - 1) * more
        if k == STR:
            lo = d[0]
            if ph == 0:
                return 2 + lo
            return PENDING[a] + max(0, lo - x) + 1
        if k == LIT:
            return min(len(s) - len(a) for s in d[0] if s.startswith(a))
        if k == NUM:
            return (1, 1, 0, 0, 1, 0, 1, 1, 0)[ph]
        return ml[n]
