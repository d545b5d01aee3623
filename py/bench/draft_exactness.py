"""Greedy speculative decoding with the shipped draft == the champion alone, on EVERY workload prompt.

    python build.py bench draft_exactness [--max-new-tokens N] [--k K] [--stratum NAME]

CPython reference backend. Prints one JSON line per prompt (identical, tau, tokens) and a summary; exits 1 if any
answer differs. Answers are capped at --max-new-tokens (default: each prompt's own max_new_tokens).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from exactspec.chat import encode_chat  # noqa: E402
from exactspec.decode import GenerateConfig, generate  # noqa: E402
from exactspec.reference import ReferenceModel  # noqa: E402
from exactspec.tokenizer import Tokenizer  # noqa: E402
from exactspec_train.data import load_workload, workload_messages  # noqa: E402

CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
MANIFEST = ROOT / "static" / "models" / "draft-smollm2.manifest.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-new-tokens", type=int, default=0)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--stratum", default=None)
    ap.add_argument("--draft", default=None)
    a = ap.parse_args(argv)
    draft_path = Path(a.draft) if a.draft else models_draft()
    tok = Tokenizer.from_gguf(CHAMPION)
    champ = ReferenceModel.from_file(CHAMPION, max_len=4096)
    draft = ReferenceModel.from_file(draft_path, max_len=4096)
    items = [it for it in load_workload(ROOT / "tests" / "data" / "workload.jsonl")
             if a.stratum is None or it["stratum"] == a.stratum]
    bad, taus, t0 = [], [], time.perf_counter()
    for it in items:
        prompt = encode_chat(tok, workload_messages(it))
        n = min(a.max_new_tokens, it["max_new_tokens"]) if a.max_new_tokens else it["max_new_tokens"]
        alone = generate(champ, prompt, GenerateConfig(max_new_tokens=n, k=0), eos_ids=[2])
        spec = generate(champ, prompt, GenerateConfig(max_new_tokens=n, k=a.k, drafter="model"), draft=draft,
                        eos_ids=[2])
        same = spec.token_ids == alone.token_ids
        if not same:
            bad.append(it["id"])
        taus.append(spec.stats["tau"])
        print(json.dumps({"id": it["id"], "identical": same, "tokens": len(alone.token_ids),
                          "tau": round(spec.stats["tau"], 3)}), flush=True)
    print(json.dumps({"prompts": len(items), "identical": len(items) - len(bad), "differ": bad, "k": a.k,
                      "mean_tau": round(sum(taus) / max(1, len(taus)), 3), "draft": draft_path.name,
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 1 if bad else 0


def models_draft() -> Path:
    m = json.loads(MANIFEST.read_text())
    return MANIFEST.parent / m["draft"]["file"]


if __name__ == "__main__":
    raise SystemExit(main())
