"""Generation settings: the ONE definition of their names, defaults, limits and the speculation-off rule.

The Python core is the authority. The CLI (`exactspec.__main__`), the session (the page's requests) and
`decode.GenerateConfig.validate` use this module; the page reads the same rules from `static/rules.js`, which
`python build.py setup` writes from `rules_json()` (tests/test_settings.py checks that the page's validator and this
one agree, case by case).

    s = normalise({"k": "3", "speculation": False})   # -> every field, typed, with the rule applied; or SettingsError
"""
from __future__ import annotations

import math

MODES = ("coupled", "rejection")
DRAFTERS = ("none", "model", "ngram", "head")
# How k moves from round to round: 'fixed' keeps the k setting; 'additive' starts at it, adds 1 after a round whose
# proposals were all accepted and takes 1 away after a round whose first proposal was rejected, within
# 1..the champion backend's k_limit (a device-dependent limit; K_LIMIT_DEFAULT where the backend names none).
K_SCHEDULES = ("fixed", "additive")
K_LIMIT_DEFAULT = 8
# How a draft model with another tokenizer proposes (exactspec.vocab): auto picks from the two tokenizers (and the
# mode); remap = same token strings under other ids, tli = token-level intersection, slem = string-level exact match.
BRIDGES = ("auto", "remap", "tli", "slem")

# Every setting a request may carry, with its default (the page's first-visit values and the API's / CLI's defaults).
DEFAULTS = {
    "speculation": True,     # off: drafter 'none' and k 0 (see `effective`)
    "adaptive": True,        # the scheduler turns speculation off while the measured timings say it does not pay
    "grammar_draft": True,   # JSON mode: the grammar proposes the tokens it forces (off with speculation: `effective`)
    "drafter": "ngram",
    "bridge": "auto",        # a draft model with another tokenizer: which bridge (exactspec.vocab)
    "k": 4,
    "k_schedule": "fixed",
    "draft_stop": 0.0,       # confidence stop: a model/head draft halts once its top probability is below this (0 = off)
    "head_copy": True,       # drafter 'head': where the n-gram finds a copy in the text, its proposals come first
                             # (on since 2026-12-05: faster than the head alone at k = 1, 2 and 4 on the CPU fallback
                             # and in three H100 leases, README "The draft head")
    "mode": "coupled",
    "temperature": 0.0,      # 0 = greedy
    "top_k": 0,              # 0 = off
    "top_p": 1.0,            # 1 = off
    "seed": 0,
    "max_new_tokens": 128,
}

# name -> (kind, low, high, low_exclusive): integer or float ranges, inclusive unless low_exclusive
LIMITS = {
    "k": ("int", 0, 16, False),
    "draft_stop": ("float", 0.0, 1.0, False),
    "temperature": ("float", 0.0, 10.0, False),
    "top_k": ("int", 0, 1_000_000, False),
    "top_p": ("float", 0.0, 1.0, True),
    "seed": ("int", 0, 2 ** 53 - 1, False),          # exact in a JS number and in Python
    "max_new_tokens": ("int", 1, 8192, False),
}
CHOICES = {"drafter": DRAFTERS, "mode": MODES, "k_schedule": K_SCHEDULES, "bridge": BRIDGES}
FLAGS = ("speculation", "adaptive", "grammar_draft", "head_copy")


class SettingsError(ValueError):
    """An invalid setting; the message starts with the field's name: 'k: must be between 0 and 16'."""


def _fmt(x) -> str:
    """A limit as the page's JS prints it (10, not 10.0)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _number(name: str, value):
    kind, lo, hi, lo_excl = LIMITS[name]
    if isinstance(value, bool) or value is None or value == "":
        raise SettingsError(f"{name}: must be a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise SettingsError(f"{name}: must be a number") from None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SettingsError(f"{name}: must be a number") from None
    if not math.isfinite(x):
        raise SettingsError(f"{name}: must be a number")
    if kind == "int":
        if isinstance(value, float) and not value.is_integer():
            raise SettingsError(f"{name}: must be a whole number")
        try:
            n = int(value)
        except (TypeError, ValueError, OverflowError):
            raise SettingsError(f"{name}: must be a whole number") from None
        if n != value:
            raise SettingsError(f"{name}: must be a whole number")
        x = n
    if x < lo or x > hi or (lo_excl and x == lo):
        rng = (f"greater than {_fmt(lo)} and at most {_fmt(hi)}" if lo_excl
               else f"between {_fmt(lo)} and {_fmt(hi)}")
        raise SettingsError(f"{name}: must be {rng}")
    return x


def effective(s: dict) -> dict:
    """The speculation-off rule, in one place: speculation off, drafter 'none' or k = 0 all mean no draft
    (drafter 'none', k = 0, adaptive off). Grammar-forced drafting (JSON mode) is speculation too: the speculation
    switch turns it off; drafter 'none' or k = 0 leave it on (the grammar's proposals alone)."""
    s = dict(s)
    forced = bool(s.get("grammar_draft", False)) and bool(s.get("speculation", True))
    if not s.get("speculation", True) or s.get("drafter") == "none" or not s.get("k"):
        s.update(speculation=False, drafter="none", k=0, adaptive=False)
    if "grammar_draft" in s:
        s["grammar_draft"] = forced
    return s


def check(req: dict, defaults: dict | None = None) -> dict:
    """Every setting of `req` (missing ones from `defaults`, DEFAULTS if None), checked and typed; unknown keys are
    ignored (a request also carries prompt, chat, ...). The page's validateSettings (app/protocol.js) is the same
    check over static/rules.js."""
    base = DEFAULTS if defaults is None else defaults
    out = {}
    for name, default in base.items():
        v = req.get(name, default)
        if v is None:
            v = default
        if name in LIMITS:
            out[name] = _number(name, v)
        elif name in CHOICES:
            if v not in CHOICES[name]:
                raise SettingsError(f"{name}: must be one of {', '.join(CHOICES[name])}")
            out[name] = v
        else:
            if not isinstance(v, bool):
                raise SettingsError(f"{name}: must be true or false")
            out[name] = v
    return out


def normalise(req: dict, defaults: dict | None = None) -> dict:
    """check() with the speculation-off rule applied: what a generation runs with."""
    return effective(check(req, defaults))


def rules_json() -> dict:
    """What the page needs (static/rules.js): names, defaults, limits, choices."""
    return {
        "defaults": dict(DEFAULTS),
        "limits": {k: {"kind": v[0], "min": v[1], "max": v[2], "min_exclusive": v[3]} for k, v in LIMITS.items()},
        "choices": {k: list(v) for k, v in CHOICES.items()},
        "flags": list(FLAGS),
        "modes": list(MODES),
        "drafters": list(DRAFTERS),
        "bridges": list(BRIDGES),
    }


def rules_js() -> str:
    import json
    return ("// Generated by `python build.py setup` from py/exactspec/settings.py (the one definition of the settings'\n"
            "// names, defaults and limits). Do not edit.\n"
            f"export default {json.dumps(rules_json(), indent=1, sort_keys=True)};\n")
