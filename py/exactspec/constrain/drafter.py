"""Grammar-forced drafting: the proposals of one JSON-mode round.

Where the grammar admits exactly one continuation (`{"name": "`, `", "age": `, a closing bracket) its tokens are
proposed by the grammar itself, any number of them, with no draft pass; at the other ("free") positions the base
drafter (draft model or n-gram) proposes under the grammar's mask, at most k of them per round. With a draft model,
a free position first looks the text so far up for a continuation (a match of 2+ tokens; extraction copies values
from the prompt) and proposes it without a draft pass; the draft model fills the rest. Copies and lookups count
toward k like the base drafter's proposals (letting them run past k was measured and not kept: README, JSON mode).
The champion verifies all of them in one pass,
each row under the grammar's mask at that position, so greedy / coupled / rejection stay exact: a forced proposal is
a point mass (q(x) = 1) like an n-gram proposal, and a draft-model proposal was drawn from its masked distribution,
which is what its q row holds.

Inside a string value, a free position first tries a copy: the value's text so far (2+ bytes) is looked up in the
text before the value (the prompt above all), and the tokens of what followed it there are proposed, as the
tokenizer writes them (`copy_tokens`). Token n-grams miss such copies: the prompt writes ` Lena Fischer` where the
answer writes `"Lena Fischer"`, so the tokens differ although the text is the same.

A forced byte string is proposed as the tokenizer writes it (`Constraint.forced`); the model mostly writes text that
way. When it does not (it prefers another split), the proposal is rejected at that row and the champion's own token
is emitted instead: speed is lost, never exactness. Such a split is learned (`learn_split`: SmolLM2 writes `{"` as
`{` + `"`): later forced runs propose that token as the champion wrote it. The splits are kept for the answer, or,
passed in by the session, for every answer of that champion.
"""
from __future__ import annotations

import numpy as np

from ..drafters.ngram import NgramDrafter

MAX_ROUND = 32           # proposals per round at most (forced + free): rows of one verify pass
COPY_MIN_BYTES = 2       # a string value's text so far must be this long before it is looked up for a copy
COPY_MAX_BYTES = 48      # the most text of a copy tokenised per lookup


def copy_tokens(vocab, text: bytes, quote_at: int) -> list[int]:
    """Token ids continuing the string value that opens at text[quote_at] ('"') by a copy: the value's bytes so
    far, text[quote_at + 1:], found last in text[:quote_at]; what followed them there (up to a newline or a quote,
    COPY_MAX_BYTES at most), tokenised as the tokenizer writes it, whole characters only. [] when none."""
    needle = text[quote_at + 1:]
    if len(needle) < COPY_MIN_BYTES or b'"' in needle or b"\\" in needle:
        return []
    at = text.rfind(needle, 0, quote_at)
    if at < 0:
        return []
    tail = text[at + len(needle): at + len(needle) + COPY_MAX_BYTES]
    for stop in (b"\n", b'"'):
        cut = tail.find(stop)
        if cut >= 0:
            tail = tail[:cut]
    while tail:
        try:
            piece = tail.decode("utf-8")
            break
        except UnicodeDecodeError:
            tail = tail[:-1]
    if not tail:
        return []
    if vocab.encode is not None:
        ids = [int(i) for i in vocab.encode(piece)]
        if b"".join(vocab.token_bytes[i] or b"\x00" for i in ids) == tail:
            return ids
    return vocab.longest_match(tail) or []


def copy_proposal(constraint, toks, state) -> list[int]:
    """The copy's first token at a free position after `toks` (prompt + answer so far) in grammar `state`, or []
    (not inside a string value, or nothing to copy): GrammarDrafter's, and bench json_mode's simulation of it."""
    if not constraint.in_free_string(state):
        return []
    tb = constraint.vocab.token_bytes
    text = b"".join(tb[t] or b"" for t in toks)
    q = text.rfind(b'"')
    return copy_tokens(constraint.vocab, text, q)[:1] if q >= 0 else []


def learn_split(vocab, splits: dict, proposed: int, written: int) -> None:
    """A forced proposal `proposed` was rejected and the champion wrote `written`: when written's bytes are a proper
    prefix of proposed's, the champion splits that token: splits[proposed] = (written, the rest as the tokenizer
    writes it). Anything else (a token that runs past it, or other bytes) teaches nothing."""
    tb = vocab.token_bytes
    a, b = tb[proposed], tb[written]
    if not a or not b or len(b) >= len(a) or not a.startswith(b) or proposed in splits:
        return
    rest = vocab.longest_match(a[len(b):]) or []
    if b"".join(tb[i] for i in rest) == a[len(b):]:
        splits[proposed] = (int(written),) + tuple(int(i) for i in rest)


def apply_splits(splits: dict, ids) -> list[int]:
    """Forced ids with every learned split applied."""
    out: list[int] = []
    for t in ids:
        out.extend(splits.get(t, (t,)))
    return out


