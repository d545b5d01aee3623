"""What a drafter's proposals cost inside the engine's on-device round, from `bench product` reports' timings (the
product's loop on the H200: exactspec.timing.measure through bridge.py and app/gpu/engine.js, 5 repetitions a set,
one set per prompt and run):

    own      (T_round(k) - T_verify(k)) / k / T_single: what k proposals add to a round over a verify of the same
             k + 1 rows, both one submission with its readback, measured in the same set: the draft's (or head's)
             passes and picks on the GPU, per proposal
    marginal (T_round(4) - T_round(2)) / 2 / T_single: what two more proposals add to a round; it also holds the
             champion's two more verify rows ((T_verify(4) - T_verify(2)) / 2 / T_single, printed beside it)

Median [min-max] over the report's timing sets, per drafter with on-device rounds.

    python bench/h200/draft_cost.py REPORT.json[.gz] ...
"""
from __future__ import annotations

import gzip
import json
import statistics
import sys


def _load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def costs(report: dict) -> dict:
    """{drafter: {"own": [...], "marginal": [...], "verify_rows": [...]}} over the report's timing sets."""
    out: dict = {}
    for t in report.get("timings") or []:
        single = t["single_ms"]["median"]
        verify = t.get("verify_ms") or {}
        for drafter, rounds in (t.get("round_ms") or {}).items():
            c = out.setdefault(drafter, {"own": [], "marginal": [], "verify_rows": []})
            for k, r in rounds.items():
                if k in verify:
                    c["own"].append((r["median"] - verify[k]["median"]) / int(k) / single)
            if "2" in rounds and "4" in rounds:
                c["marginal"].append((rounds["4"]["median"] - rounds["2"]["median"]) / 2 / single)
                if "2" in verify and "4" in verify:
                    c["verify_rows"].append((verify["4"]["median"] - verify["2"]["median"]) / 2 / single)
    return out


def _fmt(xs: list) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for path in argv:
        for drafter, c in costs(_load(path)).items():
            print(f"{path}: {drafter}: own {_fmt(c['own'])} (n {len(c['own'])}), marginal {_fmt(c['marginal'])}, "
                  f"of which verify rows {_fmt(c['verify_rows'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
