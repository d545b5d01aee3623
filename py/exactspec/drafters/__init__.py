"""Drafters: what proposes tokens for the champion to verify. One two-method interface:

    proposals, q_rows = await drafter.propose(seq, k, pick)
    drafter.update(committed_len)

`seq` is the committed sequence (prompt + generated). `pick(logits_row, t) -> (token, q_row | None)` is supplied by
the decode loop and encodes the mode: coupled (argmax of scaled logits + the position's shared Gumbel noise),
rejection (sample from the declared distribution with the draft stream's uniform at t) or greedy. `q_rows`
(len(proposals), vocab) float64 are the distributions the proposals were actually drawn from, or None for a
point-mass drafter (n-gram). `update` is called after every round with the committed length so a drafter can roll
its own state back (the draft model's KV cache) to what is still valid.
"""
from __future__ import annotations

from typing import Awaitable, Callable, Protocol, Sequence

import numpy as np

from .head import HeadDrafter
from .model import ModelDrafter
from .ngram import NgramDrafter

Pick = Callable[[np.ndarray, int], "tuple[int, np.ndarray | None]"]


class Drafter(Protocol):
    name: str

    def propose(self, seq: Sequence[int], k: int, pick: Pick) -> Awaitable[tuple[list[int], np.ndarray | None]]: ...

    def update(self, committed_len: int) -> None: ...

    def max_proposals(self, seq_len_now: int) -> int: ...


class NoDrafter:
    """Speculation off: proposes nothing; every round is one champion pass."""

    name = "none"

    async def propose(self, seq, k, pick):
        return [], None

    def update(self, committed_len: int) -> None:
        pass

    def max_proposals(self, seq_len_now: int) -> int:
        return 0


def make_drafter(kind: str, draft=None, vocab_size: int | None = None, stop: float = 0.0, *, bridge: str = "auto",
                 tokenizer=None, draft_tokenizer=None, mode: str = "coupled", head_copy: bool = False,
                 **opts) -> "Drafter":
    """The drafter for `kind`. stop: the confidence stop of a model or head draft (0 = off; see ModelDrafter).
    A draft model with its own tokenizer (draft_tokenizer and the champion's tokenizer given) that differs from the
    champion's gets a bridged drafter (exactspec.vocab: remap, tli or slem, `bridge` 'auto' choosing from the two
    tokenizers and the mode: greedy, coupled or rejection). head_copy: a head's rounds take the n-gram's copies first
    (HeadDrafter's copy)."""
    if kind == "none":
        return NoDrafter()
    if kind == "ngram":
        return NgramDrafter(**opts)
    if kind in ("model", "head"):
        if draft is None:
            raise ValueError(f"drafter {kind!r} needs a draft {'head' if kind == 'head' else 'model'} (none was given)")
        if kind == "model" and tokenizer is not None and draft_tokenizer is not None and vocab_size is not None:
            from ..vocab import make_bridged_drafter
            bridged = make_bridged_drafter(bridge, draft, vocab_size, tokenizer, draft_tokenizer, mode)
            if bridged is not None:
                return bridged
        elif kind == "model" and bridge != "auto":
            raise ValueError(f"bridge {bridge!r} needs both tokenizers (the draft's file carries none?)")
        if vocab_size is not None and draft.config.vocab_size != vocab_size:
            raise ValueError(
                f"draft vocab_size {draft.config.vocab_size} != champion vocab_size {vocab_size}: "
                "the draft must share the champion's tokenizer"
            )
        if kind == "head":
            return HeadDrafter(draft, stop=stop, copy=head_copy)
        return ModelDrafter(draft, stop=stop)
    from ..settings import DRAFTERS
    raise ValueError(f"unknown drafter {kind!r}: expected one of {', '.join(DRAFTERS)}")


__all__ = ["Drafter", "NoDrafter", "ModelDrafter", "HeadDrafter", "NgramDrafter", "make_drafter", "Pick"]
