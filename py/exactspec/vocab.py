"""Drafts with another vocabulary: three bridges between a draft's tokenizer and the champion's.

The champion verifies in ITS OWN ids and its own pick decides every emitted token (greedy, coupled), or rejection
mode sees the q each proposal was drawn from, in champion ids. So no bridge can change an answer; a bridge decides
only what the draft can propose, and so tau.

- remap: both vocabularies hold the same token strings under different ids (checked both ways: a token on one side
  only rules it out) -> a permutation. The draft's rows are permuted into champion ids; every mode works as for one
  vocabulary (coupled: the champion's noise on the permuted row; rejection: the permuted q).
- tli (token-level intersection): the draft's distribution restricted to the tokens whose byte strings exist in both
  vocabularies, renormalised, as a row over champion ids (the log of the pushforward: several draft tokens with one
  byte string add up). Proposals are one champion token each, so the positions line up: coupled mode takes the
  champion's Gumbel noise g[t, v] on that row, rejection mode samples from it and hands the verifier exactly that
  q (zeros outside the intersection). The draft is fed the proposal's draft token (the most likely of its preimages).
- slem (string-level exact match): the draft generates its own tokens (greedy); their text, appended to the committed
  text, is tokenised by the champion's tokenizer, and only the prefix that more text cannot change is proposed: the
  last pieces of the pre-tokenizer (where the next text could merge) and a trailing prefix of a special token are
  held back. The proposals are point masses, like the n-gram drafter's: greedy and coupled stay exact because the
  champion's own pick decides each token, and rejection mode is exact with q = the point mass (accept x with
  probability p(x), else resample from p without x). No coupling of the draft's picks (its positions are its own).

The draft keeps its own KV cache in its own ids. `DraftView` gives, for the committed champion ids, the draft's tokens:
the committed bytes re-tokenised by the draft's tokenizer (a champion special token becomes the draft's token of the
same content if it has one, else its text), with bytes that do not form a character yet (a champion token can end
inside one) as the draft's byte tokens. The view is kept incrementally: anchors are points where the champion has a
token boundary and the draft's tokenisation cannot change with more text; each round re-encodes only what follows
the last anchor. Before proposing, the drafter rolls its cache back to the longest prefix that agrees with the view
and feeds the rest (always at least the last token, whose row proposes): after a rejection, after a proposal the
draft tokenised differently, and at a partial token on the boundary alike.

Only the per-forward path: the batched GPU step (spec_round) feeds the draft's picks to the champion as ids, which
holds for one vocabulary only (decode.py checks for a plain ModelDrafter).
"""
from __future__ import annotations

import codecs
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from .settings import BRIDGES

# Pieces at the end of a text that more text can still change: byte-level pre-tokenizers can regroup the last two
# ("'" + "r" -> "'re"; "\n" + " " -> "\n \n" with llama3's \s*[\r\n]+), SentencePiece words only the last one.
HOLD = {"bytelevel": 2, "spm": 1}
KIND_TEXT = {"bytelevel": "byte-level BPE", "spm": "SentencePiece-style BPE (byte fallback)"}


class BridgeError(ValueError):
    """A bridge that cannot join these two tokenizers; the message says what differs."""


# ---------------------------------------------------------------------------------------------------- compatibility
@dataclass
class Compat:
    """What differs between the champion's tokenizer and the draft's, and which bridges can join them."""

    same: bool                         # identical vocabulary, ids and tokenisation: no bridge at all
    remap: bool                        # the same token strings under other ids (both ways)
    shared: int                        # byte strings in both vocabularies (TLI's intersection, specials excluded)
    differences: list = field(default_factory=list)   # human-readable, one line per difference
    champion_only: int = 0             # token strings only the champion has
    draft_only: int = 0

    def auto(self, mode: str) -> str:
        """The bridge 'auto' uses: none (same vocabulary), remap when the ids are a permutation, else slem for
        greedy / coupled (it proposes whatever the draft writes), tli for rejection mode (it keeps the draft's
        distribution: acceptance min(p, q) instead of slem's point masses)."""
        if self.same:
            return "none"
        if self.remap:
            return "remap"
        return "tli" if mode == "rejection" else "slem"

    def to_json(self) -> dict:
        return {"same": self.same, "remap": self.remap, "shared": self.shared, "differences": list(self.differences),
                "champion_only": self.champion_only, "draft_only": self.draft_only,
                "auto": {m: self.auto(m) for m in ("coupled", "rejection")}}


def _plain_strings(tok) -> dict:
    """token string -> id of every non-added token (the vocabulary's own spelling)."""
    return {t: i for i, t in enumerate(tok._tokens) if t is not None and tok.added_content(i) is None}


