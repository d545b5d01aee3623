"""Run-time speculation scheduler: speculate only while it pays.

With acceptance rate a and k proposals, a round emits E(a, k) = (1 - a^(k+1)) / (1 - a) tokens on average and costs
T(k) = k * T_draft + T_verify(k) + T_overhead. Speculation pays while T(k) / E(a, k) < T_target(1). The scheduler
keeps exponentially weighted estimates of the timings and of a, picks the k in 0..k_max with the lowest predicted
time per token, and re-probes now and then while off so that a stays current (with one proposal: a probe at k_max
costs a whole verify of k_max + 1 rows where the CPU fallback pays for every row). What it learned can carry over
to the next answer (`state` / `load`: the session keeps it per champion, drafter and setting), so that only the first
answer pays for the calibration. Its choice never changes an answer (every verifier is exact), only the speed.
"""
from __future__ import annotations

# "Only while it pays" with chains (the n-gram drafter's rounds made by the device, several a submission): chains run
# from an answer's start (once plain decoding is priced) and stay on while their time per token is below CHAIN_SLACK
# times plain decoding's. A chain round that finds nothing costs about a plain pass (H100: 0.985-0.992 ms of GPU time
# at k = 3-4 against 0.950 for a pass running ahead), while each switch between chains and plain runs costs the
# device's overlap (3-8 ms an answer). Through the product's loop on H100s, chains all along (forced) beat the policy
# before this one (chains only after a copy probe, and only while cheaper than plain runs) in 8 of 8 pooled
# comparisons (speedup over the champion alone, all 11 strata: 1.10-1.15 against 0.96-1.11; bench/h200/results/
# 2026-12-06g calls 7-8, 2026-12-06h calls 3-4): per stratum ahead or level in 70 of 88 cells, behind by 0.01-0.04
# in the rest (long context in 6 of 8: forced 0.85-0.90 at k = 4 against 0.87-0.94, chains ~10-14% dearer than
# plain runs there). This policy itself, against the one before it (2026-12-07b, two calls x 8 sides): level with
# forced chains, geometric mean over the strata 1.20-1.22 against 1.12-1.14; behind only on long context at k = 4
# (0.91-0.92 against 0.93-0.94: answers of 18-20 tokens, chains there just under this slack, so they stay on).
CHAIN_SLACK = 1.1


def expected_tokens(a: float, k: int) -> float:
    """E = (1 - a^(k+1)) / (1 - a): expected tokens emitted per target pass with k proposals."""
    if k <= 0:
        return 1.0
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def time_per_token(a: float, k: int, t_draft: float, t_verify: float, t_overhead: float = 0.0) -> float:
    """The break-even formula: seconds per emitted token with k proposals; speculation pays while this is below
    the plain time per token."""
    return (k * t_draft + t_verify + t_overhead) / expected_tokens(a, k)


class Ewma:
    def __init__(self, alpha: float = 0.3):
        self.alpha = alpha
        self.value: float | None = None

    def add(self, x: float) -> None:
        self.value = x if self.value is None else (1 - self.alpha) * self.value + self.alpha * x


