"""Draft-model drafter: a small model with the champion's tokenizer proposes k tokens autoregressively."""
from __future__ import annotations

import inspect

import numpy as np


async def call_backend(result, n_rows: int, vocab: int) -> np.ndarray:
    """Await a backend result if needed and return it as float32 (n_rows, vocab)."""
    if inspect.isawaitable(result):
        result = await result
    arr = np.asarray(result, dtype=np.float32)
    if arr.size != n_rows * vocab:
        raise RuntimeError(f"backend returned {arr.size} logits, expected {n_rows} x {vocab}")
    return arr.reshape(n_rows, vocab)


def top_probability(row: np.ndarray) -> float:
    """The draft's own top probability at this row: max softmax(row) (temperature 1)."""
    z = np.asarray(row, dtype=np.float64)                                       # (vocab,)
    return float(1.0 / np.sum(np.exp(z - np.max(z))))


class ModelDrafter:
    """stop > 0 (the confidence stop, SpecDec++/DISCO style): after the first proposal the draft halts as soon as
    its own top probability at a row falls below `stop`; that row's token is not proposed."""

    name = "model"
    restarts = False   # spec_chain's `restart`: a round feeds the draft from what update() kept, not earlier

    def __init__(self, draft, stop: float = 0.0):
        self.draft = draft  # Backend
        self.stop = float(stop)
        self.passes = 0

    def max_proposals(self, seq_len_now: int) -> int:
        # the draft processes positions up to seq_len_now - 2 + k
        return max(0, self.draft.config.seq_len - seq_len_now + 1)

    def catch_up(self, seq) -> tuple[list[int], int]:
        """(feed, start): the committed tokens the draft has not seen, ending with the last one, and where they go."""
        start = self.draft.length
        if start > len(seq) - 1:
            self.draft.truncate(len(seq) - 1)
            start = len(seq) - 1
        return [int(x) for x in seq[start:]], start   # feed (n,)

    async def propose(self, seq, k, pick):
        if k <= 0:
            return [], None
        V = self.draft.config.vocab_size
        feed, start = self.catch_up(seq)
        proposals: list[int] = []
        q_rows: list[np.ndarray] = []
        pos = start
        for i in range(k):
            row = (await call_backend(self.draft.forward(feed, pos, 1), 1, V))[0]  # (vocab,)
            self.passes += 1
            pos += len(feed)
            if i > 0 and self.stop > 0 and top_probability(row) < self.stop:
                break
            tok, q = pick(row, len(seq) + i)
            proposals.append(int(tok))
            if q is not None:
                q_rows.append(q)
            feed = [int(tok)]
        q_arr = np.stack(q_rows) if q_rows else None  # (k, vocab)
        return proposals, q_arr

    def chain_round(self, t0: int) -> None:
        """A round of a chain made by the device (backend spec_chain) emits from absolute position t0, as catch_up
        at that point would have said; the draft's cache is the device's."""

    def update(self, committed_len: int) -> None:
        keep = min(self.draft.length, committed_len - 1)
        if keep < self.draft.length:
            self.draft.truncate(max(0, keep))