def _specials(tok) -> dict:
    return {tok.added_content(i): i for i in range(tok.vocab_size) if tok.added_content(i) is not None}


def _describe_kind(tok) -> str:
    s = KIND_TEXT[tok.kind]
    if tok.kind == "bytelevel":
        s += f", {tok.pre} pre-tokenizer"
    return s


def _name(tok, tid) -> str:
    if tid is None:
        return "none"
    c = tok.added_content(tid)
    return f"{c if c is not None else tok._tokens[tid]} ({tid})"


def compare(champion_tok, draft_tok, champion_cfg=None, draft_cfg=None) -> Compat:
    """Compare two tokenizers (and, when given, the models' configs): which bridges apply, and every difference by
    name: algorithm, normalisation, special tokens, BOS/EOS, chat template, context length, vocabulary."""
    c, d = champion_tok, draft_tok
    diff = []
    if c.kind != d.kind or c.pre != d.pre:
        diff.append(f"tokenizer: champion {_describe_kind(c)}, draft {_describe_kind(d)}")
    norm = {"bytelevel": None, "spm": "prepends '\u2581' and writes spaces as '\u2581'"}
    nc = c.normalizer or norm[c.kind]
    nd = d.normalizer or norm[d.kind]
    if nc != nd:
        diff.append(f"normalisation: champion {nc or 'none'}, draft {nd or 'none'}")
    sc, sd = _specials(c), _specials(d)
    only_c = sorted(set(sc) - set(sd), key=lambda x: sc[x])
    only_d = sorted(set(sd) - set(sc), key=lambda x: sd[x])
    if only_c or only_d:
        diff.append("special tokens: " + "; ".join(x for x in (
            f"champion only {', '.join(only_c[:6])}{' ...' if len(only_c) > 6 else ''}" if only_c else "",
            f"draft only {', '.join(only_d[:6])}{' ...' if len(only_d) > 6 else ''}" if only_d else "") if x)
            + " (the draft sees the champion's as text)")
    for what, a, b in (("BOS", c.bos_id, d.bos_id), ("EOS", c.eos_id, d.eos_id)):
        if (c.added_content(a) if a is not None else None) != (d.added_content(b) if b is not None else None):
            diff.append(f"{what}: champion {_name(c, a)}, draft {_name(d, b)}")
    if c.add_bos != d.add_bos:
        diff.append(f"BOS added to a prompt: champion {'yes' if c.add_bos else 'no'}, draft "
                    f"{'yes' if d.add_bos else 'no'}")
    tc, td = c.chat_template, d.chat_template
    if tc != td:
        from .chat import ChatTemplateError, detect_template

        def kind(t):
            if not isinstance(t, str):
                return "none"
            try:
                return detect_template(t)
            except ChatTemplateError:
                return "unsupported"
        diff.append(f"chat template: champion {kind(tc)}, draft {kind(td)}"
                    + (" (the draft sees the champion's rendered conversation)" if kind(tc) != kind(td) else
                       " (same kind, different text)"))
    ctx = context_difference(champion_cfg, draft_cfg)
    if ctx:
        diff.append(ctx)
    pc, pd = _plain_strings(c), _plain_strings(d)
    same = (c.kind == d.kind and c.pre == d.pre and c.normalizer == d.normalizer and c._tokens == d._tokens
            and sc == sd and c._merges == d._merges)
    c_only = len(set(pc) - set(pd)) + len(only_c)
    d_only = len(set(pd) - set(pc)) + len(only_d)
    remap = (not same and c.kind == d.kind and c_only == 0 and d_only == 0
             and len(pc) + len(sc) == c.vocab_size and len(pd) + len(sd) == d.vocab_size)   # no duplicate strings
    shared = len(set(_byte_table(c)) & set(_byte_table(d)))
    if not same:
        if remap:
            diff.append("ids: the same token strings under other ids (remap)")
        diff.append(f"vocabulary: champion {c.vocab_size}, draft {d.vocab_size} tokens; {c_only} token strings only "
                    f"the champion has, {d_only} only the draft; {shared} byte strings in both")
    if champion_cfg is not None and draft_cfg is not None and draft_cfg.vocab_size < d.vocab_size:
        diff.append(f"the draft model has {draft_cfg.vocab_size} rows for {d.vocab_size} tokens")
    return Compat(same, remap, shared, diff, c_only, d_only)


