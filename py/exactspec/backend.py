"""The backend protocol: what the decode loop needs from a model (champion or draft).

Implemented by `exactspec.reference.ReferenceModel` (numpy, CPython and Pyodide) and by the WebGPU engine
through `exactspec.bridge`. Python owns every token decision; a backend only computes logits and keeps a KV cache.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, asdict
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class ModelConfig:
    """Llama-family dimensions. One spelling everywhere (Python, JS, WGSL)."""

    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    seq_len: int            # context length
    rope_theta: float = 10000.0
    rope_dim: int = 0       # rotary dims per head; 0 means head_dim
    norm_eps: float = 1e-5
    tied_embeddings: bool = True
    arch: str = "llama"

    def to_json(self) -> dict:
        return asdict(self)


class Backend(Protocol):
    """A model with a KV cache whose logical length is `length`.

    forward(tokens, start_pos, n_out): tokens (n,) are placed at positions start_pos..start_pos+n-1.
    start_pos must equal `length` (append-only); afterwards length == start_pos + n.
    Returns logits float32 (n_out, vocab_size): the rows of the LAST n_out positions (default all n).
    For coupled/greedy exactness a backend must be batch-invariant: the row for a position is bitwise the same
    whatever n and start_pos split the tokens.
    truncate(n): O(1) rollback of the logical KV length to n <= length (no zeroing).
    """

    config: ModelConfig

    @property
    def length(self) -> int: ...

    def forward(self, tokens: Sequence[int], start_pos: int, n_out: int | None = None) -> np.ndarray: ...

    def truncate(self, n: int) -> None: ...


# ---- the batched step: the device runs ahead, Python confirms -----------------------------------------------------
# A backend MAY offer two more methods (the WebGPU engine does, through exactspec.bridge; the numpy reference does, with
# the same meaning, so the decode loop's use of them is tested in CPython). Both make several forwards in ONE
# submission with ONE readback, each pass's input token coming from the pick made on the pass before it. Picks are
# proposals only: the decode loop confirms every emitted token from the champion's own rows (exactly as without the
# batched step) and truncates what it does not confirm, so exactness never depends on a pick.
#
#   decode_ahead(token, start_pos, n, pick, rows=True, then=0, stop=()) -> Ahead   (or an awaitable of it)
#       pass 0 feeds `token` at start_pos, pass i > 0 feeds ids[i-1] at start_pos + i; afterwards
#       length == start_pos + n. A backend that offers it says how far it likes to run ahead in `ahead_max` (>= 2).
#       then > 0 is a hint: the caller's next call will likely be decode_ahead(ids[n-1], start_pos + n, then, pick,
#       rows), so a device may start those passes (a continuation) before this call returns, keeping the GPU busy
#       while the caller confirms these ids. It changes no result: that next call returns what it would have without
#       the hint, and any other call or a truncate discards the continuation (it wrote only KV positions past the
#       committed length). `stop`: the answer's EOS ids: a run whose ids hold one gets no continuation (the answer
#       ends there). A backend that runs nothing ahead ignores both.
#   spec_round(draft, feed, draft_start, k, token, start_pos, pick, rows=True, copy=()) -> Round   (or an awaitable)
#       the draft (a backend on the same device, or a wrapper of one) takes `feed` at draft_start and makes k picks,
#       feeding each back (its length becomes draft_start + len(feed) + k - 1); `copy` (at most k ids: a head's
#       copies, drafters.head.HeadDrafter.copy_of) replaces the first len(copy) picks as proposals (the draft's passes
#       are fed its own picks either way); the champion (self) takes [token, proposals...] at start_pos (its length
#       becomes start_pos + k + 1) and returns its k + 1 rows.
#   verify(tokens, start_pos, pick, rows=False) -> Ahead                    (or an awaitable of it)
#       one forward of `tokens` at start_pos (length becomes start_pos + len(tokens)) with the pick made on EVERY
#       row: ids[i] from row i (the token at absolute position start_pos + i + 1). For proposals made on the host
#       (n-gram, bridged drafts): only the picks come back, not (k + 1) rows of the whole vocabulary.
#   ngram_chain(seq, start_pos, rounds, k, pick, min_ngram, max_ngram, then=0, stop=()) -> Chain  (or an awaitable)
#       the n-gram drafter's rounds made by the device, `rounds` of them in ONE submission: seq is every token so far,
#       its last at start_pos not yet in the cache (start_pos == len(seq) - 1 == length). Round r looks up at most k
#       proposals in the sequence as it stands (drafters.ngram.NgramDrafter(max_ngram, min_ngram).lookup, cut to
#       seq_len - 1 - len(seq) so that every row fits the cache; none found: a one-row pass), verifies [seq[-1],
#       proposals] in one forward with the pick on every row, and appends the a proposals the picks accept
#       (accepted_by_picks) and the pick after them. Afterwards length == len(seq) - 1 for the grown seq. `then` and
#       `stop` are decode_ahead's hint: the next call ngram_chain(grown seq, ..., then rounds, same k, pick, sizes) may
#       be started before this returns; none after a chain that appended a stop id. Ids only: for greedy picks they
#       are the champion's argmax, so the decode loop emits each round's accepted proposals and the pick after them
#       as its verify would (the proposals only have to be good; the picks decide). A device that offers it says how
#       many rounds a call should make in `chain_rounds` (>= 1) and the largest k it takes in `chain_k_max`.
#   spec_chain(draft, seq, draft_start, rounds, k, pick, restart=False, then=0, stop=(), copy=None) -> Chain
#       spec_round's rounds made by the device, `rounds` of them in ONE submission, greedy picks only: seq is every
#       token so far, its last at start_pos = len(seq) - 1 == length not yet in the cache; the draft holds draft_start
#       positions and round 0 feeds it seq[draft_start:] (1 to k + 1 tokens). Each round is spec_round(draft,
#       seq[D:], D, k, seq[-1], len(seq) - 1, pick) on the sequence as it stands, then appends the a proposals the
#       picks accept and the pick after them, and keeps of the draft's cache what a drafter's update() keeps: D =
#       min(draft length, len(grown seq) - 1), with `restart` (a draft head, whose positions from the round's first
#       on came from its own predicted features) also at most the round's first position. Afterwards length ==
#       len(grown seq) - 1 and the draft holds D positions. A device that offers it says how many rounds a call should
#       make in `chain_rounds` and the largest k in `chain_k_max` (as for ngram_chain). `then` and `stop` are
#       ngram_chain's hint: the next call spec_chain(draft, grown seq, the draft's length then, then rounds, same k,
#       pick, restart) may be started before this returns; none after a chain that appended a stop id. copy
#       (min_ngram, max_ngram) or None: each round's spec_round gets copy = the n-gram lookup over the sequence as it
#       stands (NgramDrafter(max_ngram, min_ngram).lookup(seq, k)), as a HeadDrafter with copy makes them.
# With rows=False only the ids come back; then, for greedy picks, ids[i] is exactly argmax(rows[i]) (ties -> lowest id).


@dataclass(frozen=True)
class Pick:
    """How a device picks a token from a logits row it has just computed.

    temperature == 0: greedy, argmax of the row, ties -> the lowest id.
    temperature > 0 (coupled mode): argmax_v(z[v] + g[t, v]) with z the row's scaled logits (row / temperature, -inf
    outside top_k / top_p) and g the Gumbel noise of `sampling.Rng(seed).gumbel(t, vocab)`, t the absolute position
    of the token being picked: the decode loop's own pick. The numpy reference computes exactly that; a GPU computes
    argmax(row / temperature + g) in f32 without top_k / top_p (a pick the champion does not confirm costs speed,
    never exactness).
    """

    temperature: float = 0.0
    seed: int = 0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Ahead:
    ids: list                       # (n,) ids[i]: the pick from row i, i.e. for absolute position start_pos + i + 1
    rows: "np.ndarray | None"       # (n, vocab) float32 logits, or None when rows were not asked for


@dataclass
class Round:
    proposals: list                 # (k,) the proposals for positions start_pos + 1 .. start_pos + k: the draft's
                                    # picks, the first len(copy) replaced by spec_round's copy
    ids: list                       # (k + 1,) the champion's picks from its rows
    rows: "np.ndarray | None"       # (k + 1, vocab) float32 champion logits, or None
    draft_picks: "list | None" = None   # (k,) what the draft's passes picked (and were fed) if a copy replaced any


@dataclass
class Chain:
    proposals: list                 # (rounds,) round r's c_r proposals (lists)
    ids: list                       # (rounds,) the picks on round r's c_r + 1 rows (lists)
    accepted: list                  # (rounds,) a_r: how many of round r's proposals its picks accept

    def appended(self) -> list:
        """The tokens the chain appended: each round's accepted proposals and the pick after them."""
        out = []
        for p, i, a in zip(self.proposals, self.ids, self.accepted):
            out += list(p[:a]) + [i[a]]
        return out


