"""The generation loop: drafts, verifies, commits, rolls back. Python decides every token.

Invariants at the start of each round (seq = prompt + committed tokens):
- champion.length == len(seq) - 1: every committed token but the last is in its KV cache. The round feeds
  [seq[-1], x_1..x_k] at position len(seq) - 1 and gets k+1 logits rows (row i is the distribution of the token at
  absolute position len(seq) + i).
- The draft's KV holds a prefix of seq; the drafter catches up on what it has not seen (the last emitted token
  included) before proposing.
After verification the accepted prefix plus one champion token are committed and both caches roll back (O(1), the
logical length moves) to what is still valid. Cancellation and backend faults leave the result at the last committed
prefix, which is what the caller has streamed: nothing is shown twice or lost.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .backend import Pick
from .drafters import make_drafter
from .drafters.ngram import MIN_NGRAM_JSON
from .kv import track
from .drafters.model import call_backend
from .sampling import STREAM_DRAFT, STREAM_SAMPLE, Rng, SamplingParams, probs_from_scaled, sample_index, scaled_logits
from .schedule import SpecScheduler
from .settings import DEFAULTS, K_LIMIT_DEFAULT, LIMITS, SettingsError, check
from . import verify


# The most passes a run ahead takes while a drafter is on (it looks for proposals again after each run); each run's
# successor is hinted (decode_ahead's `then`), so the device is not idle between runs. Measured on the H200 through
# the product's loop with the n-gram drafter (bench/h200/results/2026-12-04c/, medians over 1-7 runs of bench
# product): 4 never fell below 0.96x of the champion alone on any stratum; 2 won where copies are found often
# (repetitive text 1.79x against 1.62x) but lost on chat (ambiguity 0.83x); 1 lost almost everywhere (the loop's own
# turnaround exceeds a pass); 8, or runs growing from 2 to 8 while nothing is found, found copies too late.
AHEAD_WITH_DRAFTER = 4
# "Only while it pays" with chains (the n-gram drafter's rounds made by the device) off: a copy at hand probes a chain
# once this many plain rounds have run since the last chain. On the H200 through the product's loop, probing at once
# (no gap) switched chains on and off where 2-token repeats are common but seldom continue (ambiguity 0.84-0.88x,
# strict JSON 0.82-0.91x against 0.90-1.05x forced; bench/h200/results/2026-12-04f, call 21).
CHAIN_PROBE_GAP = 4
# Chains (the n-gram drafter's rounds made by the device) from CHAIN_LONG_POS positions on make at most CHAIN_LONG_K
# proposals a round, whatever k the setting allows (a speed choice only: every token is still the verifier's). A chain
# round that finds nothing costs more at k = 4 than at k = 3 the longer the context (bench/gpu/bench.mjs CHAIN=1 on an
# H100, GPU ms a round against a chained pass: +1% at position 64, +5% at 512, +7% at 1,024, +8% at 1,870), and on the
# long-context stratum (prompts of ~1,870 tokens) k = 4's chains ran 1.09x the time of k = 3's through the product's
# loop, forced and "only while it pays" alike (3 sides each, the champion alone 1.01; bench/h200/results/2026-12-07c
# call 9). No other stratum reaches 1,024 positions; below it k = 4 stays ahead where long copies come. Since the engine
# dispatches a chain round's attention with rows in z (engine option attnRowsZ, 2026-12-07d) the empty rounds cost
# the same at k = 3 and 4 (1.362 / 1.368 ms at 1,870), so that reason is gone; lifting the cap measured no gain on the
# long-context stratum (its answers copy little), so it stays.
CHAIN_LONG_POS = 1024
CHAIN_LONG_K = 3


def chain_k_at(k: int, t0: int) -> int:
    """The proposals a round of a chain from absolute position t0 makes at most where the setting allows k: k, at most
    CHAIN_LONG_K from CHAIN_LONG_POS on (the decode loop's chains; exactspec.timing times them so)."""
    return min(k, CHAIN_LONG_K) if t0 >= CHAIN_LONG_POS else k


class BackendError(RuntimeError):
    """A backend (champion or draft) failed during a forward pass (e.g. WebGPU device lost). source: 'champion',
    'draft', or 'round' (a batched step running both on the device)."""

    def __init__(self, message: str, source: str = "champion"):
        super().__init__(message)
        self.source = source


@dataclass
class GenerateConfig:
    """One generation's settings (defaults and limits: exactspec.settings, the one definition)."""

    max_new_tokens: int = DEFAULTS["max_new_tokens"]
    temperature: float = DEFAULTS["temperature"]
    top_k: int = DEFAULTS["top_k"]
    top_p: float = DEFAULTS["top_p"]
    seed: int = DEFAULTS["seed"]
    mode: str = DEFAULTS["mode"]
    k: int = DEFAULTS["k"]
    k_schedule: str = DEFAULTS["k_schedule"]     # 'fixed' | 'additive' (exactspec.settings.K_SCHEDULES)
    draft_stop: float = DEFAULTS["draft_stop"]   # confidence stop of a model/head draft (0 = off)
    head_copy: bool = DEFAULTS["head_copy"]      # a head's rounds take the n-gram's copies first (HeadDrafter.copy)
    drafter: str = DEFAULTS["drafter"]
    bridge: str = DEFAULTS["bridge"]       # a draft model with another tokenizer (exactspec.vocab)
    stop: Sequence[str] = ()
    adaptive: bool = DEFAULTS["adaptive"]   # let the scheduler turn speculation off when it does not pay
    batched: bool = True     # use the backend's batched step (decode_ahead / spec_round) where it offers one
    grammar_draft: bool = DEFAULTS["grammar_draft"]   # JSON mode: the grammar proposes the tokens it forces
    response_format: dict | None = None     # JSON mode (exactspec.constrain.schema.parse_response_format)

    def validate(self) -> None:
        try:
            check({n: getattr(self, n) for n in ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "mode",
                                                 "k", "k_schedule", "draft_stop", "drafter", "adaptive", "bridge",
                                                 "grammar_draft", "head_copy")},
                  defaults={**DEFAULTS, "speculation": True})
        except SettingsError as e:
            raise ValueError(str(e)) from None
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError("stop must be a list of non-empty strings")
        if self.response_format is not None:
            from .constrain import parse_response_format
            if parse_response_format(self.response_format) is not None and self.stop:
                raise ValueError("stop strings cannot be used in JSON mode: the answer ends where the JSON does")
        self.sampling.validate()

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)


