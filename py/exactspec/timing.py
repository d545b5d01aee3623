"""Pass times of a session's loaded models: the timings the break-even formula needs (exactspec.schedule),

    speedup(k) = E(a, k) * T_single / (k * T_draft + T_verify(k) + T_overhead),

measured through the very backends the decode loop uses (the WebGPU engine through exactspec.bridge, or the numpy
reference), in the same process, between answers. Benchmarks call it through the page (`exactspec.timings()`) or
the Node host (py/bench/product.py); it never decides a token. Every figure is the median (and minimum) of `reps`
repetitions at the position right after the prompt; afterwards both caches are rolled back to the prompt, which
the next answer reuses (kv.TrackedCache keeps track, so nothing stale is ever reused).

    out = await measure(session, {"chat": [...], "ks": [1, 2, 3, 4], "reps": 5, "drafters": ["ngram", "model", "head"],
                                   "temperature": 0, "seed": 0})
    {"position": p,                         # prompt length - 1: where the measured passes start
     "forward_ms": {"median", "min"},       # one champion forward of 1 token, logits read back into numpy
     "ahead": {"n", "ms_per_token": {...}} | None,   # decode_ahead(n) / n where the backend runs ahead
     "ahead_chain": {"n", "runs", "ms_per_token"},   # CHAIN runs of decode_ahead(n) chained by continuations
                                            # (`then`), as the decode loop runs the champion alone; where there is room
     "single_ms": {...},                    # T_single: per token of plain decoding (ahead where offered)
     "verify_ms": {k: {...}},               # T_verify(k): one champion forward of k + 1 tokens, k = 1..max(ks) (greedy
                                            # on a backend offering verify: picks read back, as the decode loop does)
     "draft_ms": {"model": {...}, "head": {...}, "ngram": {...}},   # T_draft per proposal (a draft / head forward,
                                            # an n-gram lookup / k)
     "round_ms": {"model": {k: {...}}, "head": {...}},   # the whole on-device round (spec_round) where offered
     "chain_ms": {k: {"rounds", "k_run", "proposals_per_round", "ms_per_round": {...}}},   # the n-gram drafter's
                                            # rounds made by the device (ngram_chain, greedy) for the setting k: CHAIN
                                            # chains of its chain_rounds rounds from the prompt, chained by
                                            # continuations as the decode loop runs them (at k_run proposals: k, at
                                            # most decode.CHAIN_LONG_K from decode.CHAIN_LONG_POS on), timed whole as
                                            # ahead_chain is; where offered and there is room, else {}
     "spec_round": bool, "rows": bool}
"""
from __future__ import annotations

import json
import time


CHAIN = 4      # runs chained by continuations a repetition: decode_ahead's (ahead_chain), n-gram chains (chain_ms)