def with_copy(copy, picks) -> list[int]:
    """A round's proposals: a head's copies (HeadDrafter.copy_of) in place of the draft's first picks, the rest its
    own (spec_round's copy; the one rule for the host's drafter, the reference and the bridge)."""
    return [int(x) for x in copy] + [int(x) for x in picks[len(copy):]]


def accepted_by_picks(proposals, ids) -> int:
    """a: how many of the proposals the picks on the rows before them accept, in order (ids[i] is the pick on the row
    fed the token before proposals[i]): verify.accept_while_equal's rule."""
    from .verify import accept_while_equal
    return len(accept_while_equal([int(p) for p in proposals], lambda i: ids[i])) - 1


def chain_from_flat(counts, accepted, proposals, ids, k: int, what: str = "ngram_chain") -> Chain:
    """A Chain from a device's flat arrays (proposals and ids round after round), checked: every count in 0..k, and
    each round's acceptance by accepted_by_picks equal to the device's."""
    props, picks, p0, i0 = [], [], 0, 0
    for r, (c, a) in enumerate(zip(counts, accepted)):
        if not 0 <= c <= k:
            raise ValueError(f"{what}: round {r} has {c} proposals, k is {k}")
        props.append([int(x) for x in proposals[p0:p0 + c]])
        picks.append([int(x) for x in ids[i0:i0 + c + 1]])
        p0, i0 = p0 + c, i0 + c + 1
        if accepted_by_picks(props[-1], picks[-1]) != a:
            raise ValueError(f"{what}: round {r}: the device accepted {a} proposals, its picks say otherwise")
    return Chain(props, picks, [int(a) for a in accepted])


