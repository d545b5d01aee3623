"""Prompt n-gram lookup drafter: continue the most recent earlier occurrence of the sequence's suffix.

Its proposals are deterministic given the sequence: q is a point mass (q(x) = 1), which the verifiers handle exactly.

The suffix must match at least MIN_NGRAM = 2 tokens: a match of the last token alone proposes whatever followed its
previous occurrence, which the champion seldom continues, and every such round pays a verify of k + 1 rows where
running the champion ahead costs one pass a token. Over the 136 workload prompts' greedy answers at k = 4
(`python build.py bench ngram_tau`, bench/results/ngram/): with 1-token matches 18-44% of the rounds verified, for
1.60-3.54 tokens each (by stratum); with 2+ tokens 2-17% of them, for 2.22-4.65 tokens. On the H200 through the
product's loop, with the loop's hinted runs ahead (bench/h200/results/2026-12-04c/): 0.96-1.62x of the champion alone
by stratum against 0.72-1.77x before.
"""
from __future__ import annotations


MAX_NGRAM = 3   # the longest suffix tried first
MIN_NGRAM = 2   # the shortest suffix that may propose (see the module's docstring)
# JSON mode's free positions (exactspec.constrain.drafter wraps this drafter): 1. Its rounds are verified one forward
# at a time, never run ahead, and the grammar's forced tokens follow a lookup: over the 12 strict-JSON workload
# prompts (`python build.py bench json_mode --configs ngram+forced`) 152 target passes with 1, 160 with 2.
MIN_NGRAM_JSON = 1


class NgramDrafter:
    name = "ngram"

    def __init__(self, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM):
        if not (1 <= min_ngram <= max_ngram):
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.passes = 0  # no model passes
        self._grams, self._indexed, self._first = set(), 0, ()   # has_match's index

    def max_proposals(self, seq_len_now: int) -> int:
        return 1 << 30

    def lookup(self, seq, k: int) -> list[int]:
        n_seq = len(seq)
        for n in range(min(self.max_ngram, n_seq - 1), self.min_ngram - 1, -1):
            pattern = list(seq[n_seq - n:])
            first = pattern[0]
            # most recent earlier occurrence whose continuation is non-empty
            for i in range(n_seq - n - 1, -1, -1):
                if seq[i] == first and list(seq[i:i + n]) == pattern:
                    cont = list(seq[i + n:i + n + k])
                    if cont:
                        return [int(x) for x in cont]
        return []

    def has_match(self, seq) -> bool:
        """Would lookup(seq, k) find proposals? A match of any length >= min_ngram contains one of min_ngram at the
        same start, so only that length is looked for, in an index of the sequence's min_ngram-grams kept from call to
        call (the decode loop asks every plain round while the device's chains are off, to probe a chain where a copy
        is at hand; its sequence only grows, and a shorter one rebuilds the index)."""
        n, L = self.min_ngram, len(seq)
        if L - 1 < n:
            return False
        if self._indexed > L - n or (self._indexed and tuple(seq[:n]) != self._first):
            self._grams, self._indexed = set(), 0
        for i in range(self._indexed, L - n):        # the n-grams at starts 0 .. L - n - 1 (each has a continuation)
            self._grams.add(tuple(seq[i:i + n]))
        self._indexed, self._first = L - n, tuple(seq[:n])
        return tuple(seq[L - n:]) in self._grams

    async def propose(self, seq, k, pick):
        if k <= 0:
            return [], None
        return self.lookup(seq, k), None

    def update(self, committed_len: int) -> None:
        pass