def _stat(xs: list) -> dict:
    ys = sorted(xs)
    n = len(ys)
    med = ys[n // 2] if n % 2 else 0.5 * (ys[n // 2 - 1] + ys[n // 2])
    return {"median": med * 1000.0, "min": ys[0] * 1000.0, "n": n}


async def _prefill(cache, ids: list) -> int:
    """Put ids[:-1] in the cache (reusing what it holds); returns that length, where the timed passes start."""
    p = len(ids) - 1
    keep = min(cache.common_prefix(ids), p)
    cache.truncate(keep)
    if keep < p:
        await cache.forward(ids[keep:p], keep, 1)
    return p


async def measure(session, req: dict, clock=None) -> dict:
    from .backend import Pick
    from .drafters.ngram import NgramDrafter
    from .decode import chain_k_at
    clock = clock or time.perf_counter
    ks = [int(k) for k in req.get("ks", [1, 2, 3, 4])]
    reps = max(1, int(req.get("reps", 5)))
    drafters = list(req.get("drafters", ["ngram", "model"]))
    if any(k < 1 for k in ks):
        raise ValueError("ks: every k must be at least 1")
    temperature = float(req.get("temperature", 0.0))
    from .settings import check
    seed = check({"seed": req.get("seed", 0)}, defaults={"seed": 0})["seed"]   # the settings' limits (no aliasing)
    pick = Pick(temperature, seed)
    rows = temperature > 0               # the decode loop reads rows back only when it samples
    if session._busy:
        raise ValueError("an answer is being generated: time the passes between answers")
    m = session._champion()
    champ = m.cache                      # TrackedCache(YieldingBackend(backend)): what the decode loop uses
    ids = session.prompt_ids(req)
    if len(ids) < 2:
        raise ValueError("timings need a prompt of at least 2 tokens")
    if len(ids) + max(ks) + 1 > m.config.seq_len:
        raise ValueError("the prompt leaves no room for the timed passes in the context")
    tok = int(ids[-1])
    # the drafts first: binding a device head to the champion makes the champion's cache be computed again
    dcache = {dr: session._draft_for(dr) for dr in ("model", "head")
              if dr in drafters and (session.head if dr == "head" else session.draft) in session.models}
    p = await _prefill(champ, ids)

    async def timed(fn) -> list:
        out = []
        for _ in range(reps):
            t0 = clock()
            await fn()
            out.append(clock() - t0)
        return out

    async def one():
        await champ.forward([tok], p, 1)
        champ.truncate(p)

    out = {"position": p, "reps": reps, "rows": rows, "spec_round": False}
    await one()                                        # warm-up (pipelines, pre-encoded command buffers)
    out["forward_ms"] = _stat(await timed(one))
    out["ahead"] = None
    out["single_ms"] = out["forward_ms"]
    n_ahead = int(champ.ahead_max)
    if n_ahead >= 2:
        async def ahead():
            await champ.decode_ahead(tok, p, n_ahead, pick, rows)
            champ.truncate(p)
        await ahead()
        t = await timed(ahead)
        out["ahead"] = {"n": n_ahead, "ms_per_token": _stat([x / n_ahead for x in t])}
        out["single_ms"] = out["ahead"]["ms_per_token"]
        # as the decode loop runs the champion alone: runs of n_ahead chained by continuations (decode_ahead's
        # `then`: each run's successor is submitted before the run is read back), CHAIN runs per repetition
        chain = min(CHAIN, (m.config.seq_len - p) // n_ahead)
        if chain >= 2:
            async def chained():
                t, pos = tok, p
                for i in range(chain):
                    r = await champ.decode_ahead(t, pos, n_ahead, pick, rows, then=n_ahead if i < chain - 1 else 0)
                    t, pos = int(r.ids[-1]), pos + n_ahead
                champ.truncate(p)
            await chained()
            t = await timed(chained)
            out["ahead_chain"] = {"n": n_ahead, "runs": chain, "ms_per_token": _stat([x / (chain * n_ahead) for x in t])}
            # (not T_single: on the H200 this chain measured 1.17-1.34 ms a token against 1.02-1.07 for one run, while
            # answers with continuations ran at 1.0-1.1 ms a token after their first run: the chain's first
            # continuation was encoded after the first readback, which the engine no longer does; README, issue 10)
    out["verify_ms"] = {}
    for k in range(1, max(ks) + 1):          # every k up to the largest: rounds with fewer proposals use them
        async def verify(k=k):
            if not rows and champ.offers("verify"):
                await champ.verify([tok] * (k + 1), p, pick, False)
            else:
                await champ.forward([tok] * (k + 1), p, k + 1)
            champ.truncate(p)
        await verify()
        out["verify_ms"][str(k)] = _stat(await timed(verify))
    out["draft_ms"] = {}
    out["round_ms"] = {}
    out["chain_ms"] = {}
    ng = NgramDrafter()
    if "ngram" in drafters and not rows and champ.offers("ngram_chain"):
        # the n-gram's chains as the decode loop runs them (greedy only): each round looks up its proposals on the
        # device and verifies them in one pass; a chain's R rounds are one submission and the next chain is the
        # continuation (`then`) of the one before, so the price per round holds the device's lookup and step work,
        # which a verify pass alone (verify_ms) does not. The rounds find what the prompt offers (proposals_per_round,
        # the same in every repetition: greedy), from the prompt's end on. Timed whole, from the first chain's call to
        # the last's return, exactly as ahead_chain times its runs (and as many chains as it has runs), so that both
        # carry the same first submission and last readback and the prediction compares like with like. (Timed from
        # the first chain's return instead, 2026-12-07c on an H100, the rounds came out at 0.89 ms against 0.99 ms
        # for ahead_chain's pass and 0.98 ms of GPU time in bench/gpu/bench.mjs: a window of two 4-round chains
        # after a readback that returned late.) min(reps, 3) repetitions (a chain round costs about a pass).
        # (k_run: the k the decode loop's chains make there for the setting's k, decode.chain_k_at)
        R = int(champ.chain_rounds)
        for k_set in ks:
            k = chain_k_at(k_set, p)
            runs = min(CHAIN, (m.config.seq_len - p) // (R * (k + 1))) if R > 0 and k <= champ.chain_k_max else 0
            if runs < 2:
                continue

            async def chained(k=k, runs=runs) -> tuple:
                seq, found, t0 = list(ids), 0, clock()
                for i in range(runs):
                    r = await champ.ngram_chain(seq, len(seq) - 1, R, k, pick, ng.min_ngram, ng.max_ngram,
                                                then=R if i < runs - 1 else 0)
                    found += sum(len(x) for x in r.proposals)
                    seq += r.appended()
                t = clock() - t0
                champ.truncate(p)
                return found, t
            await chained()
            got = [await chained() for _ in range(min(reps, 3))]
            n = runs * R
            out["chain_ms"][str(k_set)] = {"rounds": n, "k_run": k, "proposals_per_round": got[0][0] / n,
                                       "ms_per_round": _stat([t / n for _, t in got])}
    if "ngram" in drafters:
        seq = list(ids)
        k = max(ks)

        async def lookup():
            ng.lookup(seq, k)
        out["draft_ms"]["ngram"] = {key: (v / k if key != "n" else v)
                                    for key, v in _stat(await timed(lookup)).items()}
    for drafter, d in dcache.items():
        # a draft model, or the draft head (its pass at p reads the champion's feature of p - 1, which the champion
        # holds: the first pass of a round; the on-device round's later passes read the head's own predictions)
        dp = await _prefill(d, ids)

        async def draft_one():
            await d.forward([tok], dp, 1)
            d.truncate(dp)
        await draft_one()
        out["draft_ms"][drafter] = _stat(await timed(draft_one))
        if champ.offers("spec_round"):
            out["spec_round"] = True
            out["round_ms"][drafter] = {}
            for k in ks:
                async def round_(k=k):
                    await champ.spec_round(d, [tok], dp, k, tok, p, pick, rows)
                    champ.truncate(p)
                    d.truncate(dp)
                await round_()
                out["round_ms"][drafter][str(k)] = _stat(await timed(round_))
    return out


async def measure_json(session, req_json: str) -> str:
    req = json.loads(req_json)
    if not isinstance(req, dict):
        raise ValueError("timings: the request must be an object")
    return json.dumps(await measure(session, req))