@dataclass
class GenerateResult:
    token_ids: list[int]
    finish_reason: str  # "eos" | "length" | "stop" | "cancelled" | "error"
    stats: dict
    text: str | None = None
    error: str | None = None
    eos_id: int | None = None
    failed: str | None = None       # finish 'error': what failed: 'champion' | 'draft' | 'round' | 'loop' (the loop's
                                    # own code raised: an exception in speculative or verification code)


@dataclass
class _Counters:
    target_passes: int = 0
    prefill_passes: int = 0
    draft_passes: int = 0
    rounds: int = 0
    reused_prefix: int = 0
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    proposed_at: list = field(default_factory=list)
    accepted_at: list = field(default_factory=list)
    submissions: int = 0        # device submissions (round trips): one per batched step, one per forward otherwise
    readback_bytes: int = 0     # bytes read back from the device (logits rows, picked ids)
    ahead_passes: int = 0       # champion passes run ahead by decode_ahead (confirmed or not)
    wasted_passes: int = 0      # of those, passes whose rows were not used (past a mismatch, EOS, stop)
    forced_proposed: int = 0    # JSON mode: proposals the grammar forced (no draft pass)
    chain_rounds: int = 0       # rounds made by the device's chains (backend.ngram_chain, spec_chain), used
    chain_proposed: int = 0     # the proposals those rounds verified
    device_wait: float = 0.0    # seconds the loop awaited the device's batched calls
    forced_accepted: int = 0
    row_reads: int = 0          # JSON mode on a device: rows read again (a device's argmax the mask refused)


class _Picker:
    """Turns a logits row into a token the way the mode demands: the draft's proposal and the champion's own token
    (coupled: argmax(z + g[t]) with the position-keyed noise both share; greedy: argmax(z))."""

    def __init__(self, mode: str, params: SamplingParams, rng: Rng, vocab: int):
        self.mode, self.params, self.rng, self.vocab = mode, params, rng, vocab

    def champion_token(self, row: np.ndarray, t: int, mask: np.ndarray | None = None) -> int:
        """The champion's own token at absolute position t (greedy or coupled), from its logits row (JSON mode: the
        grammar's mask at t)."""
        z = scaled_logits(row, self.params, mask)  # (vocab,)
        if self.params.greedy:
            return int(np.argmax(z))
        return self.rng.gumbel_argmax(z, t)  # == argmax(z + Rng.gumbel(t)), logarithms only where a winner can be

    def __call__(self, row: np.ndarray, t: int, mask: np.ndarray | None = None):
        if self.params.greedy or self.mode == "coupled":
            return self.champion_token(row, t, mask), None
        z = scaled_logits(row, self.params, mask)  # (vocab,)
        q = probs_from_scaled(z)  # (vocab,) the distribution the proposal is drawn from
        return int(sample_index(q, self.rng.uniform(STREAM_DRAFT, t))), q


def _stop_cut(tokenizer, generated: list[int], n_new: int, stops: Sequence[str]):
    """If a stop string appears in the text, return (n_tokens_to_keep, text_before_stop); else None."""
    text = tokenizer.decode(generated)
    hits = [text.find(s) for s in stops]
    hits = [h for h in hits if h >= 0]
    if not hits:
        return None
    cut = min(hits)
    # smallest prefix of the tokens whose text already contains the stop string
    for n in range(len(generated) - n_new + 1, len(generated) + 1):
        t = tokenizer.decode(generated[:n])
        if any(s in t for s in stops):
            return n, text[:cut]
    return len(generated), text[:cut]


def _json_mode(cfg: GenerateConfig, constraint, state, tokenizer, vocab_size: int):
    """(constraint, grammar state) for JSON mode, or (None, None)."""
    if cfg.response_format is None and constraint is None:
        return None, None
    if constraint is None:
        from .constrain import Constraint, Grammar, TokenVocab, parse_response_format
        spec = parse_response_format(cfg.response_format)
        if spec is None:
            return None, None
        if tokenizer is None:
            raise ValueError("JSON mode needs the model's tokenizer")
        constraint = Constraint(Grammar(spec), TokenVocab.from_tokenizer(tokenizer, vocab_size))
    if constraint.vocab.vocab_size != vocab_size:
        raise ValueError(f"the JSON-mode vocabulary has {constraint.vocab.vocab_size} tokens, the model "
                         f"{vocab_size}")
    return constraint, (constraint.start if state is None else state)