class SpecScheduler:
    """Chooses k per round. adaptive=False always returns k_max (used by tests that count passes).

    It learns the time of a whole round with k proposals, T(k) = k * T_draft + T_verify(k) + T_overhead, as one
    measured figure per k (a batched round, where draft and verify share one submission, cannot be split anyway) and,
    for k = 0, the time per token of plain decoding (with the device running ahead where it does). Unmeasured k are
    interpolated linearly between T(0) and the nearest measured k.
    """

    def __init__(self, k_max: int, adaptive: bool = False, probe_every: int = 16, schedule: str = "fixed",
                 k_start: int | None = None):
        """schedule (exactspec.settings.K_SCHEDULES): 'fixed' offers k_max every round; 'additive' offers k_cur,
        starting at k_start (within 1..k_max), +1 after a round whose proposals were all accepted, -1 after a
        round whose first proposal was rejected (the seed's heuristic schedule; k_max is the device's limit)."""
        from .settings import K_SCHEDULES
        if schedule not in K_SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(K_SCHEDULES)}, not {schedule!r}")
        self.k_max = k_max
        self.adaptive = adaptive
        self.probe_every = probe_every
        self.schedule = schedule
        self.k_cur = max(1, min(k_max, k_max if k_start is None else k_start))
        self.t_round: dict[int, Ewma] = {}   # k -> seconds per round with k proposals (k = 0: per plain token)
        self.accept = Ewma(0.2)              # per-proposal acceptance rate
        self.chain_s, self.chain_tokens = 0.0, 0   # chains (the n-gram drafter's rounds on the device) this answer
        self.rounds_off = 0
        self.disabled_rounds = 0

    def state(self) -> dict:
        """What was learned (round times per k, acceptance), for `load` in the next answer's scheduler."""
        return {"t_round": {k: e.value for k, e in self.t_round.items() if e.value is not None},
                "accept": self.accept.value}

    def load(self, state: dict | None, accept: bool = True) -> None:
        """Start from an earlier answer's `state` (None: from scratch); accept=False takes its timings only (a drafter
        whose acceptance depends on the text, not the models, measures it again in each answer)."""
        if not state:
            return
        for k, v in state.get("t_round", {}).items():
            if int(k) <= self.k_max:
                self.t_round.setdefault(int(k), Ewma()).value = float(v)
        if accept and state.get("accept") is not None:
            self.accept.value = float(state["accept"])

    def observe(self, k: int, t_round: float, n_accepted: int = 0) -> None:
        self.t_round.setdefault(k, Ewma()).add(t_round)
        if k > 0 and self.schedule == "additive":
            if n_accepted >= k and k >= self.k_cur:
                self.k_cur = min(self.k_max, self.k_cur + 1)
            elif n_accepted == 0:
                self.k_cur = max(1, self.k_cur - 1)
        if k > 0:
            # acceptance of each proposal up to and including the first rejection
            tried = min(k, n_accepted + 1)
            self.accept.add(n_accepted / tried if tried else 0.0)

    def round_time(self, k: int) -> float | None:
        if k in self.t_round:
            return self.t_round[k].value
        known = sorted(j for j in self.t_round if j > 0)
        if not known or 0 not in self.t_round:
            return None
        kk = min(known, key=lambda j: abs(j - k))
        t0, tk = self.t_round[0].value, self.t_round[kk].value
        return t0 + (tk - t0) * k / kk

    def observe_chain(self, seconds: float, tokens: int) -> None:
        """A chain's time and the tokens it emitted (decode.py: the n-gram drafter's rounds made by the device,
        several a submission, each verifying what the device's lookup finds: their count and acceptance are the
        device's, so chains are priced as a whole against plain decoding, not round by round). Priced by their time
        per token over the answer so far, not a moving average: on the H200 an average over the last few chains
        turned them off at every stretch of a long repetitive answer that copied less (160 tokens: 1.93x against
        2.86x forced, bench/h200/results/2026-12-04f call 25), while copies pay 2-3x and chains where nothing repeats
        cost 5-15% more than plain decoding. The decode loop reports the chains that show what chains cost from there
        on: those the device ran as the last chain's continuation, and copy probes (not chains that started cold)."""
        self.chain_s += seconds
        self.chain_tokens += tokens

    @property
    def t_chain(self) -> float | None:
        """Seconds per token of this answer's chains so far (None: none yet)."""
        return self.chain_s / self.chain_tokens if self.chain_tokens else None

    def _formula(self, k_cap: int, chain: bool = False) -> tuple[int, bool]:
        """(the k to run, whether the break-even formula chose it): the choice before any probe, changing nothing.
        chain: k_cap (chains) or 0 (plain decoding), whichever costs less per token as measured."""
        k_cap = min(k_cap, self.k_max, self.k_cur if self.schedule == "additive" else self.k_max)
        if not self.adaptive or k_cap <= 0:
            return max(0, k_cap), False
        if 0 not in self.t_round:
            return 0, False   # calibrate: plain decoding first
        if chain:     # chains first, on while they cost less than CHAIN_SLACK x plain runs; once off, the decode loop
            t = self.t_chain    # probes a chain where a copy is at hand
            return (k_cap if t is None or t < CHAIN_SLACK * self.t_round[0].value else 0), True
        a = self.accept.value
        if a is None:
            return k_cap, False   # then one speculative round
        best_k, best_t = 0, self.t_round[0].value
        for k in range(1, k_cap + 1):
            tr = self.round_time(k)
            if tr is None:
                continue
            t = tr / expected_tokens(a, k)
            if t < best_t:
                best_k, best_t = k, t
        return best_k, True

    def will_run_plain(self, k_cap: int, chain: bool = False) -> bool:
        """Would choose(k_cap, chain) return 0 now (no proposals, no probe)? Changes nothing: the decode loop asks it
        before letting a round with no proposals hint the device's next run (a drafter with passes of its own, or
        chains, on a device that runs ahead)."""
        k, by_formula = self._formula(k_cap, chain)
        return k == 0 and not (by_formula and not chain and (self.rounds_off + 1) % self.probe_every == 0)

    def choose(self, k_cap: int, chain: bool = False) -> int:
        """chain: choosing between a chain of k_cap (the device looks the proposals up) and plain decoding; no
        probes of its own (the decode loop probes a chain where the host's lookup finds a copy at hand)."""
        best_k, by_formula = self._formula(k_cap, chain)
        if not by_formula:
            return best_k
        if best_k == 0:
            self.rounds_off += 1
            self.disabled_rounds += 1
            if not chain and self.rounds_off % self.probe_every == 0:
                return 1      # re-probe so the acceptance estimate stays current (one proposal: the cheapest)
        else:
            self.rounds_off = 0
        return best_k