def context_difference(champion_cfg, draft_cfg) -> str | None:
    """The models' context lengths, when they differ (None otherwise, or without both configs)."""
    if champion_cfg is None or draft_cfg is None or champion_cfg.seq_len == draft_cfg.seq_len:
        return None
    return (f"context length: champion {champion_cfg.seq_len}, draft {draft_cfg.seq_len} tokens"
            + (" (speculation stops when the draft's view of the conversation fills it)"
               if draft_cfg.seq_len < champion_cfg.seq_len else ""))


def _byte_table(tok) -> dict:
    """bytes -> the lowest id of a non-added token spelling them (a SentencePiece vocabulary spells a space both as
    '\u2581' and as <0x20>: the first one wins)."""
    out = {}
    for i in range(tok.vocab_size):
        if tok.added_content(i) is not None or tok._tokens[i] is None:
            continue
        out.setdefault(tok.token_bytes(i), i)
    return out


def resolve(requested: str, compat: Compat, mode: str) -> str:
    """The bridge a generation uses: 'none' (one vocabulary), 'remap', 'tli' or 'slem'; BridgeError if the requested
    one cannot join the pair."""
    if requested not in BRIDGES:
        raise BridgeError(f"bridge: must be one of {', '.join(BRIDGES)}")
    if requested == "auto":
        return compat.auto(mode)
    if requested == "remap" and not (compat.remap or compat.same):
        raise BridgeError(f"bridge remap needs the same token strings on both sides: {compat.champion_only} only the "
                          f"champion has, {compat.draft_only} only the draft (use tli, slem or auto)")
    if requested == "tli" and compat.shared == 0:
        raise BridgeError("bridge tli: the two vocabularies share no byte string")
    return requested


# ---------------------------------------------------------------------------------------------------- id maps
class IdMap:
    """remap: a permutation between the two vocabularies' ids, built from token strings and checked both ways."""

    def __init__(self, champion_tok, draft_tok, champion_vocab: int, draft_vocab: int):
        pc, pd = _plain_strings(champion_tok), _plain_strings(draft_tok)
        sc, sd = _specials(champion_tok), _specials(draft_tok)
        missing = (set(pc) ^ set(pd)) | (set(sc) ^ set(sd))
        if missing or len(pc) + len(sc) != champion_tok.vocab_size or len(pd) + len(sd) != draft_tok.vocab_size:
            raise BridgeError(f"remap: {len(missing)} token strings exist on one side only "
                              f"(e.g. {sorted(missing, key=repr)[:3]!r})")
        self.to_draft = np.full(champion_vocab, -1, dtype=np.int64)     # (champion vocab,) champion id -> draft id
        self.to_champion = np.full(draft_vocab, -1, dtype=np.int64)     # (draft vocab,) draft id -> champion id
        for table_c, table_d in ((pc, pd), (sc, sd)):
            for s, ci in table_c.items():
                di = table_d[s]
                if ci < champion_vocab and di < draft_vocab:
                    self.to_draft[ci] = di
                    self.to_champion[di] = ci
        ok = self.to_champion >= 0
        back = self.to_draft[self.to_champion[ok]]
        if not np.array_equal(back, np.nonzero(ok)[0]):                # both ways: a bijection
            raise BridgeError("remap: the id map is not one-to-one")
        self._d_ok = np.nonzero(ok)[0]                                  # draft ids with a champion id
        self._c_of = self.to_champion[self._d_ok]

    def champion_row(self, row: np.ndarray, champion_vocab: int) -> np.ndarray:
        out = np.full(champion_vocab, -np.inf, dtype=np.float64)        # (champion vocab,)
        out[self._c_of] = row[self._d_ok]
        return out