def pick_row(row: np.ndarray, pick: Pick, t: int) -> int:
    """The reference pick: the decode loop's own (see Pick)."""
    from .sampling import Rng, SamplingParams, scaled_logits
    z = scaled_logits(row, SamplingParams(pick.temperature, pick.top_k, pick.top_p))   # (vocab,) float64
    if pick.greedy:
        return int(np.argmax(z))
    return Rng(pick.seed).gumbel_argmax(z, t)


async def _await(x):
    if inspect.isawaitable(x):
        x = await x
    return x


async def decode_ahead_by_forwards(model, token: int, start_pos: int, n: int, pick: Pick, rows: bool = True,
                                   picker=pick_row, then: int = 0, stop=()) -> Ahead:
    """decode_ahead made of n one-token forwards (the numpy reference's implementation; a reference for devices).
    `then` and `stop` (the continuation hint) are ignored: the passes run when asked for."""
    ids, out = [], []
    tok = int(token)
    for i in range(n):
        r = np.asarray(await _await(model.forward([tok], start_pos + i, 1)), dtype=np.float32)[0]   # (vocab,)
        tok = int(picker(r, pick, start_pos + i + 1))
        ids.append(tok)
        out.append(r)
    return Ahead(ids, np.stack(out) if rows else None)                         # rows (n, vocab)


async def spec_round_by_forwards(model, draft, feed, draft_start: int, k: int, token: int, start_pos: int,
                                 pick: Pick, rows: bool = True, picker=pick_row, copy=()) -> Round:
    """spec_round made of the draft's k forwards and one champion forward (the numpy reference's implementation)."""
    copy = [int(x) for x in copy]
    if len(copy) > k:
        raise ValueError(f"spec_round: {len(copy)} copied proposals exceed k = {k}")
    proposals = []
    f = [int(x) for x in feed]
    pos = draft_start
    for i in range(k):
        r = np.asarray(await _await(draft.forward(f, pos, 1)), dtype=np.float32)[0]                # (vocab,)
        pos += len(f)
        tok = int(picker(r, pick, start_pos + 1 + i))
        proposals.append(tok)
        f = [tok]
    picks, proposals = proposals, with_copy(copy, proposals)
    logits = np.asarray(await _await(model.forward([int(token)] + proposals, start_pos, k + 1)), dtype=np.float32)
    ids = [int(picker(logits[i], pick, start_pos + 1 + i)) for i in range(k + 1)]
    return Round(proposals, ids, logits if rows else None, picks if copy else None)   # rows (k + 1, vocab)