class GrammarDrafter:
    """Wraps a drafter for JSON mode. The decode loop calls begin_round(state, budget, cap) before propose() and
    reads states / forced_flags after it."""

    name = "grammar"
    lookup_with_draft = True     # the text-so-far lookup before the draft model (bench json_mode turns it off to
                                 # measure the draft model alone)

    def __init__(self, base, constraint, use_forced: bool = True, splits: dict | None = None):
        self.base = base
        self.splits = {} if splits is None else splits   # token -> the tokens the champion writes it as (learned)
        self._proposals: list = []                       # (g,) this round's proposals
        self.constraint = constraint
        self.use_forced = use_forced
        # with a draft model, a free position first looks for a continuation in the text so far (extraction copies
        # from the prompt): a match of 2+ tokens is proposed without a draft pass
        self.lookup = NgramDrafter(max_ngram=3, min_ngram=2) \
            if self.lookup_with_draft and getattr(base, "draft", None) is not None else None
        self.copy = self.lookup is not None or getattr(base, "draft", None) is None   # copies of the prompt's text
        self.states: list = []           # (g + 1,) grammar state before each proposal, and after the last
        self.forced_flags: list = []     # (g,) True where the grammar forced the proposal
        self._budget = None
        self._cap = 0

    @property
    def passes(self) -> int:
        return getattr(self.base, "passes", 0)

    def max_proposals(self, seq_len_now: int) -> int:
        """Forced tokens need no drafter, but a draft model's cache takes them in too: its room bounds a round."""
        return self.base.max_proposals(seq_len_now) if getattr(self.base, "draft", None) is not None else 1 << 30

    def update(self, committed_len: int) -> None:
        self.base.update(committed_len)

    def begin_round(self, state, budget: int, cap: int) -> None:
        """state: the grammar state after the committed tokens; budget: tokens that may still be emitted; cap: the
        most proposals this round may carry (context, budget, draft cache)."""
        self.states = [state]
        self.forced_flags = []
        self._proposals = []
        self._budget = budget
        self._cap = max(0, min(cap, MAX_ROUND))

    def masks(self, n_rows: int) -> list:
        """(n_rows,) masks (vocab,) bool of the verify rows: row i is the position after proposals[:i]."""
        c = self.constraint
        return [c.mask(self.states[i], self._budget - i) for i in range(n_rows)]

    async def propose(self, seq, k, pick):
        """(proposals, q_rows): at most k free proposals plus the forced ones, up to the round's cap. q_rows
        (g, vocab) float64 when the base drafter sampled (rejection mode; forced and n-gram rows are point masses),
        else None."""
        c = self.constraint
        vocab_eos = set(c.vocab.eos_ids)
        proposals: list[int] = []
        q_rows: list = []
        n_free = 0
        sampled = False
        while len(proposals) < self._cap:
            st = self.states[-1]
            if c.done(st):
                break
            if self.use_forced:
                forced = apply_splits(self.splits, c.forced(st))[: self._cap - len(proposals)]
                if forced:
                    for tok in forced:
                        st = c.advance(st, tok)
                        proposals.append(tok)
                        q_rows.append(None)
                        self.states.append(st)
                        self.forced_flags.append(True)
                    continue
            # k free proposals a round, copies and lookups included: letting them run past k raised tau (to 3.39 at
            # 2k, 3.58 unbounded, from 3.17) but cost tok/s on the CPU (JSON combined vs plain 0.94x / 0.82x, from
            # 1.24x): the extra verify rows cost more than they save there (README, JSON mode)
            if n_free >= k:
                break
            mask = c.mask(st, self._budget - len(proposals))      # (vocab,) bool
            toks = copy_proposal(c, list(seq) + proposals, st) if self.copy else []
            if not toks or not mask[toks[0]]:
                toks = self.lookup.lookup(list(seq) + proposals, 1) if self.lookup is not None else []
            q = None
            if not toks or not mask[toks[0]]:
                toks, q = await self.base.propose(list(seq) + proposals, 1, lambda row, t: pick(row, t, mask))
            if not toks:
                break
            tok = int(toks[0])
            if not mask[tok]:                                      # an n-gram continuation the grammar refuses
                break
            nxt = c.advance(st, tok)
            proposals.append(tok)
            q_rows.append(None if q is None else np.asarray(q)[0])
            sampled = sampled or q is not None
            self.forced_flags.append(False)
            self.states.append(nxt)
            n_free += 1
            if tok in vocab_eos:
                break
        self._proposals = list(proposals)
        if not sampled:
            return proposals, None
        V = c.vocab.vocab_size
        rows = np.zeros((len(proposals), V), dtype=np.float64)     # (g, vocab)
        for i, (tok, q) in enumerate(zip(proposals, q_rows)):
            if q is None:
                rows[i, tok] = 1.0
            else:
                rows[i] = q
        return proposals, rows

    def state_after(self, n_accepted: int, token: int):
        """The grammar state after the accepted proposals and the champion's own token (a forced proposal it wrote
        otherwise teaches its split: learn_split)."""
        if n_accepted < len(self._proposals) and self.forced_flags[n_accepted]:
            learn_split(self.constraint.vocab, self.splits, self._proposals[n_accepted], token)
        return self.constraint.advance(self.states[n_accepted], token)