class Intersection:
    """tli: draft ids whose byte strings the champion also has (specials: the same content), and their champion ids.

    champion_row(row) is log(sum over preimages of exp(row)) over champion ids, -inf outside the intersection: the
    log of the draft's distribution restricted to the intersection, pushed forward to champion ids (the softmax of it
    is the renormalised restriction). The declared distribution of a TLI proposal is whatever the decode loop's
    picker makes of that row (temperature, top-k, top-p), and the verifier gets exactly it."""

    def __init__(self, champion_tok, draft_tok, champion_vocab: int, draft_vocab: int):
        bc = _byte_table(champion_tok)
        pairs = []
        for i in range(min(draft_tok.vocab_size, draft_vocab)):
            content = draft_tok.added_content(i)
            if content is not None:                       # a special token: the champion's of the same content
                j = champion_tok.id_of(content)
                c = j if (j is not None and champion_tok.added_content(j) == content) else None
            else:
                c = bc.get(draft_tok.token_bytes(i)) if draft_tok._tokens[i] is not None else None
            if c is not None and c < champion_vocab:
                pairs.append((c, i))
        if not pairs:
            raise BridgeError("tli: the two vocabularies share no byte string")
        pairs.sort()
        self.c_ids = np.array([c for c, _ in pairs], dtype=np.int64)   # (n,) champion id of each shared draft token
        self.d_ids = np.array([d for _, d in pairs], dtype=np.int64)   # (n,) the draft token
        first = np.ones(len(pairs), dtype=bool)
        first[1:] = self.c_ids[1:] != self.c_ids[:-1]
        self._single = first & np.append(first[1:], True)              # champion ids with one preimage
        self.size = int(first.sum())                                   # champion ids in the intersection
        self._c_single = self.c_ids[self._single]
        multi = ~self._single                                          # pairs sharing a champion id, grouped
        self._multi = np.nonzero(multi)[0]
        mf = first[multi]
        self._m_starts = np.nonzero(mf)[0]                             # (groups,) where each group starts
        self._m_counts = np.diff(np.append(self._m_starts, mf.size))
        self._c_multi = self.c_ids[multi][self._m_starts]
        self.draft_mask = np.zeros(draft_vocab, dtype=bool)            # (draft vocab,)
        self.draft_mask[self.d_ids] = True

    def champion_row(self, row: np.ndarray, champion_vocab: int) -> np.ndarray:
        z = np.asarray(row, dtype=np.float64)[self.d_ids]               # (n,)
        out = np.full(champion_vocab, -np.inf, dtype=np.float64)        # (champion vocab,)
        out[self._c_single] = z[self._single]
        if self._multi.size:                                           # logsumexp of each group of preimages
            zm = z[self._multi]
            mx = np.maximum.reduceat(zm, self._m_starts)               # (groups,)
            s = np.add.reduceat(np.exp(zm - np.repeat(mx, self._m_counts)), self._m_starts)
            out[self._c_multi] = mx + np.log(s)
        return out

    def draft_token(self, champion_id: int, row: np.ndarray) -> int:
        """The draft token to feed for a proposed champion id: its most likely preimage."""
        lo, hi = np.searchsorted(self.c_ids, [champion_id, champion_id + 1])
        if lo == hi:
            raise BridgeError(f"tli: champion token {champion_id} is outside the intersection")
        cand = self.d_ids[lo:hi]
        return int(cand[int(np.argmax(np.asarray(row)[cand]))])

    def outside_mass(self, row: np.ndarray) -> float:
        """The share of the draft's (T = 1) distribution the restriction drops."""
        z = np.asarray(row, dtype=np.float64)
        p = np.exp(z - z.max())
        return float(1.0 - p[self.draft_mask[:z.size]].sum() / p.sum())


# ---------------------------------------------------------------------------------------------------- text units
_SURR_LO, _SURR_HI = 0xDC80, 0xDCFF   # surrogateescape: byte b -> U+DC00 + b (b >= 0x80)


def text_units(tok, data: bytes, first: bool, allow_special: bool) -> list:
    """`data` cut into units where tok's tokenisation never merges across, each with its ids:
    [(byte start, byte end, ids, kind)] covering data in order. kind 'text': a piece of characters
    (Tokenizer.encode_pieces); 'added': an added token (nothing merges across it); 'byte': a byte that is no part of a
    character (invalid UTF-8), as tok's byte token; 'partial': the bytes at the end that do not form a character
    YET, as byte tokens. A byte the vocabulary has no token for gets no id (SmolLM2 lacks 21 bytes)."""
    dec = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    text = dec.decode(data, final=False)
    head_len = len(data) - len(dec.getstate()[0])                      # bytes that decoded to characters
    out = []
    pos = 0
    i = 0
    n = len(text)
    seg_first = first
    while i < n:
        if _SURR_LO <= ord(text[i]) <= _SURR_HI:
            t = tok.byte_token(ord(text[i]) - 0xDC00)
            out.append((pos, pos + 1, () if t is None else (t,), "byte"))
            pos += 1
            i += 1
            seg_first = False
            continue
        j = i
        while j < n and not (_SURR_LO <= ord(text[j]) <= _SURR_HI):
            j += 1
        run = text[i:j]
        for a, b, ids in tok.encode_pieces(run, allow_special=allow_special, first=seg_first):
            nb = len(run[a:b].encode("utf-8"))
            added = len(ids) == 1 and run[a:b] == tok.added_content(ids[0])
            out.append((pos, pos + nb, tuple(ids), "added" if added else "text"))
            pos += nb
        i = j
        seg_first = False
    if pos < len(data):                                                # a character not complete yet
        ids = tuple(t for t in (tok.byte_token(b) for b in data[head_len:]) if t is not None)
        out.append((pos, len(data), ids, "partial"))
    return out