async def verify_by_forwards(model, tokens, start_pos: int, pick: Pick, rows: bool = False,
                             picker=pick_row) -> Ahead:
    """verify made of one forward and the picks on its rows (the numpy reference's implementation)."""
    toks = [int(x) for x in tokens]
    logits = np.asarray(await _await(model.forward(toks, start_pos, len(toks))), dtype=np.float32)   # (n, vocab)
    ids = [int(picker(logits[i], pick, start_pos + 1 + i)) for i in range(len(toks))]
    return Ahead(ids, logits if rows else None)


async def ngram_chain_by_forwards(model, seq, start_pos: int, rounds: int, k: int, pick: Pick, min_ngram: int,
                                  max_ngram: int, picker=pick_row) -> Chain:
    """ngram_chain made of the n-gram drafter's lookups and verify_by_forwards (the numpy reference's implementation;
    a reference for devices)."""
    from .drafters.ngram import NgramDrafter
    seq = [int(x) for x in seq]
    if start_pos != len(seq) - 1:
        raise ValueError(f"ngram_chain: start_pos {start_pos} must be len(seq) - 1 = {len(seq) - 1}")
    if start_pos + rounds * (k + 1) > model.config.seq_len:
        raise ValueError(f"ngram_chain: {rounds} rounds of {k + 1} rows from {start_pos} exceed seq_len "
                         f"{model.config.seq_len}")
    lookup = NgramDrafter(max_ngram, min_ngram).lookup
    props, picks, acc = [], [], []
    for _ in range(rounds):
        L = len(seq)
        p = lookup(seq, k)[:max(0, model.config.seq_len - 1 - L)]
        v = await verify_by_forwards(model, [seq[-1]] + p, L - 1, pick, False, picker=picker)
        a = accepted_by_picks(p, v.ids)
        model.truncate(L + a)
        seq += p[:a] + [int(v.ids[a])]
        props.append(p)
        picks.append([int(x) for x in v.ids])
        acc.append(a)
    return Chain(props, picks, acc)


async def spec_chain_by_forwards(model, draft, seq, draft_start: int, rounds: int, k: int, pick: Pick,
                                 restart: bool = False, picker=pick_row, copy=None) -> Chain:
    """spec_chain made of spec_round_by_forwards rounds (the numpy reference's implementation; a reference for
    devices). copy: (min_ngram, max_ngram) of each round's copies, or None."""
    from .drafters.ngram import NgramDrafter
    lookup = NgramDrafter(copy[1], copy[0]).lookup if copy else (lambda s, n: [])
    seq = [int(x) for x in seq]
    L = len(seq)
    if not pick.greedy:
        raise ValueError("spec_chain: greedy picks only (the rounds close on the picks)")
    if not 1 <= L - draft_start <= k + 1:
        raise ValueError(f"spec_chain: the draft is fed seq[{draft_start}:], {L - draft_start} tokens; 1 to k + 1 = "
                         f"{k + 1} may be")
    if L - 1 + rounds * (k + 1) > model.config.seq_len:
        raise ValueError(f"spec_chain: {rounds} rounds of {k + 1} rows from {L - 1} exceed seq_len "
                         f"{model.config.seq_len}")
    D = draft_start
    props, picks, acc = [], [], []
    for _ in range(rounds):
        L = len(seq)
        draft.truncate(D)
        r = await spec_round_by_forwards(model, draft, seq[D:], D, k, seq[-1], L - 1, pick, False, picker=picker,
                                         copy=lookup(seq, k))
        a = accepted_by_picks(r.proposals, r.ids)
        seq += [int(x) for x in r.proposals[:a]] + [int(r.ids[a])]
        model.truncate(len(seq) - 1)
        D = min(draft.length, len(seq) - 1, L if restart else len(seq))
        props.append([int(x) for x in r.proposals])
        picks.append([int(x) for x in r.ids])
        acc.append(a)
    draft.truncate(D)
    return Chain(props, picks, acc)


