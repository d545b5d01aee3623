"""Fault injection: the faults a test (or a person at the console) can arm, and the decode loop's side of them.

A fault is {kind, phase, round}: it fires once, in the next answer, at its phase in round `round` (1-based; the
first time the loop reaches that phase at or after that round; `load` and `prefill` ignore the round). Kinds and the
phases each applies to (APPLIES; the page's app/faults.js holds the same table, tests/test_faults.py checks it):

  worker_killed   the worker dies as if it crashed (the page restarts it and resumes)          every phase
  device_lost     the GPU device is destroyed (a new device, else the CPU fallback)            every phase
  gpu_alloc       the next GPU buffer allocation fails as out-of-memory (the engine allocates
                  every buffer when it loads a model)                                           load
  opfs_write      the next OPFS write fails (quota exceeded) during an import                   load
  opfs_read       a stored file reads back damaged (its sha256 no longer matches)               load
  exception       Python raises inside the decode loop                                          prefill, draft, verify, commit
  draft_only      the draft's backend fails, the champion's does not                             load, prefill, draft, commit

Phases of one answer: `load` (a model is loaded: boot, a model switch, a reload after recovery), `prefill` (the
prompt goes into the champion's cache), and per round `draft` (the drafter proposes), `verify` (the champion's pass
over the proposals), `commit` (the round's tokens are committed, both KV caches rolled back to them and the tokens
streamed). The decode loop calls `FaultPlan.hit(phase)`; kinds the loop acts on itself raise here (`exception`:
InjectedFault, `draft_only`: DraftFault), the host's kinds (worker, device, allocation, storage) are handed to the
host callback, which acts (app/core.js destroys the device, app/worker.js ends the worker).

No module globals: a FaultPlan is made per answer from the request and passed to the loop.
"""
from __future__ import annotations

from typing import Callable

KINDS = ("worker_killed", "device_lost", "gpu_alloc", "opfs_write", "opfs_read", "exception", "draft_only")
PHASES = ("load", "prefill", "draft", "verify", "commit")
APPLIES = {
    "worker_killed": PHASES,
    "device_lost": PHASES,
    "gpu_alloc": ("load",),
    "opfs_write": ("load",),
    "opfs_read": ("load",),
    "exception": ("prefill", "draft", "verify", "commit"),
    "draft_only": ("load", "prefill", "draft", "commit"),
}
LOOP_KINDS = ("exception", "draft_only")          # acted on by the decode loop itself
DECODE_PHASES = ("prefill", "draft", "verify", "commit")
# what each kind's recovery is (receipts and the README name them by these keys)
RECOVERIES = ("worker_restarted", "new_device", "cpu_fallback", "speculation_off", "draft_dropped",
              "import_refused", "reimport_offered", "none")


class FaultError(ValueError):
    """A fault spec that cannot be armed; the message says why."""


class InjectedFault(RuntimeError):
    """Raised by an armed `exception` fault inside the decode loop."""


class DraftFault(RuntimeError):
    """Raised by an armed `draft_only` fault: the draft's backend failed (the champion's did not)."""


class WorkerKilled(BaseException):
    """The host ended the worker (an armed `worker_killed`): nothing more may run or be streamed. A BaseException, so
    that no `except Exception` on the way out turns it into a recoverable error."""


def check_fault(f) -> dict:
    """A fault spec {kind, phase, round?} -> {kind, phase, round} (round 1 when left out), or FaultError."""
    if not isinstance(f, dict):
        raise FaultError(f"a fault is an object {{kind, phase, round}}, not {f!r}")
    kind, phase, rnd = f.get("kind"), f.get("phase"), f.get("round", 1)
    if kind not in KINDS:
        raise FaultError(f"fault kind {kind!r} is not one of {', '.join(KINDS)}")
    if phase not in PHASES:
        raise FaultError(f"fault phase {phase!r} is not one of {', '.join(PHASES)}")
    if phase not in APPLIES[kind]:
        raise FaultError(f"fault {kind} does not apply to phase {phase} (it applies to {', '.join(APPLIES[kind])})")
    if rnd is None:
        rnd = 1
    if isinstance(rnd, bool) or not isinstance(rnd, int) or not 1 <= rnd <= 1_000_000:
        raise FaultError(f"fault round {rnd!r} must be a whole number from 1")
    out = {"kind": kind, "phase": phase, "round": rnd}
    if f.get("id") is not None:
        out["id"] = f["id"]
    return out


def parse_faults(text: str) -> list[dict]:
    """The URL syntax `kind@phase:round,kind@phase,...` (round 1 when left out) -> checked fault specs."""
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        kind, _, rest = part.partition("@")
        phase, _, rnd = rest.partition(":")
        try:
            r = int(rnd) if rnd else 1
        except ValueError:
            raise FaultError(f"fault {part!r}: round {rnd!r} is not a whole number") from None
        out.append(check_fault({"kind": kind, "phase": phase, "round": r}))
    return out


class FaultPlan:
    """The faults armed for one answer, and what fired.

    plan = FaultPlan(faults, host=host_fn, on_fire=fn)
      host(kind, phase, round) acts on a host kind (JS: destroy the device, end the worker, ...); None in CPython
      tests, where host kinds fire without an effect of their own (a test simulates the effect).
      on_fire(record) is told of every fault as it fires (the page marks it fired before the host acts).
    plan.next_round(); plan.hit(phase)     the decode loop's calls
    plan.fired                             [{id?, kind, phase, round, at_round, at_token}] in firing order
    """

    def __init__(self, faults=(), host: Callable | None = None, on_fire: Callable | None = None):
        self.armed = [check_fault(f) for f in (faults or ())]
        self.fired: list[dict] = []
        self.host = host
        self.on_fire = on_fire
        self.round = 0
        self.tokens = 0            # committed tokens of this answer so far (the decode loop keeps it up to date)

    def __bool__(self) -> bool:
        return bool(self.armed)

    def next_round(self) -> None:
        self.round += 1

    def pending(self) -> list[dict]:
        return list(self.armed)

    def _take(self, phase: str) -> dict | None:
        for i, f in enumerate(self.armed):
            if f["phase"] == phase and (phase in ("load", "prefill") or f["round"] <= self.round):
                return self.armed.pop(i)
        return None

    def hit(self, phase: str) -> None:
        """Fire the faults armed for `phase` now: raise for the loop's kinds, call the host for its kinds."""
        while True:
            f = self._take(phase)
            if f is None:
                return
            rec = {**f, "at_round": self.round, "at_token": self.tokens}
            self.fired.append(rec)
            if self.on_fire is not None:
                self.on_fire(rec)
            where = f"{phase}" + ("" if phase in ("load", "prefill") else f", round {self.round}")
            if f["kind"] == "exception":
                raise InjectedFault(f"injected exception ({where})")
            if f["kind"] == "draft_only":
                raise DraftFault(f"injected draft backend failure ({where})")
            if self.host is not None:
                self.host(f["kind"], phase, self.round)
            if f["kind"] == "worker_killed":
                raise WorkerKilled(f"the worker was killed ({where})")