def spelled_units(tok, units: list, data: bytes) -> int:
    """How many leading units spell their bytes exactly (a byte the vocabulary has no token for is dropped by its
    tokenisation: text past it is not the text the champion can produce). A SentencePiece unit may carry the space
    its tokenizer prepends to a segment."""
    for k, (b0, b1, ids, kind) in enumerate(units):
        got = b"".join(tok.token_bytes(i) for i in ids)
        want = data[b0:b1]
        if got != want and not (kind != "added" and got == b" " + want):
            return k
    return len(units)


def stable_units(tok, units: list, data: bytes, hold: int, allow_special: bool) -> int:
    """How many leading units no appended text can change: all but the last `hold` after the last added token, never
    a trailing partial character (it joins the piece before it when complete), and, when added tokens are matched,
    nothing from a trailing proper prefix of an added token's text on (it may still complete; the text before it
    then ends a segment, so its last `hold` units are held too)."""
    n = len(units)
    if n and units[-1][3] == "partial":
        n -= 1
    last_added = max((k + 1 for k, u in enumerate(units[:n]) if u[3] == "added"), default=0)
    keep = max(last_added, n - hold)
    if allow_special and tok._added_first:
        tail = data[-64:].decode("utf-8", errors="ignore")
        for p in range(len(tail)):
            piece = tail[p:]
            if any(len(c) > len(piece) and c.startswith(piece) for c in tok._added_first.get(piece[0], ())):
                cut = len(data) - len(piece.encode("utf-8"))
                before = sum(1 for u in units[:n] if u[1] <= cut)
                keep = min(keep, max(last_added if last_added <= before else 0, before - hold))
                break
    return max(0, min(keep, n))


# ---------------------------------------------------------------------------------------------------- the view
class DraftView:
    """The committed champion ids as `target`'s tokens, kept incrementally (see the module docstring).

    ids(seq) -> target ids of the committed champion ids `seq` (with target's BOS first when it adds one).
    anchor(seq) -> (n, first): the last point (n champion tokens) where target's tokenisation of seq's text cannot
    change with more text; first: a target segment starts there (after a special token)."""

    def __init__(self, champion_tok, target_tok, hold: int | None = None):
        self.c, self.t = champion_tok, target_tok
        self.hold = HOLD[target_tok.kind] if hold is None else hold
        self.special = {}                                  # champion id -> target id of an added token, same content
        for i in range(champion_tok.vocab_size):
            content = champion_tok.added_content(i)
            if content is None:
                continue
            j = target_tok.id_of(content)
            if j is not None and target_tok.added_content(j) == content:
                self.special[i] = j
        self.start = [target_tok.bos_id] if (target_tok.add_bos and target_tok.bos_id is not None) else []
        self._seq: list = []
        self._ids: list = list(self.start)                 # target ids up to the last anchor
        # (champion count, target count, a segment starts there, support): an anchor is proven by the text of the
        # first `support` champion tokens it was found in, and holds while the sequence keeps those
        self._anchors = [(0, len(self.start), True, 0)]
        self.reencoded = 0                                 # champion tokens re-encoded (cost counter)

    def _valid(self, seq) -> None:
        old = self._seq
        n = 0
        m = min(self._anchors[-1][3], len(old), len(seq))
        while n < m and old[n] == seq[n]:
            n += 1
        while self._anchors[-1][3] > n:
            self._anchors.pop()

    def ids(self, seq) -> list:
        seq = [int(x) for x in seq]
        self._valid(seq)
        a_c, a_t, first, _support = self._anchors[-1]
        out = []                                           # target ids after the anchor
        best = None                                        # the new anchor
        j = a_c
        self.reencoded += len(seq) - a_c
        while j < len(seq):
            sid = self.special.get(seq[j])
            if sid is not None:
                out.append(sid)
                j += 1
                first = True
                best = (j, a_t + len(out), True, len(seq))
                continue
            buf = bytearray()
            ends = {}                                      # byte offset in the run -> champion count after it
            k = j
            while k < len(seq) and seq[k] not in self.special:
                buf += self.c.token_bytes(seq[k])
                k += 1
                ends[len(buf)] = k
            ends[0] = j
            units = text_units(self.t, bytes(buf), first, allow_special=False)
            last = k == len(seq)
            n_stable = stable_units(self.t, units, bytes(buf), self.hold, False) if last else len(units)
            for ui, (b0, _b1, uids, _kind) in enumerate(units):
                if 0 < ui <= n_stable and b0 in ends:
                    best = (ends[b0], a_t + len(out), False, len(seq))
                out.extend(uids)
            j = k
            first = False
        if best is not None and best[0] > a_c:
            self._anchors.append(best)
            self._ids = self._ids[:a_t] + out[:best[1] - a_t]
        self._seq = seq
        return self._ids[:a_t] + out

    def anchor(self, seq) -> tuple:
        self.ids(seq)
        return self._anchors[-1][0], self._anchors[-1][2]


