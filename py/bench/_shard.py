"""--shard I/N for the CPU benches that split a run over processes (py/bench/foreign.py, head_acceptance.py): the
prompts whose index is I modulo N."""
from __future__ import annotations


def parse_shard(text):
    """'I/N' -> (I, N) with 0 <= I < N; None -> None."""
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard wants I/N (for example 0/4), not {text!r}")
    if not 0 <= i < n:
        raise SystemExit(f"--shard {text}: I must be in 0..N-1")
    return i, n


def in_shard(index: int, shard) -> bool:
    """Whether the item at `index` belongs to `shard` ((I, N), or None: no sharding)."""
    return shard is None or index % shard[1] == shard[0]
