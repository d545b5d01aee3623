"""Run-time speculation scheduler: speculate only while it pays.

With acceptance rate a and k proposals, a round emits E(a, k) = (1 - a^(k+1)) / (1 - a) tokens on average and costs
T(k) = k * T_draft + T_verify(k) + T_overhead. Speculation pays while T(k) / E(a, k) < T_target(1). The scheduler
keeps exponentially weighted estimates of the timings and of a, picks the k in 0..k_max with the lowest predicted
time per token, and re-probes k_max now and then while off so that a stays current. Its choice never changes an
answer (every verifier is exact), only the speed.
"""
from __future__ import annotations


def expected_tokens(a: float, k: int) -> float:
    """E = (1 - a^(k+1)) / (1 - a): expected tokens emitted per target pass with k proposals."""
    if k <= 0:
        return 1.0
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def time_per_token(a: float, k: int, t_draft: float, t_verify: float, t_overhead: float = 0.0) -> float:
    return (k * t_draft + t_verify + t_overhead) / expected_tokens(a, k)


class Ewma:
    def __init__(self, alpha: float = 0.3):
        self.alpha = alpha
        self.value: float | None = None

    def add(self, x: float) -> None:
        self.value = x if self.value is None else (1 - self.alpha) * self.value + self.alpha * x


class SpecScheduler:
    """Chooses k per round. adaptive=False always returns k_max (used by tests that count passes)."""

    def __init__(self, k_max: int, adaptive: bool = False, probe_every: int = 16):
        self.k_max = k_max
        self.adaptive = adaptive
        self.probe_every = probe_every
        self.t_target1 = Ewma()           # seconds for a 1-row champion pass
        self.t_verify: dict[int, Ewma] = {}  # k -> seconds for a (k+1)-row champion pass
        self.t_draft = Ewma()             # seconds per draft token
        self.accept = Ewma(0.2)           # per-proposal acceptance rate
        self.rounds_off = 0
        self.disabled_rounds = 0

    def observe(self, k: int, t_verify: float, t_draft_total: float, n_accepted: int) -> None:
        if k == 0:
            self.t_target1.add(t_verify)
            return
        self.t_verify.setdefault(k, Ewma()).add(t_verify)
        self.t_draft.add(t_draft_total / k)
        # acceptance of each proposal up to and including the first rejection
        tried = min(k, n_accepted + 1)
        self.accept.add(n_accepted / tried if tried else 0.0)

    def _t_verify(self, k: int) -> float | None:
        if k in self.t_verify:
            return self.t_verify[k].value
        known = sorted(self.t_verify)
        if not known or self.t_target1.value is None:
            return None
        # linear in rows between the 1-row pass and the nearest measured verify size
        kk = min(known, key=lambda j: abs(j - k))
        t1, tk = self.t_target1.value, self.t_verify[kk].value
        return t1 + (tk - t1) * k / kk

    def choose(self, k_cap: int) -> int:
        k_cap = min(k_cap, self.k_max)
        if not self.adaptive or k_cap <= 0:
            return max(0, k_cap)
        if self.t_target1.value is None:
            return 0  # calibrate: one plain champion pass
        a = self.accept.value
        if a is None or self.t_draft.value is None:
            return k_cap  # then one speculative round
        best_k, best_t = 0, self.t_target1.value
        for k in range(1, k_cap + 1):
            tv = self._t_verify(k)
            if tv is None:
                continue
            t = time_per_token(a, k, self.t_draft.value, tv)
            if t < best_t:
                best_k, best_t = k, t
        if best_k == 0:
            self.rounds_off += 1
            self.disabled_rounds += 1
            if self.rounds_off % self.probe_every == 0:
                return k_cap  # re-probe so the acceptance estimate stays current
        else:
            self.rounds_off = 0
        return best_k