def view_bytes(tok, ids, start_first: bool = True) -> bytes:
    """The bytes a target id sequence spells (SentencePiece: without the '\u2581' prepended at a segment start)."""
    return b"".join(tok.token_bytes(int(i)) for i in ids)


# ---------------------------------------------------------------------------------------------------- slem
class SlemAligner:
    """Champion proposals for the draft's new text: the committed tail from the champion's last anchor plus the new
    bytes, tokenised by the champion; the tokens past the committed end inside units no later text can change."""

    def __init__(self, champion_tok):
        self.c = champion_tok
        self.self_view = DraftView(champion_tok, champion_tok)
        self.hold = HOLD[champion_tok.kind]
        self.fallbacks = 0                                 # rounds where the new text started mid-token

    def begin(self, seq) -> None:
        """Start a round after the committed champion ids `seq`: find the last anchor of the committed text."""
        a, self._first = self.self_view.anchor(seq)
        self._tail = [int(x) for x in seq[a:]]                        # committed tokens after the anchor
        self._base = b"".join(self.c.token_bytes(x) for x in self._tail)
        # an SentencePiece champion spells its segment's first space with the '\u2581' it prepends itself
        self._strip = 1 if (self.c.kind == "spm" and self._first and self._base.startswith(b" ")) else 0

    def proposals(self, new: bytes, final: bool = False) -> tuple:
        """(proposals, held) after the round's committed text: the champion ids to propose for the draft's new bytes,
        and how many more tokens the text gave that a boundary held back. final: the text ends here."""
        c_tail, base = self._tail, self._base
        data = base[self._strip:] + new
        units = text_units(self.c, data, self._first, allow_special=True)
        n_st = min(spelled_units(self.c, units, data),
                   len(units) if final else stable_units(self.c, units, data, self.hold, True))
        toks = [(t, ui) for ui, u in enumerate(units) for t in u[2]]
        rest = None
        if [t for t, _ in toks[:len(c_tail)]] == c_tail:
            rest = toks[len(c_tail):]
        else:                                              # the committed tail was tokenised otherwise: a boundary
            end = 0                                        # at the committed end still lets the rest be proposed
            for m, (t, _ui) in enumerate(toks):
                end += len(self.c.token_bytes(t))
                if end >= len(base):
                    rest = toks[m + 1:] if end == len(base) else None
                    break
        if rest is None:                                   # the new text starts inside a token: tokenise it alone
            self.fallbacks += 1
            units = text_units(self.c, new, False, allow_special=True)
            n_st = min(spelled_units(self.c, units, new),
                       len(units) if final else stable_units(self.c, units, new, self.hold, True))
            rest = [(t, ui) for ui, u in enumerate(units) for t in u[2]]
        props = []
        for t, ui in rest:
            if ui >= n_st:
                break
            props.append(t)
        return props, len(rest) - len(props)


# ---------------------------------------------------------------------------------------------------- drafters
async def _row(backend, feed, pos, vocab):
    from .drafters.model import call_backend
    return (await call_backend(backend.forward(feed, pos, 1), 1, vocab))[0]     # (vocab,)


class BridgedDrafter:
    """Common part of the three bridged drafters: the draft's cache follows the view of the committed text."""

    name = "model"

    def __init__(self, draft, bridge: str, champion_vocab: int, clock=time.perf_counter):
        self.draft = draft                                 # Backend (a kv.TrackedCache: its tokens are known)
        self.bridge = bridge
        self.V = champion_vocab
        self.Vd = draft.config.vocab_size
        self.passes = 0
        self.clock = clock
        self.n = {"bridge_s": 0.0, "held_back": 0, "refed": 0, "rounds": 0, "view_full": 0}

    def target(self, seq) -> list:                         # the draft ids of the committed sequence
        raise NotImplementedError

    def max_proposals(self, seq_len_now: int) -> int:
        return 1 << 30                                     # propose() checks the draft's own context

    def catch_up(self, seq):
        """(feed, start) for the draft, or None when the draft's view of the conversation no longer fits its
        context (then nothing is proposed)."""
        t0 = self.clock()
        target = self.target(seq)
        self.n["bridge_s"] += self.clock() - t0
        if len(target) + 24 > self.draft.config.seq_len:
            self.n["view_full"] += 1
            return None
        keep = min(self.draft.common_prefix(target), len(target) - 1)
        if keep < self.draft.length:
            self.n["refed"] += self.draft.length - keep
            self.draft.truncate(keep)
        return target[keep:], keep

    def start_round(self, seq, k: int):
        """catch_up for a round of k proposals; None when there is nothing to propose."""
        if k <= 0:
            return None
        self.n["rounds"] += 1
        return self.catch_up(seq)

    def update(self, committed_len: int) -> None:
        pass                                               # the next catch_up rolls back to what the view keeps

    def stats(self) -> dict:
        r = max(1, self.n["rounds"])
        return {"bridge": self.bridge, "bridge_ms_per_round": 1000.0 * self.n["bridge_s"] / r,
                "bridge_held_back": self.n["held_back"], "bridge_refed_draft_tokens": self.n["refed"],
                "bridge_view_full_rounds": self.n["view_full"]}