async def generate_async(
    champion,
    prompt_ids: Sequence[int],
    cfg: GenerateConfig,
    *,
    draft=None,
    tokenizer=None,
    draft_tokenizer=None,
    eos_ids: Sequence[int] | None = None,
    on_tokens: Callable[[list[int]], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
    clock: Callable[[], float] | None = None,
    constraint=None,
    grammar_state=None,
    faults=None,
    json_splits: dict | None = None,
    sched_memory: dict | None = None,
) -> GenerateResult:
    """JSON mode (cfg.response_format): `constraint` is the exactspec.constrain.Constraint to use (built from the
    tokenizer if None; the session passes a cached one), `grammar_state` where the answer's grammar starts (a
    continued answer; default: the start), `json_splits` the champion's learned splits of forced tokens (a dict the
    session keeps per champion; default: learned for this answer alone, exactspec.constrain.drafter),
    `sched_memory` a dict in which the adaptive scheduler keeps what it learned between answers, per drafter and
    setting (exactspec.schedule; the session keeps one per champion and draft; default: this answer alone).
    faults: an exactspec.faults.FaultPlan (armed faults fire at their phase; None: none). A backend failure or an exception inside the loop ends the answer at its last committed token with
    finish 'error' and `failed` naming what failed (the caller decides how to go on: exactspec.session)."""
    cfg.validate()
    clock = clock or time.perf_counter
    t_start = clock()
    # Pass TrackedCache objects (exactspec.kv) to reuse the common prefix of the previous turn's caches.
    champion = track(champion)
    draft = track(draft) if cfg.drafter in ("model", "head") else draft
    C = champion.config
    V = C.vocab_size
    prompt = [int(x) for x in prompt_ids]
    if not prompt:
        raise ValueError("the prompt is empty: give at least one token")
    bad = [x for x in prompt if not (0 <= x < V)]
    if bad:
        raise ValueError(f"prompt token ids out of range 0..{V - 1}: {bad[:5]}")
    if len(prompt) >= C.seq_len:
        raise ValueError(
            f"the prompt is {len(prompt)} tokens but the model's context is {C.seq_len}: shorten it "
            "(or start a new chat)"
        )
    if eos_ids is None:
        eos_ids = sorted(getattr(tokenizer, "eos_ids", ())) if tokenizer is not None else []
    eos = set(int(e) for e in eos_ids)
    eos_list = sorted(eos)               # (the device's continuation hint: no run ahead past an EOS)
    params = cfg.sampling
    rng = Rng(cfg.seed)
    gram, gstate = _json_mode(cfg, constraint, grammar_state, tokenizer, V)
    # (JSON mode: an n-gram drafter takes 1-token matches, drafters/ngram.py MIN_NGRAM_JSON; other drafters ignore it)
    drafter = make_drafter(cfg.drafter, draft, V, stop=cfg.draft_stop, bridge=cfg.bridge, tokenizer=tokenizer,
                           draft_tokenizer=draft_tokenizer, mode="greedy" if params.greedy else cfg.mode,
                           head_copy=cfg.head_copy, **({"min_ngram": MIN_NGRAM_JSON} if gram is not None else {}))
    picker = _Picker(cfg.mode, params, rng, V)
    if gram is not None:
        from .constrain.drafter import GrammarDrafter
        drafter = GrammarDrafter(drafter, gram, cfg.grammar_draft, splits=json_splits)
        need = gram.min_tokens(gstate)
        room = min(cfg.max_new_tokens, C.seq_len - len(prompt))
        if need > room:
            raise ValueError(f"max_new_tokens {cfg.max_new_tokens} is too small for this schema: its shortest answer "
                             f"takes {need} tokens" + ("" if room == cfg.max_new_tokens else
                                                       f" and the context has room for {room}"))
        mask_s0 = gram.seconds
    # the batched step (exactspec.backend): greedy and coupled only; rejection mode needs the exact q each proposal
    # was sampled from, which only its per-forward path gives Python. JSON mode takes the per-forward path too: its
    # rounds carry grammar-forced tokens and every row is masked, which the device's picks cannot do (greedy on a
    # device, its verifies and runs ahead read the device's ids and check them against the masks: json_ids).
    batched = cfg.batched and (params.greedy or cfg.mode == "coupled") and gram is None
    # JSON mode, greedy, on a device with round trips to save (ahead_max: not the CPU's reference): a verify reads back
    # the device's argmax ids, not whole rows, and each row's token under its mask is read from them (json_tokens);
    # a row whose argmax the mask refuses is computed again. A round with nothing to verify runs ahead on the device,
    # confirmed the same way. On the CPU the rows are at hand and a pass again would cost a whole pass: the rows
    # path.
    json_ids = cfg.batched and params.greedy and gram is not None and champion.offers("verify") \
        and champion.ahead_max >= 2
    pick = Pick(0.0 if params.greedy else float(params.temperature), cfg.seed, params.top_k, params.top_p)
    want_rows = not params.greedy        # greedy confirms from the device's argmax ids (equal to numpy's: tested)
    ahead = 4                            # decode_ahead passes; doubles while every row is confirmed

    def ahead_n(ahead: int, k: int, remaining: int, t0: int) -> int:
        """Passes to run ahead from absolute position t0 (a drafter that found nothing this time may find proposals
        soon: run ahead less far then)."""
        return max(1, min(ahead if k == 0 else min(ahead, AHEAD_WITH_DRAFTER), remaining, C.seq_len - t0 + 1))
    from .drafters.head import HeadDrafter
    from .drafters.model import ModelDrafter
    # whose empty rounds may hint the device's next run (decode_ahead's `then`): the champion alone, and the n-gram
    # drafter (no passes and no state of its own, so a round that takes a hinted run instead of its proposals changes
    # nothing but when they are verified); a model's or head's round hints only while the scheduler has speculation
    # off and will keep it off next round (SpecScheduler.will_run_plain; were it to choose proposals after all, that
    # round takes the hinted run and its proposals wait a round): with speculation off it runs as the champion alone
    # does (on the H200 through the product's loop, "only while it pays" with the head lost 0.62-0.96x without this,
    # bench/h200/results/2026-12-04e call 7)
    hints = cfg.drafter in ("none", "ngram")
    hinted = 0                           # passes the last run hinted (0: none): the next round runs exactly those
    chain_hint = None                    # (rounds, k) of the chain the last chain hinted: the next round takes it
    spec_hint = None                     # (rounds, k) of the spec_chain the last one hinted: the next round takes it
    since_chain = CHAIN_PROBE_GAP        # plain rounds since the last chain (a copy at hand probes one after a gap)
    t_mark = None                        # when the last round ended (the scheduler's round times start there)
    deferred = 0                         # k of proposals set aside for a hinted run: the next round looks up with it
    probe_next = False                   # that deferred k is a copy probe's (chains off, a copy at hand)

    def tally(got, free) -> int:
        """Count a verify round's proposals (the drafter's own: indices `free` of them) and those accepted; `got` is
        what the round emits (the accepted proposals and the champion's token). The counters stop at an accepted EOS:
        proposals after it lie past the answer's end (the champion's rows there still agree with them at times), as
        exactspec_train.accept.simulate_runs counts them. Returns n_cnt, the proposals accepted before that end."""
        n_acc = len(got) - 1
        n_cnt = next((i + 1 for i in range(n_acc) if got[i] in eos), n_acc)
        for j, i in enumerate(free):
            n.proposed_at[j] += 1
            if i < n_cnt:
                n.accepted_at[j] += 1
        n.proposed += len(free)
        n.accepted += sum(1 for i in free if i < n_cnt)
        return n_cnt

    async def waited(aw):
        """Await a batched call of the device, its time counted (stats device_wait_ms: the loop's time waiting for the
        device; the rest of an answer's time is the host's own)."""
        t_w = clock()
        try:
            return await aw
        finally:
            n.device_wait += clock() - t_w

    def chain_tokens(res, what: str, remaining: int, each=None, source: str = "champion"):
        """A chain's tokens (backend ngram_chain / spec_chain, made by the device): each round's accepted proposals
        and the pick after them (greedy: the device's argmax), its acceptance checked against the picks, counted
        (each(tokens emitted before the round) first); up to an EOS or the answer's end. Returns (emitted, each used
        round's tally)."""
        emitted, counted = [], []
        for r in range(len(res.proposals)):
            props, picks = res.proposals[r], res.ids[r]
            got = verify.accept_while_equal(props, lambda i: picks[i])
            if len(got) != res.accepted[r] + 1:
                raise BackendError(f"the device's {what} round {r} disagrees with its own picks", source)
            if each is not None:
                each(len(emitted))
            counted.append(tally(got, range(len(props))))
            n.target_passes += 1
            n.rounds += 1
            n.chain_rounds += 1
            n.chain_proposed += len(props)
            emitted += got
            if any(t in eos for t in got) or len(emitted) >= remaining:
                break
        return emitted, counted

    async def json_token(dev: int, state, budget: int, token_in: int, t: int) -> tuple[int, bool]:
        """JSON mode, greedy, on a device: (the champion's token at absolute position t under the grammar's mask at
        `state` (`budget` tokens left), whether its row was read), from the device's argmax `dev` of that position's
        row, as the rows path picks it: `dev` where the mask allows it (the row's maximum is allowed, so it is the
        masked maximum, and the lowest id among equal ones as np.argmax's; checked without the mask,
        Constraint.allows), the one token a mask allows where it allows one; else the row itself is read: computed
        again alone from `token_in` at position t - 1, the cache cut back to it first (the same bits as the device's
        row: batch invariance)."""
        if gram.allows(state, dev, budget):
            return dev, False
        return await json_refused(state, budget, token_in, t)

    async def json_refused(state, budget: int, token_in: int, t: int) -> tuple[int, bool]:
        """json_token where the mask refuses the device's pick."""
        mask = gram.mask(state, budget)              # (vocab,) bool
        if np.count_nonzero(mask) == 1:
            return int(np.flatnonzero(mask)[0]), False
        champion.truncate(t - 1)
        row = await champion_pass([token_in], t - 1, 1, "row")    # (1, vocab)
        n.row_reads += 1
        n.target_passes += 1
        n.submissions += 1
        n.readback_bytes += V * 4
        return picker.champion_token(row[0], t, mask), True

    async def json_tokens(tokens, ids, t0: int) -> list[int]:
        """JSON mode, greedy, from a verify's argmax ids (tokens: the rows' inputs, the last committed token and the
        proposals; ids: the device's argmax of each row): what the rows path emits, each row's token by json_token
        under the GrammarDrafter's state and budget for that row; where a row was read again and its token is the
        proposal after it, the rows after it are verified again (their cache positions were cut). Up to the first
        row whose token is not the proposal after it."""
        out: list[int] = []
        base = 0                         # ids[j] is the argmax of row base + j
        i = 0
        while i < len(tokens):
            tok, read = await json_token(int(ids[i - base]), drafter.states[i], drafter.budget - i, tokens[i],
                                         t0 + i)
            if read and i + 1 < len(tokens) and tok == tokens[i + 1]:
                try:
                    res = await waited(champion.verify(tokens[i + 1:], t0 + i, pick, False))
                except Exception as e:
                    raise BackendError(f"champion verify failed: {e}") from e
                ids, base = res.ids, i + 1
                n.target_passes += 1
                n.submissions += 1
                n.readback_bytes += 4 * (len(tokens) - i - 1)
            out.append(tok)
            if i + 1 >= len(tokens) or tok != tokens[i + 1]:
                break
            i += 1
        return out

    def confirm(row, t: int, device_id: int) -> int:
        """The champion's own token at absolute position t, from its row (as without the batched step)."""
        if row is None:
            return int(device_id)
        return picker.champion_token(row, t)
    # the most proposals a round may make: k, or under the additive schedule the device's limit
    k_hi = 0 if cfg.drafter == "none" or not cfg.k else \
        cfg.k if cfg.k_schedule == "fixed" else min(LIMITS["k"][2], champion.k_limit or K_LIMIT_DEFAULT)
    sched = SpecScheduler(k_hi, adaptive=cfg.adaptive, schedule=cfg.k_schedule, k_start=cfg.k)
    # rounds one ngram_chain makes (0: the n-gram's rounds are looked up here, one submission each); with chains the
    # scheduler chooses between chains and plain decoding by their measured time per token (SpecScheduler chain=True)
    chain_max = champion.chain_rounds if cfg.drafter == "ngram" and batched and params.greedy and gram is None \
        and champion.offers("ngram_chain") and k_hi <= champion.chain_k_max else 0
    # rounds one spec_chain makes (a draft model's or head's greedy rounds on the device, several a submission; 0:
    # one spec_round a submission): where the device offers it, for a fixed k it takes (the confidence stop needs
    # the draft's rows here); the scheduler prices its rounds as spec_round's
    d_seq_len = getattr(getattr(draft, "config", None), "seq_len", 0) or 0
    spec_chain_max = champion.chain_rounds if batched and params.greedy and isinstance(drafter, ModelDrafter) \
        and not drafter.stop and cfg.k_schedule == "fixed" and champion.offers("spec_chain") \
        and 0 < k_hi <= champion.chain_k_max else 0
    # a head's copies (HeadDrafter.copy: the n-gram's proposals first where it finds some; greedy and coupled), as
    # the device's rounds and chains make them (backend spec_round's copy, spec_chain's copy)
    head_copy = drafter.copy if isinstance(drafter, HeadDrafter) and (params.greedy or cfg.mode == "coupled") else None
    copy_chain = {"copy": (head_copy.min_ngram, head_copy.max_ngram)} if head_copy else {}

    def copy_round(k: int) -> dict:
        return {"copy": drafter.copy_of(seq, k)} if head_copy else {}

    def k_cap_at(remaining: int, t0: int) -> int:
        """The most proposals a round from absolute position t0 may make, `remaining` tokens left to the answer (with
        chains, at most CHAIN_LONG_K from CHAIN_LONG_POS on)."""
        cap = min(k_hi, remaining - 1, C.seq_len - t0 - 1, drafter.max_proposals(t0))
        return chain_k_at(cap, t0) if chain_max else cap

    def chain_rounds_at(k: int, remaining: int, t0: int) -> int:
        """Rounds of k one spec_chain from absolute position t0 may make (0: fewer than 2): each leaves k + 1 tokens to
        the answer and room for k + 1 rows in both caches, even if every round before it accepts all (so each is a
        round the loop would have made one by one), and the draft's token list holds them."""
        m = min(spec_chain_max, remaining // (k + 1), (min(C.seq_len, d_seq_len) - t0) // (k + 1),
                (d_seq_len + 1) // (2 * k + 1))
        return m if m >= 2 else 0
    # what an earlier answer learned with the same drafter and setting (round times, acceptance)
    sched_key = (cfg.drafter, cfg.bridge, cfg.draft_stop, k_hi, cfg.k_schedule,
                 cfg.mode if not params.greedy else "greedy", cfg.response_format is not None)
    if sched_memory is not None and cfg.adaptive:
        # the n-gram drafter's acceptance is the text's (copies from this prompt), not the models': its timings carry
        # over, its acceptance is measured again in each answer (carried over from a chat answer, it kept speculation
        # off through a repetitive one: tests/test_batched.py)
        sched.load(sched_memory.get(sched_key), accept=cfg.drafter != "ngram")
    n = _Counters(proposed_at=[0] * k_hi, accepted_at=[0] * k_hi)

    seq = list(prompt)
    generated: list[int] = []
    finish = "length"
    error = None
    text = None
    t_first = None
    eos_hit = None

    async def champion_pass(tokens, pos, n_out, what="forward"):
        try:
            return await call_backend(champion.forward(tokens, pos, n_out), n_out, V)
        except Exception as e:  # a backend fault: report it, keep the committed prefix
            raise BackendError(f"champion {what} failed: {e}") from e

    from .faults import DraftFault, InjectedFault, WorkerKilled
    hit = faults.hit if faults is not None else (lambda phase: None)
    failed = None
    try:
        # prefill: everything but the last prompt token, reusing what the cache already holds
        keep = min(champion.common_prefix(prompt), len(prompt) - 1)
        champion.truncate(keep)
        try:
            hit("prefill")
        except DraftFault as e:
            raise BackendError(f"draft prefill failed: {e}", "draft") from e
        if isinstance(drafter, ModelDrafter):       # (a head too) a bridged drafter rolls its draft back itself
            try:
                draft.truncate(min(draft.common_prefix(prompt), len(prompt) - 1))
            except Exception as e:
                raise BackendError(f"draft prefill failed: {e}", "draft") from e
        if keep < len(prompt) - 1:
            await champion_pass(prompt[keep:-1], keep, 1, "prefill")
            n.prefill_passes += 1
        n.reused_prefix = keep
        while True:
            if should_cancel is not None and should_cancel():
                finish = "cancelled"
                break
            if gram is not None and gram.done(gstate):
                finish = "eos"       # the document is complete and nothing may follow: no pass to read EOS from
                break
            remaining = cfg.max_new_tokens - len(generated)
            if remaining <= 0:
                finish = "length"
                break
            if len(seq) >= C.seq_len:
                finish = "length"  # context full
                break
            if faults is not None:
                faults.next_round()
                faults.tokens = len(generated)
            k_cap = k_cap_at(remaining, len(seq))
            k = sched.choose(max(0, k_cap), chain=bool(chain_max)) if cfg.drafter != "none" else 0
            probing = False              # this round's chain, if any, is a copy probe
            if deferred:                 # proposals set aside last round for a hinted run (a probe among them)
                k, deferred = max(k, min(deferred, max(0, k_cap))), 0
                probing, probe_next = probe_next, False
            if hinted and not hints:     # a model or head: the device runs the hinted run already, take it first
                k = 0
            if spec_hint:                # the device runs the draft's rounds the last chain hinted: take them
                k = spec_hint[1]
            if chain_hint:               # the device runs the chain the last one hinted already: take it as hinted,
                k = chain_hint[1]        # whatever the scheduler says now (dropped, its work is lost and the next
                                         # call waits for it: switching chains off and on cost 30 ms an answer)
            # chains off ("only while it pays": plain decoding not priced yet, or chains did not pay; they start
            # an answer otherwise, exactspec.schedule.CHAIN_SLACK): a copy at hand (the
            # host's lookup would find proposals) probes a chain, now or, while the device runs a hinted run, right
            # after it (hinting nothing more); nowhere else: each switch between chains and plain runs costs the
            # device's overlap (H200: a chain at each answer's start and one every 16 plain rounds cost 10-13% on
            # chat strata, bench/h200/results/2026-12-04f call 29)
            copy_probe = chain_max and cfg.adaptive and k == 0 and k_cap > 0 and since_chain >= CHAIN_PROBE_GAP \
                and drafter.has_match(seq)
            if copy_probe and hinted:
                deferred, probe_next = k_cap, True
            elif copy_probe:
                k, probing = k_cap, True
            t0 = len(seq)  # absolute position of the first token this round emits
            if gram is not None:     # forced proposals may go past k, up to what the context and the budget allow
                drafter.begin_round(gstate, min(remaining, C.seq_len - t0),
                                    min(remaining - 1, C.seq_len - t0 - 1, drafter.max_proposals(t0)))
            # a round's time, for the scheduler, runs from the end of the round before it (its tail included: the
            # tokens streamed, the stop strings), so that a run the device ran while the loop was busy (a hinted
            # one, taken here) is not counted as nearly free
            t_a = clock() if t_mark is None else t_mark
            passes_before = getattr(drafter, "passes", 0)
            on_device = k > 0 and batched and isinstance(drafter, ModelDrafter) and not drafter.stop \
                and champion.offers("spec_round")       # (the confidence stop needs the draft's rows in Python)
            # the n-gram drafter's rounds made by the device, several a submission (backend.ngram_chain): greedy,
            # while the scheduler has speculation on, once a hinted run (the device runs it already) is taken
            n_chain = chain_hint[0] if chain_hint else \
                min(chain_max, remaining, (C.seq_len - t0 + 1) // (k + 1)) if chain_max and k > 0 and not hinted else 0
            chain_continued = chain_hint is not None     # the device runs it already, behind the last chain
            chain_hint = None
            # a draft's rounds on the device, several a submission (not an answer's first round: its tokens come back
            # after one round, not a chain of them): the draft's first input fits a round's rows, and
            # every round would have had this k one by one (k_cap_at: each leaves k + 1 tokens to the answer and room
            # for k + 1 rows in both caches, even if every round before it accepts all), so the rounds, passes and
            # acceptance are those of one round a submission
            m_chain = spec_hint[0] if spec_hint else chain_rounds_at(k, remaining, t0) \
                if spec_chain_max and on_device and k > 0 and n.rounds \
                and len(seq) - min(draft.length, len(seq) - 1) <= k + 1 \
                else 0
            spec_hint = None
            proposals, q_rows = [], None
            if (k > 0 or gram is not None) and not on_device and not n_chain:   # (JSON mode: forced tokens at k = 0)
                try:
                    hit("draft")
                    proposals, q_rows = await drafter.propose(seq, k, picker)
                except (DraftFault, BackendError) as e:
                    raise BackendError(f"draft forward failed: {e}", "draft") from e
                except InjectedFault:
                    raise
                except Exception as e:
                    if gram is not None or not isinstance(drafter, ModelDrafter):
                        raise        # the drafter's own code (n-gram, grammar): the loop's exception handler
                    raise BackendError(f"draft forward failed: {e}", "draft") from e
                if gram is None:
                    proposals = proposals[:k]
            take, hinted = hinted, 0
            found = bool(proposals)
            if take and found:
                # the last run hinted this one, which the device runs already (its passes are the champion's own
                # tokens, so none is wasted): take it, and verify these proposals after it (found again there: the
                # next round looks up with this round's k even if the scheduler would not, or a probe made while
                # speculation is off would never be verified)
                proposals, q_rows, deferred = [], None, k
            if n_chain:
                # the next chain may start on the device before this one is confirmed (not after the answer's first
                # submission: its tokens should reach the user first)
                # (a chain while none has been priced yet in this answer, the first or a copy probe, hints the next
                # too: were it to wait for its price, the first two chains would both start without the device's
                # overlap)
                # (the next chain starts at most n_chain (k + 1) positions on: room for its rounds from there, the
                # engine's own bound for a continuation; none where it may start where chain_k_at allows less than
                # k: a continuation keeps its chain's k, the next chain starts afresh with the smaller one)
                room = (C.seq_len - (t0 - 1) - n_chain * (k + 1)) // (k + 1)
                then = max(0, min(chain_max, remaining - n_chain, room)) \
                    if n.rounds and remaining > n_chain and (sched.t_chain is None
                         or not sched.will_run_plain(k_cap_at(remaining - n_chain, t0 + n_chain), chain=True)) \
                    and chain_k_at(k, t0 + n_chain) == k else 0
                hit("verify")
                try:
                    res = await waited(champion.ngram_chain(seq, t0 - 1, n_chain, k, pick, drafter.min_ngram,
                                                     drafter.max_ngram, then=then, stop=eos_list))
                except Exception as e:
                    raise BackendError(f"champion n-gram rounds failed: {e}") from e
                n.submissions += 1
                n.readback_bytes += 4 * n_chain * (2 * k + 3)
                emitted, _ = chain_tokens(res, "n-gram", remaining)
                chain_hint = (then, k) if then else None
                since_chain = 0
                t_mark = clock()
                # priced (SpecScheduler.observe_chain) where it shows what chains cost from here on: a chain the device
                # ran as the last one's continuation, or a copy probe (which turns chains back on where copies pay);
                # not one that started cold otherwise (an answer's first two chains: its first submission hints
                # nothing; a chain after one that hinted none), which waits a whole round trip more and made chains
                # look dearer than they run: their time per token crossed CHAIN_SLACK early in chat answers whose
                # chains paid forced (H100: 0.90-0.96 of the champion alone's time forced, 1.06-1.17 "only while it
                # pays" with every chain priced), and each crossing cost the overlap. Priced so, "only while it pays"
                # took 1.000 [quartiles 0.943-1.057] of forced chains' time per answer (k = 4, 196 answer pairs, one H100
                # lease) against 1.018 [0.961-1.139] with every chain priced (bench/h200/results/2026-12-07e call 10)
                if chain_continued or probing:
                    sched.observe_chain(t_mark - t_a, len(emitted))
            elif m_chain:
                # the draft's k passes and the champion's verify, m_chain rounds of them in one submission; each
                # round's tokens confirmed here from the champion's picks (greedy: its argmax), as a spec_round's
                feed, d_start = drafter.catch_up(seq)
                try:
                    hit("draft")
                except DraftFault as e:
                    raise BackendError(f"draft forward failed: {e}", "draft") from e
                hit("verify")
                # the next chain may start on the device before this one is confirmed: it starts at most
                # m_chain (k + 1) positions on, and fits there even then (so it is taken as hinted)
                then = chain_rounds_at(k, remaining - m_chain * (k + 1), t0 + m_chain * (k + 1)) \
                    if not cfg.adaptive or not sched.will_run_plain(k_cap_at(remaining - m_chain, t0 + m_chain)) \
                    else 0
                try:
                    res = await waited(champion.spec_chain(draft, seq, d_start, m_chain, k, pick,
                                                           restart=drafter.restarts, then=then, stop=eos_list,
                                                           **copy_chain))
                except Exception as e:
                    raise BackendError(f"speculative rounds failed: {e}", "round") from e
                n.submissions += 1
                n.readback_bytes += 4 * m_chain * (2 * k + 3) + 16

                def each(at):             # a round of the draft's: its k passes, the head's feature bookkeeping
                    drafter.chain_round(len(seq) + at)
                    drafter.passes += k
                    n.draft_passes += k
                emitted, counted = chain_tokens(res, "speculative", remaining, each, "round")
                spec_hint = (then, k) if then else None
                t_mark = clock()
                for n_cnt in counted:        # (the chain's time shared by its rounds)
                    sched.observe(k, (t_mark - t_a) / len(counted), n_cnt)
            elif not on_device and not proposals and batched and champion.ahead_max >= 2:
                # nothing to verify: the champion alone, run ahead on the device (n passes, one submission), Python
                # confirms each row; a mismatch (or EOS) ends the run and the passes after it are rolled back
                n_ahead = take or ahead_n(ahead, k, remaining, t0)
                # the next run's passes (if every row here is confirmed, the next round asks for exactly these) may
                # start on the device before this one is confirmed, so it never waits for Python: the champion
                # alone, and an n-gram round that found nothing (a round that finds proposals does not hint: they are
                # verified after the hinted run); not after the answer's first run (a device launches the
                # continuation before it returns the run, and the first tokens should reach the user first)
                t_next = t0 + n_ahead
                plain_next = k == 0 and sched.will_run_plain(k_cap_at(remaining - n_ahead, t_next),
                                                             chain=bool(chain_max))
                then = ahead_n(min(2 * ahead, champion.ahead_max), k, remaining - n_ahead, t_next) \
                    if (hints and not chain_max or plain_next) \
                    and not found and not copy_probe and n.ahead_passes and remaining > n_ahead \
                    and t_next < C.seq_len else 0
                hit("verify")
                try:
                    res = await waited(champion.decode_ahead(seq[-1], t0 - 1, n_ahead, pick, want_rows, then=then,
                                                             stop=eos_list))
                except Exception as e:
                    raise BackendError(f"champion forward failed: {e}") from e
                n.submissions += 1
                n.readback_bytes += 4 * n_ahead + (n_ahead * V * 4 if want_rows else 0)
                n.ahead_passes += n_ahead
                emitted = []
                for i in range(n_ahead):
                    tok = confirm(res.rows[i] if want_rows else None, t0 + i, res.ids[i])
                    emitted.append(tok)
                    if tok in eos or tok != res.ids[i]:
                        break                   # rows past a mismatch were fed a token Python did not emit
                used = len(emitted)
                n.wasted_passes += n_ahead - used
                n.target_passes += used
                n.rounds += used
                ahead = min(2 * ahead, champion.ahead_max) if used == n_ahead else max(2, ahead // 2)
                if used == n_ahead and emitted[-1] not in eos:
                    hinted = then                # the device runs it already: the next round takes it
                since_chain += 1
                t_mark = clock()
                sched.observe(0, (t_mark - t_a) / used)
            elif json_ids and not proposals and champion.offers("decode_ahead"):
                # JSON mode, greedy, nothing to verify: the champion runs ahead on the device with its own argmax
                # picks, confirmed here one by one under the grammar's mask (json_tokens' rule); the run ends at the
                # first pick the mask refuses (that position's token read from its row, computed again alone), an
                # EOS, or the document's end; the passes after it are rolled back
                # (no continuation hinted: runs end at refused picks often, and a dropped continuation is waited
                # for; hints cost device time on an H100, bench/h200/results/2026-12-05d calls 17 and 21)
                n_ahead = ahead_n(ahead, 0, remaining, t0)
                hit("verify")
                try:
                    res = await waited(champion.decode_ahead(seq[-1], t0 - 1, n_ahead, pick, False, then=0,
                                                             stop=eos_list))
                except Exception as e:
                    raise BackendError(f"champion forward failed: {e}") from e
                n.submissions += 1
                n.readback_bytes += 4 * n_ahead
                n.ahead_passes += n_ahead
                budget = min(remaining, C.seq_len - t0)
                emitted = []
                for i in range(n_ahead):
                    if gram.done(gstate):
                        break                   # the document is complete: nothing may follow
                    dev = int(res.ids[i])
                    nxt = gram.allowed_step(gstate, dev, budget - i)     # (json_token's first check, walked once)
                    if nxt is not None:
                        tok = dev
                    else:
                        tok, _ = await json_refused(gstate, budget - i, emitted[-1] if emitted else seq[-1], t0 + i)
                        nxt = gram.advance(gstate, tok)
                    emitted.append(tok)
                    gstate = nxt
                    if tok in eos or tok != dev:
                        break                   # rows past it were fed a token Python did not emit
                used = len(emitted)
                n.wasted_passes += n_ahead - used
                n.target_passes += used
                n.rounds += used
                ahead = min(2 * ahead, champion.ahead_max) if used == n_ahead else max(2, ahead // 2)
                t_mark = clock()
                sched.observe(0, (t_mark - t_a) / max(1, used))
            else:
                if on_device:
                    # the draft's k passes and the champion's verify in one submission
                    feed, d_start = drafter.catch_up(seq)
                    try:
                        hit("draft")             # the draft's passes run inside the round, on the device
                    except DraftFault as e:
                        raise BackendError(f"draft forward failed: {e}", "draft") from e
                    hit("verify")
                    try:
                        res = await waited(champion.spec_round(draft, feed, d_start, k, seq[-1], t0 - 1, pick,
                                                               want_rows, **copy_round(k)))
                    except Exception as e:
                        raise BackendError(f"speculative round failed: {e}", "round") from e
                    drafter.passes += k
                    proposals = [int(x) for x in res.proposals]
                    logits, champ_ids = res.rows, res.ids
                    n.submissions += 1
                    n.readback_bytes += 4 * (2 * k + 1) + ((k + 1) * V * 4 if want_rows else 0)
                else:
                    hit("verify")
                    d_passes = getattr(drafter, "passes", 0) - passes_before
                    n.submissions += 1 + d_passes
                    if (batched or json_ids) and params.greedy and champion.offers("verify"):
                        # proposals made here (n-gram, a bridged draft): the device's argmax of each row comes back,
                        # not the rows (greedy confirms from those ids, as on the batched step)
                        try:
                            res = await waited(champion.verify([seq[-1]] + proposals, t0 - 1, pick, False))
                        except Exception as e:
                            raise BackendError(f"champion verify failed: {e}") from e
                        logits, champ_ids = None, res.ids
                        n.readback_bytes += 4 * (len(proposals) + 1) + d_passes * V * 4
                    else:
                        logits = await champion_pass([seq[-1]] + proposals, t0 - 1, len(proposals) + 1)  # (g+1, vocab)
                        champ_ids = None
                        n.readback_bytes += (len(proposals) + 1 + d_passes) * V * 4
                g = len(proposals)
                n.draft_passes += getattr(drafter, "passes", 0) - passes_before
                n.target_passes += 1
                n.rounds += 1
                if logits is None and gram is not None:  # JSON mode, greedy, ids only (json_tokens)
                    emitted = await json_tokens([seq[-1]] + proposals, champ_ids, t0)
                elif logits is None:                     # greedy, ids only: the champion's argmax of each row
                    emitted = verify.accept_while_equal(proposals, lambda i: champ_ids[i])
                elif params.greedy or cfg.mode == "coupled":   # rows up to the first mismatch only
                    masks = drafter.masks(g + 1) if gram is not None else [None] * (g + 1)   # JSON mode: (g+1, vocab)
                    emitted = verify.accept_while_equal(
                        proposals, lambda i: picker.champion_token(logits[i], t0 + i, masks[i]))
                else:
                    masks = drafter.masks(g + 1) if gram is not None else [None] * (g + 1)   # JSON mode: (g+1, vocab)
                    z = np.stack([scaled_logits(r, params, m) for r, m in zip(logits, masks)])  # (g+1, vocab)
                    p = probs_from_scaled(z)  # (g+1, vocab)
                    if g == 0:
                        emitted = [int(sample_index(p[0], rng.uniform(STREAM_SAMPLE, t0)))]
                    else:
                        if q_rows is None:  # point-mass drafter
                            q_rows = np.zeros((g, V), dtype=np.float64)
                            q_rows[np.arange(g), proposals] = 1.0
                        emitted = verify.rejection(p, q_rows[:g], proposals, rng, t0)
                n_acc = len(emitted) - 1
                free = [i for i in range(g) if gram is None or not drafter.forced_flags[i]]  # the drafter's
                n_cnt = tally(emitted, free)
                t_mark = clock()
                if len(free) < g:
                    n.forced_proposed += g - len(free)
                    n.forced_accepted += sum(1 for i in range(min(n_cnt, g)) if drafter.forced_flags[i])
                else:            # rounds with forced rows would mislead the scheduler's round timings
                    sched.observe(g, t_mark - t_a, n_cnt)
                if gram is not None:
                    gstate = drafter.state_after(n_acc, emitted[-1])
            # EOS inside the emitted tokens ends the answer there (the EOS itself is not part of the answer)
            for i, tok in enumerate(emitted):
                if tok in eos:
                    eos_hit = tok
                    emitted = emitted[:i]
                    finish = "eos"
                    break
            emitted = emitted[:remaining]
            n.emitted += len(emitted)
            # commit
            generated.extend(emitted)
            seq.extend(emitted)
            if eos_hit is None and cfg.stop and tokenizer is not None and emitted:
                cut = _stop_cut(tokenizer, generated, len(emitted), cfg.stop)
                if cut is not None:
                    keep, text = cut
                    drop = len(generated) - keep
                    if drop:
                        del generated[keep:]
                        del seq[len(seq) - drop:]
                        emitted = emitted[: len(emitted) - drop]
                    finish = "stop"
            # roll both caches back to what is committed (O(1)), then stream it; a rollback that fails still lets the
            # round's committed tokens be streamed first (the caller's text is always exactly the committed tokens)
            rollback_error = None
            try:
                champion.truncate(max(0, min(champion.length, len(seq) - 1)))
            except Exception as e:
                rollback_error = BackendError(f"champion rollback failed: {e}", "champion")
            try:
                drafter.update(len(seq))
            except Exception as e:
                if not isinstance(drafter, ModelDrafter):
                    raise
                rollback_error = rollback_error or BackendError(f"draft rollback failed: {e}", "draft")
            if emitted and t_first is None:
                t_first = clock()
            if on_tokens is not None and emitted:
                on_tokens(list(emitted))
            if rollback_error is not None:
                raise rollback_error
            if faults is not None:
                faults.tokens = len(generated)
                try:
                    hit("commit")        # the round's tokens committed, the caches rolled back, the tokens streamed
                except DraftFault as e:
                    raise BackendError(f"draft rollback failed: {e}", "draft") from e
            if finish in ("eos", "stop"):
                break
            await asyncio.sleep(0)  # let the host (Pyodide's event loop) deliver cancel requests
    except WorkerKilled:
        raise                    # the worker is gone: nothing to roll back, nothing more to stream
    except Exception as e:       # a backend fault (BackendError), or the loop's own code raised
        finish = "error"
        if isinstance(e, BackendError):
            error, failed = str(e), e.source
        else:
            error, failed = f"{type(e).__name__} in the decode loop: {e}", "loop"
        # roll both caches back to the committed prefix; a dead device may refuse even that
        for b in (champion, draft):
            if b is None or not hasattr(b, "invalidate"):
                continue
            try:
                b.truncate(max(0, min(b.length, len(b.tokens), len(seq) - 1)))
            except Exception:
                b.invalidate()
    t_end = clock()
    if text is None and tokenizer is not None:
        text = tokenizer.decode(generated)
    elapsed = max(t_end - t_start, 1e-9)
    stats = {
        "target_passes": n.target_passes,
        "prefill_passes": n.prefill_passes,
        "draft_passes": n.draft_passes,
        "tau": (n.emitted / n.target_passes) if n.target_passes else 0.0,
        "acceptance_by_position": [
            (n.accepted_at[i] / n.proposed_at[i]) if n.proposed_at[i] else 0.0 for i in range(k_hi)
        ],
        "ttft_ms": ((t_first - t_start) * 1000.0) if t_first is not None else None,
        "tokens_per_s": len(generated) / elapsed,
        "elapsed_ms": elapsed * 1000.0,
        "new_tokens": len(generated),
        "rounds": n.rounds,
        "reused_prefix_tokens": n.reused_prefix,
        "proposed": n.proposed,
        "accepted": n.accepted,
        "k": cfg.k,
        "mode": cfg.mode,
        "drafter": cfg.drafter,
        "spec_disabled_rounds": sched.disabled_rounds,
        "submissions": n.submissions,
        "readback_bytes": n.readback_bytes,
        "ahead_passes": n.ahead_passes,
        "wasted_passes": n.wasted_passes,
        "forced_proposed": n.forced_proposed,
        "forced_accepted": n.forced_accepted,
        "row_reads": n.row_reads,
        "chain_rounds": n.chain_rounds,
        "chain_proposed": n.chain_proposed,
        "device_wait_ms": n.device_wait * 1000.0,
        "mask_ms": (gram.seconds - mask_s0) * 1000.0 if gram is not None else 0.0,
        "proposed_at": list(n.proposed_at),        # counts behind acceptance_by_position (merging answers' stats)
        "accepted_at": list(n.accepted_at),
    }
    stats.update(drafter.stats() if hasattr(drafter, "stats") else {})   # a bridged drafter's counters
    if sched_memory is not None and cfg.adaptive:
        sched_memory[sched_key] = sched.state()
    return GenerateResult(generated, finish, stats, text=text, error=error, eos_id=eos_hit, failed=failed)


def generate(champion, prompt_ids, cfg: GenerateConfig, **kw) -> GenerateResult:
    """Synchronous wrapper for CPython (the browser worker awaits generate_async directly)."""
    return asyncio.run(generate_async(champion, prompt_ids, cfg, **kw))
