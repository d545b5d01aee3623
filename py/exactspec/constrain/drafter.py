"""Grammar-forced drafting: the proposals of one JSON-mode round.

Where the grammar admits exactly one continuation (`{"name": "`, `", "age": `, a closing bracket) its tokens are
proposed by the grammar itself, any number of them, with no draft pass; at the other ("free") positions the base
drafter (draft model or n-gram) proposes under the grammar's mask, at most k of them per round. With a draft model,
a free position first looks the text so far up for a continuation (a match of 2+ tokens; extraction copies values
from the prompt) and proposes it without a draft pass; the draft model fills the rest. The champion verifies all of them in one pass,
each row under the grammar's mask at that position, so greedy / coupled / rejection stay exact: a forced proposal is
a point mass (q(x) = 1) like an n-gram proposal, and a draft-model proposal was drawn from its masked distribution,
which is what its q row holds.

A forced byte string is proposed as the tokenizer writes it (`Constraint.forced`); the model mostly writes text that
way. When it does not (it prefers another split), the proposal is rejected at that row and the champion's own token
is emitted instead: speed is lost, never exactness.
"""
from __future__ import annotations

import numpy as np

from ..drafters.ngram import NgramDrafter

MAX_ROUND = 32           # proposals per round at most (forced + free): rows of one verify pass


class GrammarDrafter:
    """Wraps a drafter for JSON mode. The decode loop calls begin_round(state, budget, cap) before propose() and
    reads states / forced_flags after it."""

    name = "grammar"
    lookup_with_draft = True     # the text-so-far lookup before the draft model (bench json_mode turns it off to
                                 # measure the draft model alone)

    def __init__(self, base, constraint, use_forced: bool = True):
        self.base = base
        self.constraint = constraint
        self.use_forced = use_forced
        # with a draft model, a free position first looks for a continuation in the text so far (extraction copies
        # from the prompt): a match of 2+ tokens is proposed without a draft pass
        self.lookup = NgramDrafter(max_ngram=3, min_ngram=2) \
            if self.lookup_with_draft and getattr(base, "draft", None) is not None else None
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
                forced = c.forced(st)[: self._cap - len(proposals)]
                if forced:
                    for tok in forced:
                        st = c.advance(st, tok)
                        proposals.append(tok)
                        q_rows.append(None)
                        self.states.append(st)
                        self.forced_flags.append(True)
                    continue
            if n_free >= k:
                break
            mask = c.mask(st, self._budget - len(proposals))      # (vocab,) bool
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
        """The grammar state after the accepted proposals and the champion's own token."""
        return self.constraint.advance(self.states[n_accepted], token)
