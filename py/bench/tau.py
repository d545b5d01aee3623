"""Tokens per target pass (tau) and reference speed on SmolLM2, CPython reference backend.

    python build.py bench tau [--max-new-tokens N] [--k K]

Prints, for 3 chat prompts: tau and acceptance by position for the n-gram drafter and for the champion drafting for
itself (greedy), checks each answer equals the champion alone, and the reference's plain decode tokens/s.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from exactspec.chat import encode_chat
from exactspec.decode import GenerateConfig, generate
from exactspec.reference import ReferenceModel
from exactspec.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
PROMPTS = [
    "Summarize in two sentences: The meeting was moved from Monday to Wednesday because the projector broke, "
    "and the team used the extra time to rehearse the demo twice.",
    "Write a Python function that returns the squares of the numbers 1 to 10 as a list.",
    "Repeat this list exactly, then add one more item: apples, pears, plums, cherries, apples, pears, plums.",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=4)
    a = ap.parse_args()
    t0 = time.perf_counter()
    champ = ReferenceModel.from_file(CHAMPION, max_len=512)
    load_s = time.perf_counter() - t0
    twin = ReferenceModel.from_file(CHAMPION, max_len=512)
    tok = Tokenizer.from_gguf(CHAMPION)
    rows = []
    for i, text in enumerate(PROMPTS):
        ids = encode_chat(tok, [{"role": "user", "content": text}])
        base = generate(champ, ids, GenerateConfig(max_new_tokens=a.max_new_tokens), tokenizer=tok)
        for drafter, draft in (("ngram", None), ("self", twin)):
            cfg = GenerateConfig(max_new_tokens=a.max_new_tokens, k=a.k, drafter="model" if draft else "ngram")
            r = generate(champ, ids, cfg, draft=draft, tokenizer=tok)
            same = r.token_ids == base.token_ids
            rows.append({"prompt": i, "drafter": drafter, "k": a.k, "tau": round(r.stats["tau"], 3),
                         "acceptance_by_position": [round(x, 3) for x in r.stats["acceptance_by_position"]],
                         "tokens": len(r.token_ids), "identical_to_champion": same})
            print(json.dumps(rows[-1]), flush=True)
            assert same, "speculation changed the answer"
        print(json.dumps({"prompt": i, "champion_tokens_per_s": round(base.stats["tokens_per_s"], 2),
                          "ttft_ms": round(base.stats["ttft_ms"], 1), "prompt_tokens": len(ids)}), flush=True)
    # plain single-token decode speed
    ids = encode_chat(tok, [{"role": "user", "content": "Tell me about the sea."}])
    champ.truncate(0)
    champ.forward(ids, 0, 1)
    n = 32
    tok_id = ids[-1]
    t = time.perf_counter()
    for j in range(n):
        row = champ.forward([tok_id], len(ids) + j, 1)
        tok_id = int(row[0].argmax())
    dt = time.perf_counter() - t
    print(json.dumps({"reference_load_s": round(load_s, 2), "reference_decode_tokens_per_s": round(n / dt, 2)}))


if __name__ == "__main__":
    main()