class RowBridgedDrafter(BridgedDrafter):
    """remap and tli: each draft row becomes a row over champion ids, the decode loop's pick (the mode: greedy,
    coupled noise, rejection's sample and q) chooses a champion token, and the draft is fed its own token for it."""

    def champion_row(self, row):            # (draft vocab,) -> (champion vocab,)
        raise NotImplementedError

    def draft_token(self, tok: int, row) -> int:
        raise NotImplementedError

    def observe(self, row) -> None:         # diagnostics, outside the bridge's timed cost
        pass

    async def propose(self, seq, k, pick):
        cu = self.start_round(seq, k)
        if cu is None:
            return [], None
        feed, pos = cu
        props, q_rows = [], []
        for i in range(k):
            row = await _row(self.draft, feed, pos, self.Vd)
            self.passes += 1
            pos += len(feed)
            t0 = self.clock()
            row_c = self.champion_row(row)                             # (champion vocab,)
            t1 = self.clock()
            tok, q = pick(row_c, len(seq) + i)                         # the mode's pick, as for one vocabulary
            t2 = self.clock()
            feed = [self.draft_token(int(tok), row)]
            self.n["bridge_s"] += (t1 - t0) + (self.clock() - t2)
            self.observe(row)
            props.append(int(tok))
            if q is not None:
                q_rows.append(q)
        return props, (np.stack(q_rows) if q_rows else None)    # q (k, champion vocab)


class RemapDrafter(RowBridgedDrafter):
    def __init__(self, draft, idmap: IdMap, champion_vocab: int, **kw):
        super().__init__(draft, "remap", champion_vocab, **kw)
        self.map = idmap

    def target(self, seq):
        m = self.map.to_draft
        return [int(m[int(x)]) for x in seq]

    def champion_row(self, row):
        return self.map.champion_row(row, self.V)

    def draft_token(self, tok, row):
        return int(self.map.to_draft[tok])


class TliDrafter(RowBridgedDrafter):
    diagnostics = False                                    # benches: also measure the mass outside the intersection

    def __init__(self, draft, inter: Intersection, view: DraftView, champion_vocab: int, **kw):
        super().__init__(draft, "tli", champion_vocab, **kw)
        self.inter, self.view = inter, view
        self.n["outside_mass"] = 0.0
        self.n["rows"] = 0

    def target(self, seq):
        return self.view.ids(seq)

    def champion_row(self, row):
        return self.inter.champion_row(row, self.V)

    def observe(self, row):
        if self.diagnostics:
            self.n["outside_mass"] += self.inter.outside_mass(row)
            self.n["rows"] += 1

    def draft_token(self, tok, row):
        return self.inter.draft_token(tok, row)

    def stats(self) -> dict:
        s = super().stats()
        if self.n["rows"]:
            s["bridge_outside_mass"] = self.n["outside_mass"] / self.n["rows"]
        return s