class RunsAhead:
    """A backend with decode_ahead made of its forwards (decode_ahead_by_forwards; the hint `then` ignored), as a
    device that likes to run ahead `ahead_max` passes: how CPython drives the decode loop's run-ahead path (tests,
    bench ngram_tau). `calls`: (token, start_pos, n, then) of every decode_ahead."""

    def __init__(self, inner, ahead_max: int = 8, picker=pick_row, chain_rounds: int = 0, rounds: bool = False):
        self.inner, self.config, self.ahead_max, self.picker = inner, inner.config, ahead_max, picker
        self.chain_rounds = chain_rounds
        self.chain_k_max = 64
        self.rounds = rounds         # also spec_round, and with chain_rounds spec_chain (a draft's rounds on the device)
        self.calls: list[tuple[int, int, int, int]] = []
        self.chain_calls: list[tuple[int, int, int, int]] = []    # (start_pos, rounds, k, then) of every ngram_chain
        self.spec_chain_calls: list[tuple] = []      # (start_pos, draft_start, rounds, k, then) of every spec_chain

    @property
    def length(self) -> int:
        return self.inner.length

    def forward(self, *a, **k):
        return self.inner.forward(*a, **k)

    def truncate(self, n: int) -> None:
        self.inner.truncate(n)

    def decode_ahead(self, token, start_pos, n, pick, rows=True, then=0, stop=()):
        self.calls.append((int(token), start_pos, n, then))
        return decode_ahead_by_forwards(self.inner, token, start_pos, n, pick, rows, picker=self.picker)

    def offers(self, method: str) -> bool:
        if method == "ngram_chain":
            return self.chain_rounds > 0
        if method == "spec_chain":
            return self.chain_rounds > 0 and self.rounds
        if method == "spec_round":
            return self.rounds
        return callable(getattr(self, method, None))

    def ngram_chain(self, seq, start_pos, rounds, k, pick, min_ngram, max_ngram, then=0, stop=()):
        self.chain_calls.append((start_pos, rounds, k, then))
        return ngram_chain_by_forwards(self.inner, seq, start_pos, rounds, k, pick, min_ngram, max_ngram,
                                       picker=self.picker)

    def spec_round(self, draft, feed, draft_start, k, token, start_pos, pick, rows=True, copy=()):
        return spec_round_by_forwards(self.inner, draft, feed, draft_start, k, token, start_pos, pick, rows,
                                      picker=self.picker, copy=copy)

    def spec_chain(self, draft, seq, draft_start, rounds, k, pick, restart=False, then=0, stop=(), copy=None):
        self.spec_chain_calls.append((len(seq) - 1, draft_start, rounds, k, then))
        return spec_chain_by_forwards(self.inner, draft, seq, draft_start, rounds, k, pick, restart,
                                      picker=self.picker, copy=copy)


def offers(backend, method: str) -> bool:
    """Does the backend (or what a wrapper wraps) offer `method` ('decode_ahead', 'spec_round', 'verify',
    'ngram_chain', 'spec_chain')?"""
    if backend is None:
        return False
    f = getattr(backend, "offers", None)
    if callable(f):
        return bool(f(method))
    return callable(getattr(backend, method, None))


def offered_count(obj, attr: str, offered: bool) -> int:
    """A device's count `attr` of `obj` (ahead_max, chain_rounds, ...; 0 where it names none), or 0 where the method it
    belongs to is not offered."""
    return int(getattr(obj, attr, 0) or 0) if offered else 0


class PassThrough:
    """What a backend wrapper (kv.TrackedCache, session.YieldingBackend) passes through from the backend it wraps,
    `self.wrapped`: the batched step's ahead_max and k_limit (0 where that backend names none) and offers()."""

    @property
    def ahead_max(self) -> int:
        return offered_count(self.wrapped, "ahead_max", True)

    @property
    def chain_rounds(self) -> int:
        """Rounds one ngram_chain should make on this device (0: it offers none)."""
        return offered_count(self.wrapped, "chain_rounds", self.offers("ngram_chain"))

    @property
    def chain_k_max(self) -> int:
        """The most proposals a round of ngram_chain may verify on this device."""
        return offered_count(self.wrapped, "chain_k_max", self.offers("ngram_chain"))

    @property
    def k_limit(self) -> int:
        """The most proposals a round should make on this device (0: unknown; the additive k schedule's limit)."""
        return int(getattr(self.wrapped, "k_limit", 0) or 0)

    def offers(self, method: str) -> bool:
        return offers(self.wrapped, method)


def base_of(backend, wrapper_type):
    """Strip one wrapper layer of `wrapper_type` (its `.inner`), so a wrapped draft reaches the layer below."""
    return backend.inner if isinstance(backend, wrapper_type) else backend
