"""Prompt n-gram lookup drafter: continue the most recent earlier occurrence of the sequence's suffix.

Its proposals are deterministic given the sequence: q is a point mass (q(x) = 1), which the verifiers handle exactly.
"""
from __future__ import annotations


class NgramDrafter:
    name = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not (1 <= min_ngram <= max_ngram):
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.passes = 0  # no model passes

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

    async def propose(self, seq, k, pick):
        if k <= 0:
            return [], None
        return self.lookup(seq, k), None

    def update(self, committed_len: int) -> None:
        pass