class SlemDrafter(BridgedDrafter):
    """Greedy draft text, champion tokens of it (SlemAligner); q = point masses. The draft writes until k champion
    tokens are stable, at most 2k + `extra` tokens a round (its tokens and the champion's need not be one to one,
    and the last pieces are held back)."""

    def __init__(self, draft, view: DraftView, aligner: SlemAligner, champion_tok, draft_tok, champion_vocab: int,
                 extra: int = 2, **kw):
        super().__init__(draft, "slem", champion_vocab, **kw)
        self.view, self.aligner = view, aligner
        self.d = draft_tok
        self.extra = extra
        self.draft_eos = draft_tok.eos_id
        self.champion_eos = champion_tok.eos_id
        n = min(draft_tok.vocab_size, self.Vd)
        self.text_mask = np.zeros(self.Vd, dtype=bool)    # (draft vocab,) tokens that spell text
        for i in range(n):
            if draft_tok.added_content(i) is None and draft_tok._tokens[i] is not None:
                self.text_mask[i] = True
        if self.draft_eos is not None and self.draft_eos < self.Vd:
            self.text_mask[self.draft_eos] = True         # its end of text may be proposed as the champion's
        self.n["fallbacks"] = 0

    def target(self, seq):
        return self.view.ids(seq)

    async def propose(self, seq, k, pick):
        cu = self.start_round(seq, k)
        if cu is None:
            return [], None
        feed, pos = cu
        t0 = self.clock()
        self.aligner.begin(seq)
        self.n["bridge_s"] += self.clock() - t0
        new = bytearray()
        props, held = [], 0
        final = False
        room = self.draft.config.seq_len - pos - len(feed)
        for _ in range(min(2 * k + self.extra, room)):
            row = await _row(self.draft, feed, pos, self.Vd)
            self.passes += 1
            pos += len(feed)
            v = int(np.argmax(np.where(self.text_mask, row, -np.inf)))   # the draft's greedy text token
            t0 = self.clock()
            if v == self.draft_eos:
                final = True
            else:
                new += self.d.token_bytes(v)
                feed = [v]
                f0 = self.aligner.fallbacks
                props, held = self.aligner.proposals(bytes(new))
                self.n["fallbacks"] += self.aligner.fallbacks - f0
            self.n["bridge_s"] += self.clock() - t0
            if final or len(props) >= k or (self.champion_eos is not None and self.champion_eos in props):
                break
        t0 = self.clock()
        if final:
            props, held = self.aligner.proposals(bytes(new), final=True) if new else ([], 0)
            if self.champion_eos is not None:
                props.append(self.champion_eos)
        if self.champion_eos is not None and self.champion_eos in props:
            props = props[:props.index(self.champion_eos) + 1]
        if len(props) < k:
            self.n["held_back"] += min(held, k - len(props))
        self.n["bridge_s"] += self.clock() - t0
        return props[:k], None

    def stats(self) -> dict:
        s = super().stats()
        s["bridge_fallbacks"] = self.n["fallbacks"]
        return s


# ---------------------------------------------------------------------------------------------------- the pair
class BridgePair:
    """The two tokenizers' comparison and the maps a bridge needs (built on first use, kept with the draft's
    tokenizer for later generations)."""

    def __init__(self, champion_tok, draft_tok):
        self.c, self.d = champion_tok, draft_tok
        self.compat = compare(champion_tok, draft_tok)
        self._maps: dict = {}

    def _get(self, key, make):
        if key not in self._maps:
            self._maps[key] = make()
        return self._maps[key]

    def drafter(self, bridge: str, draft, champion_vocab: int, clock=None):
        kw = {} if clock is None else {"clock": clock}
        Vd = draft.config.vocab_size
        if bridge == "remap":
            m = self._get(("remap", champion_vocab, Vd), lambda: IdMap(self.c, self.d, champion_vocab, Vd))
            return RemapDrafter(draft, m, champion_vocab, **kw)
        view = self._get("view", lambda: DraftView(self.c, self.d))
        if bridge == "tli":
            inter = self._get(("tli", champion_vocab, Vd), lambda: Intersection(self.c, self.d, champion_vocab, Vd))
            return TliDrafter(draft, inter, view, champion_vocab, **kw)
        if bridge == "slem":
            aligner = self._get("slem", lambda: SlemAligner(self.c))
            return SlemDrafter(draft, view, aligner, self.c, self.d, champion_vocab, **kw)
        raise BridgeError(f"unknown bridge {bridge!r}")


def bridge_pair(champion_tok, draft_tok) -> BridgePair:
    """The BridgePair of two tokenizers, cached on the draft's tokenizer (per instance, weakly keyed by the
    champion's): comparing vocabularies and building maps costs ~0.1-1 s, a generation should not repeat it."""
    cache = draft_tok.__dict__.get("_bridges")
    if cache is None:
        cache = weakref.WeakKeyDictionary()
        draft_tok.__dict__["_bridges"] = cache
    pair = cache.get(champion_tok)
    if pair is None:
        pair = BridgePair(champion_tok, draft_tok)
        cache[champion_tok] = pair
    return pair


def make_bridged_drafter(requested: str, draft, champion_vocab: int, champion_tok, draft_tok, mode: str):
    """The drafter for a draft model with its own tokenizer: None when it shares the champion's vocabulary (use the
    plain ModelDrafter), else a bridged drafter. Raises BridgeError when the requested bridge cannot apply."""
    pair = bridge_pair(champion_tok, draft_tok)
    which = resolve(requested, pair.compat, mode)
    if which == "none":
        return None
    return pair.drafter(which, draft, champion_vocab)
