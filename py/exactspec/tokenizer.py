"""Byte-level BPE tokenizers (GGUF "gpt2" vocabularies and HF tokenizer.json), pure Python.

Runs in CPython and in Pyodide 3.12, where neither `regex` nor `tokenizers` exists and `re` has no `\\p{L}`.
The pre-tokenizer split patterns are therefore hand-written scanners over `unicodedata` categories; each one
reproduces, alternative by alternative, the leftmost-first semantics of the regex it replaces:

- gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
- smollm: every \\p{N} isolated first (llama.cpp LLAMA_VOCAB_PRE_TYPE_SMOLLM, HF Digits(individual_digits)),
          then gpt2 on the pieces in between.
- llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|
          \\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
- qwen2:  llama3 with \\p{N} (one digit) instead of \\p{N}{1,3}.
`\\s` is the Unicode White_Space property (what Oniguruma and llama.cpp use), not `str.isspace`.

Also: BPE merges by rank with a per-instance LRU word cache, special/added tokens matched before
pre-tokenisation (leftmost, longest), decode, and an incremental detokenizer that never emits half a UTF-8
character (`Tokenizer.stream()`). SentencePiece-style BPE with byte fallback (llama2 tokenizer.json) is supported too.
"""

from __future__ import annotations

import codecs
import heapq
import json
import os
import unicodedata

# Character classes of the scanners (constants, not state).
_L, _N, _S, _O = 0, 1, 2, 3
# Unicode White_Space: what `\s` means for Oniguruma (HF tokenizers) and for llama.cpp's unicode tables.
_WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_PRE_TOKENIZERS = ("gpt2", "smollm", "llama3", "qwen2")
# GGUF `tokenizer.ggml.pre` values and the scanner that implements each one.
_GGUF_PRE = {
    "default": "gpt2", "gpt2": "gpt2", "gpt-2": "gpt2", "mpt": "gpt2", "olmo": "gpt2", "jais": "gpt2",
    "smollm": "smollm", "starcoder": "smollm", "refact": "smollm", "command-r": "smollm", "codeshell": "smollm",
    "exaone": "smollm", "minerva-7b": "smollm",
    "llama3": "llama3", "llama-bpe": "llama3", "llama-v3": "llama3", "falcon3": "llama3", "pixtral": "llama3",
    "qwen2": "qwen2", "stablelm2": "qwen2", "deepseek-r1-qwen": "qwen2", "megrez": "qwen2",
}
# Extra tokens that end an assistant turn (chat formats) besides the declared EOS.
_TURN_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>")
_GGUF_TOKEN_NORMAL, _GGUF_TOKEN_UNKNOWN, _GGUF_TOKEN_CONTROL, _GGUF_TOKEN_USER_DEFINED, _GGUF_TOKEN_UNUSED = 1, 2, 3, 4, 5
_GGUF_TOKEN_BYTE = 6
_PRE_TO_GGUF = {"gpt2": "gpt2", "smollm": "smollm", "llama3": "llama-bpe", "qwen2": "qwen2"}
_WORD_CACHE_MAX = 65536


class TokenizerError(ValueError):
    """A tokenizer file or setting that cannot be used."""


class TokenizerUnsupported(TokenizerError, NotImplementedError):
    """A tokenizer kind or option this implementation does not support (a clear refusal, not a crash: it is a
    TokenizerError, so a ValueError, and still a NotImplementedError for older callers)."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class Tokenizer:
    """A BPE tokenizer. Build with `from_gguf`, `from_gguf_metadata` or `from_tokenizer_json`.

    kind: "bytelevel" (GPT-2 style byte-level BPE) or "spm" (SentencePiece-style BPE over '▁' with byte fallback).
    pre: one of gpt2, smollm, llama3, qwen2 (bytelevel only).
    """

    def __init__(self, *, tokens, merges, kind="bytelevel", pre="gpt2", added=(), bos_id=None, eos_id=None,
                 eos_ids=None, normalizer=None, ignore_merges=False, chat_template=None, unk_id=None,
                 add_bos=False, fuse_unk=False, added_only=()):
        if kind not in ("bytelevel", "spm"):
            raise TokenizerError(f"unsupported tokenizer kind {kind!r}")
        if kind == "bytelevel" and pre not in _PRE_TOKENIZERS:
            raise TokenizerError(f"unsupported pre-tokenizer {pre!r} (supported: {', '.join(_PRE_TOKENIZERS)})")
        if normalizer not in (None, "nfc"):
            raise TokenizerError(f"unsupported normalizer {normalizer!r}")
        self.kind = kind
        self.pre = pre
        self.normalizer = normalizer
        self.ignore_merges = bool(ignore_merges)
        self.chat_template = chat_template
        self.add_bos = bool(add_bos)
        self.fuse_unk = bool(fuse_unk)
        # tokens: list indexed by id -> token string in the model's own alphabet (None for holes).
        self._tokens = list(tokens)  # (vocab_size,)
        self.vocab_size = len(self._tokens)
        if self.vocab_size == 0:
            raise TokenizerError("empty vocabulary")
        # The BPE model's vocabulary: string -> id (ids in `added_only` exist only as added tokens, as in HF
        # tokenizer.json where added tokens live outside model.vocab; GGUF has one table for both, like llama.cpp).
        added_only = set(added_only)
        self._vocab = {}
        for i, t in enumerate(self._tokens):
            if t is not None and t not in self._vocab and i not in added_only:
                self._vocab[t] = i
        # Added / special tokens: (id, content, special)
        self._added = {}
        self.special_ids = set()
        for tid, content, special in added:
            if not (0 <= tid < self.vocab_size):
                raise TokenizerError(f"added token {content!r} has id {tid} outside the vocabulary ({self.vocab_size})")
            if not content:
                continue
            self._added[content] = (tid, bool(special))
            if special:
                self.special_ids.add(tid)
        self._added_ids = {tid: content for content, (tid, _s) in self._added.items()}
        self._added_first = {}  # first char -> contents sorted longest first
        for content in sorted(self._added, key=len, reverse=True):
            self._added_first.setdefault(content[0], []).append(content)
        # Merges: (left id, right id) -> (rank, merged id)
        self._merges = {}
        vocab = self._vocab
        for rank, (a, b) in enumerate(merges):
            ia, ib, im = vocab.get(a), vocab.get(b), vocab.get(a + b)
            if ia is None or ib is None or im is None:
                raise TokenizerError(f"merge #{rank} ({a!r} {b!r}) names a token missing from the vocabulary")
            if (ia, ib) not in self._merges:
                self._merges[(ia, ib)] = (rank, im)
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.unk_id = unk_id
        for name, v in (("bos", bos_id), ("eos", eos_id), ("unk", unk_id)):
            if v is not None and not (0 <= v < self.vocab_size):
                raise TokenizerError(f"{name} id {v} is outside the vocabulary ({self.vocab_size})")
        if eos_ids is None:
            eos_ids = set() if eos_id is None else {eos_id}
            for t in _TURN_END_TOKENS:
                if t in self._added:
                    eos_ids.add(self._added[t][0])
        self.eos_ids = set(eos_ids)
        # Byte maps.
        if kind == "bytelevel":
            b2u = bytes_to_unicode()
            self._byte_char = [b2u[b] for b in range(256)]  # (256,) byte -> vocab char
            u2b = {c: b for b, c in b2u.items()}
            self._char_byte = u2b
            # Bytes whose character is not in the vocabulary (SmolLM2 lacks 21, e.g. 0x04, 0xC0, 0xF5-0xFF) are
            # dropped while encoding, as HF's BPE does without an unk token; llama.cpp would throw instead.
            self.missing_bytes = [b for b in range(256) if self._byte_char[b] not in vocab]
        else:
            self._byte_fallback = [vocab.get(f"<0x{b:02X}>") for b in range(256)]  # (256,) byte -> id or None
            self.missing_bytes = [b for b in range(256) if self._byte_fallback[b] is None]
        # SentencePiece-style BPE never merges across a space that follows another character when no token holds
        # '▁' after another character: the text can then be cut into words there (`encode_pieces`).
        self._spm_word_cuts = kind == "spm" and not any(
            t is not None and "\u2581" in t.lstrip("\u2581") for t in self._vocab)
        self._token_bytes = [None] * self.vocab_size  # (vocab_size,) lazily filled
        # Per-instance caches (no module globals).
        self._cat = {}
        self._word_cache = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_gguf(cls, path):
        """Tokenizer stored in a GGUF file's metadata (tokenizer.ggml.*)."""
        return cls.from_gguf_metadata(_gguf_metadata(path))

    @classmethod
    def from_gguf_metadata(cls, meta: dict):
        return cls(**gguf_tokenizer_args(meta))

    @staticmethod
    def _gguf_args(meta: dict) -> dict:
        model = meta.get("tokenizer.ggml.model")
        if model not in ("gpt2", "llama"):
            raise TokenizerUnsupported(
                f"GGUF tokenizer model {model!r} is not supported (only 'gpt2' byte-level BPE and 'llama' "
                "SentencePiece-style BPE with merges)")
        if model == "llama" and not isinstance(meta.get("tokenizer.ggml.merges"), list):
            raise TokenizerUnsupported("GGUF tokenizer model 'llama' without tokenizer.ggml.merges is not supported "
                                      "(SentencePiece scores only): export the vocabulary with its BPE merges")
        tokens = meta.get("tokenizer.ggml.tokens")
        merges = meta.get("tokenizer.ggml.merges")
        if not isinstance(tokens, list) or not tokens:
            raise TokenizerError("GGUF metadata has no tokenizer.ggml.tokens")
        if not isinstance(merges, list):
            raise TokenizerError("GGUF metadata has no tokenizer.ggml.merges")
        if not all(isinstance(t, str) for t in tokens) or not all(isinstance(m, str) for m in merges):
            raise TokenizerError("tokenizer.ggml.tokens / merges must be arrays of strings")
        pre_name = meta.get("tokenizer.ggml.pre", "default")
        if not isinstance(pre_name, str):
            raise TokenizerError(f"tokenizer.ggml.pre must be a string, got {type(pre_name).__name__}")
        pre = _GGUF_PRE.get(pre_name) if model == "gpt2" else "gpt2"
        if pre is None:
            raise TokenizerUnsupported(f"GGUF pre-tokenizer {pre_name!r} is not supported "
                                      f"(supported: {', '.join(sorted(_GGUF_PRE))})")
        types = meta.get("tokenizer.ggml.token_type")
        if types is not None and (not isinstance(types, list) or len(types) != len(tokens)):
            got = f"{len(types)} entries" if isinstance(types, list) else type(types).__name__
            raise TokenizerError(f"tokenizer.ggml.token_type has {got} for {len(tokens)} tokens")
        added = []
        if types is not None:
            for i, t in enumerate(types):
                if t == _GGUF_TOKEN_CONTROL or (t == _GGUF_TOKEN_UNKNOWN and model == "llama"):
                    added.append((i, tokens[i], True))
                elif t == _GGUF_TOKEN_USER_DEFINED:
                    added.append((i, tokens[i], False))
        pairs = []
        for k, m in enumerate(merges):
            parts = m.split(" ")
            if len(parts) != 2:
                raise TokenizerError(f"tokenizer.ggml.merges[{k}] = {m!r} is not 'left right'")
            pairs.append((parts[0], parts[1]))

        def opt_id(key):
            v = meta.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int):
                raise TokenizerError(f"{key} must be an integer, got {v!r}")
            return v

        template = meta.get("tokenizer.chat_template")
        return dict(tokens=tokens, merges=pairs, kind="bytelevel" if model == "gpt2" else "spm", pre=pre, added=added,
                    bos_id=opt_id("tokenizer.ggml.bos_token_id"), eos_id=opt_id("tokenizer.ggml.eos_token_id"),
                    unk_id=opt_id("tokenizer.ggml.unknown_token_id"),
                    ignore_merges=(pre == "llama3"), chat_template=template if isinstance(template, str) else None,
                    add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)), fuse_unk=(model == "llama"))

    @classmethod
    def from_tokenizer_json(cls, path, config_path=None):
        """HF tokenizer.json (BPE). bos/eos/chat template come from tokenizer_config.json beside it, if any."""
        from .formats.layout import load_json
        try:
            with open(path, "rb") as f:
                data = load_json(f.read(), "tokenizer.json", TokenizerError)
        except OSError as e:
            raise TokenizerError(f"cannot read tokenizer.json: {e}") from None
        config = None
        if config_path is None:
            cand = os.path.join(os.path.dirname(os.fspath(path)), "tokenizer_config.json")
            if os.path.exists(cand):
                config_path = cand
        if config_path is not None:
            try:
                with open(config_path, "rb") as f:
                    config = load_json(f.read(), "tokenizer_config.json", TokenizerError)
            except OSError as e:
                raise TokenizerError(f"cannot read tokenizer_config.json: {e}") from None
            if not isinstance(config, dict):
                raise TokenizerError(f"{config_path}: tokenizer config is not a JSON object")
        return cls.from_tokenizer_dict(data, config)

    @classmethod
    def from_tokenizer_dict(cls, data: dict, config: dict | None = None):
        """Tokenizer from parsed tokenizer.json (and optionally tokenizer_config.json) objects."""
        try:
            return cls._from_tokenizer_dict(data, config)
        except (KeyError, TypeError, AttributeError, IndexError) as e:
            raise TokenizerError(f"malformed tokenizer.json: {type(e).__name__}: {e}") from None

    @classmethod
    def _from_tokenizer_dict(cls, data, config):
        if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
            raise TokenizerError("tokenizer.json has no 'model' object")
        model = data["model"]
        if model.get("type", "BPE") != "BPE":
            raise TokenizerUnsupported(f"tokenizer.json model type {model.get('type')!r} is not supported (only BPE)")
        vocab = model.get("vocab")
        if not isinstance(vocab, dict):
            raise TokenizerError("tokenizer.json model has no vocab")
        added_list = data.get("added_tokens") or []
        ids = list(vocab.values()) + [a["id"] for a in added_list]
        if any((not isinstance(i, int)) or i < 0 for i in ids):
            raise TokenizerError("tokenizer.json has a negative or non-integer token id")
        if not ids:
            raise TokenizerError("tokenizer.json has no tokens (its vocab and added_tokens are empty)")
        n = max(ids) + 1
        if n > 4 * (len(ids) + 1024):
            raise TokenizerError(f"tokenizer.json ids are too sparse (max id {n - 1} for {len(ids)} tokens)")
        tokens = [None] * n  # (vocab_size,)
        for t, i in vocab.items():
            tokens[i] = t
        added = []
        added_only = []
        for a in added_list:
            if not isinstance(a.get("content"), str):
                raise TokenizerError(f"added token {a!r} has no content")
            if a.get("lstrip") or a.get("rstrip") or a.get("single_word"):
                raise TokenizerUnsupported(f"added token {a['content']!r} uses lstrip/rstrip/single_word")
            if tokens[a["id"]] is None:
                tokens[a["id"]] = a["content"]
                added_only.append(a["id"])
            added.append((a["id"], a["content"], bool(a.get("special"))))
        merges = []
        for k, m in enumerate(model.get("merges") or []):
            if isinstance(m, str):
                parts = m.split(" ")
            else:
                parts = list(m)
            if len(parts) != 2:
                raise TokenizerError(f"tokenizer.json merges[{k}] = {m!r} is not a pair")
            merges.append((parts[0], parts[1]))
        if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
            raise TokenizerUnsupported("BPE continuing_subword_prefix / end_of_word_suffix are not supported")
        if model.get("dropout"):
            raise TokenizerUnsupported("BPE dropout is not supported")

        norm = data.get("normalizer")
        pre_tok = data.get("pre_tokenizer")
        normalizer = None
        if model.get("byte_fallback"):
            kind, pre = "spm", None
            if not _is_spm_normalizer(norm) or pre_tok is not None:
                raise TokenizerUnsupported("byte-fallback BPE is supported only with the llama2 normalizer "
                                          "(Prepend '▁', Replace ' ' -> '▁') and no pre-tokenizer")
        else:
            kind = "bytelevel"
            if norm is not None:
                if norm.get("type") == "NFC":
                    normalizer = "nfc"
                else:
                    raise TokenizerUnsupported(f"normalizer {norm.get('type')!r} is not supported")
            pre = _pre_from_json(pre_tok)

        def tok_id(key):
            if config is None:
                return None
            v = config.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            if v is None:
                return None
            for content, i in ((a[1], a[0]) for a in added):
                if content == v:
                    return i
            return vocab.get(v)

        template = None if config is None else config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        return cls(tokens=tokens, merges=merges, kind=kind, pre=pre or "gpt2", added=added,
                   bos_id=tok_id("bos_token"), eos_id=tok_id("eos_token"), unk_id=(
                       vocab.get(model["unk_token"]) if model.get("unk_token") else None),
                   normalizer=normalizer, ignore_merges=bool(model.get("ignore_merges")),
                   chat_template=template, fuse_unk=bool(model.get("fuse_unk")),
                   add_bos=bool(config.get("add_bos_token", False)) if config else False, added_only=added_only)

    # ------------------------------------------------------------------ properties
    def pad_vocab(self, n: int) -> None:
        """Grow the id space to `n` with holes (ids without a token decode to nothing, as Hugging Face does): for a
        model whose embedding has padding rows past its tokenizer's last id."""
        if n > self.vocab_size:
            extra = n - self.vocab_size
            self._tokens.extend([None] * extra)
            self._token_bytes.extend([None] * extra)
            self.vocab_size = n

    def token_bytes(self, tid: int) -> bytes:
        """The bytes token `tid` stands for (special tokens: their text in UTF-8)."""
        if not (0 <= tid < self.vocab_size):
            raise IndexError(f"token id {tid} outside the vocabulary ({self.vocab_size})")
        b = self._token_bytes[tid]
        if b is None:
            b = self._compute_token_bytes(tid)
            self._token_bytes[tid] = b
        return b

    def _compute_token_bytes(self, tid):
        t = self._tokens[tid]
        if t is None:
            return b""
        if tid in self._added_ids:
            return self._added_ids[tid].encode("utf-8", errors="surrogateescape")
        if self.kind == "bytelevel":
            c2b = self._char_byte
            try:
                return bytes(c2b[c] for c in t)
            except KeyError:  # a token outside the byte alphabet: take its text as is
                return t.encode("utf-8", errors="surrogateescape")
        if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            try:
                return bytes([int(t[3:5], 16)])
            except ValueError:
                pass
        return t.replace("\u2581", " ").encode("utf-8")

    def id_of(self, token: str):
        """Id of a token given in the vocabulary's own spelling (or an added token's content), else None."""
        if token in self._added:
            return self._added[token][0]
        return self._vocab.get(token)

    def byte_token(self, b: int):
        """Id of the token that stands for the single byte `b` (byte-level: its character; SentencePiece: <0xXX>),
        or None when the vocabulary has none."""
        if self.kind == "bytelevel":
            return self._vocab.get(self._byte_char[b])
        return self._byte_fallback[b]

    def added_content(self, tid: int):
        """The text of added (special or user-defined) token `tid`, else None."""
        return self._added_ids.get(tid)

    def gguf_metadata(self) -> dict:
        """This tokenizer as GGUF tokenizer.* metadata (what from_gguf_metadata reads back to the same tokenizer):
        'gpt2' for byte-level BPE, 'llama' (tokens, scores, token types, plus the BPE merges llama.cpp does not need
        but this reader does) for SentencePiece-style BPE with byte fallback."""
        from .formats.gguf import GGUFValue, T_FLOAT32, T_INT32, T_UINT32
        if self.kind == "bytelevel" and self.normalizer is not None:
            raise TokenizerError("a byte-level tokenizer with a normalizer has no GGUF form here")
        if any(t is None for t in self._tokens):
            raise TokenizerError("the vocabulary has holes (ids without a token): no GGUF form")
        types = []
        for i, t in enumerate(self._tokens):
            if i in self._added_ids:
                special = self._added[self._added_ids[i]][1]
                types.append(_GGUF_TOKEN_UNKNOWN if i == self.unk_id and self.kind == "spm"
                             else _GGUF_TOKEN_CONTROL if special else _GGUF_TOKEN_USER_DEFINED)
            elif self.kind == "spm" and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                types.append(_GGUF_TOKEN_BYTE)
            else:
                types.append(_GGUF_TOKEN_NORMAL)
        tok = self._tokens
        merges = [f"{tok[a]} {tok[b]}" for (a, b), _r in sorted(self._merges.items(), key=lambda kv: kv[1][0])]
        md = {"tokenizer.ggml.model": "gpt2" if self.kind == "bytelevel" else "llama",
              "tokenizer.ggml.tokens": list(tok),
              "tokenizer.ggml.token_type": GGUFValue(T_INT32, types, array=True),
              "tokenizer.ggml.merges": merges,
              "tokenizer.ggml.add_bos_token": self.add_bos}
        if self.kind == "bytelevel":
            md["tokenizer.ggml.pre"] = _PRE_TO_GGUF[self.pre]
        else:  # llama.cpp's SentencePiece tokenizer merges by score: later merges score lower
            first = {}                                   # token id -> rank of the first merge that makes it
            for r, m in self._merges.values():
                first[m] = min(r, first.get(m, r))
            md["tokenizer.ggml.scores"] = GGUFValue(
                T_FLOAT32, [-1.0 - first[i] if i in first else 0.0 for i in range(self.vocab_size)], array=True)
            md["tokenizer.ggml.add_space_prefix"] = True
        for key, v in (("bos", self.bos_id), ("eos", self.eos_id), ("unknown", self.unk_id)):
            if v is not None:
                md[f"tokenizer.ggml.{key}_token_id"] = GGUFValue(T_UINT32, v)
        if isinstance(self.chat_template, str):
            md["tokenizer.chat_template"] = self.chat_template
        return md

    # ------------------------------------------------------------------ pieces (bridges between vocabularies)
    def encode_pieces(self, text: str, allow_special: bool = False, first: bool = True) -> list[tuple]:
        """`text` cut where this tokenizer's BPE never merges across, each piece with its ids:
        [(start, end, ids)] in character offsets, covering the text in order. An added token is a piece of its own.
        Cuts: byte-level -> the pre-tokenizer's pieces; SentencePiece-style -> words, each starting at a space that
        follows another character (exact when no token holds '▁' after another character, checked at load;
        else one piece per segment). No normalisation: the pieces keep the text's own characters (equal to encode()
        for tokenizers without a normalizer). `first`: the text starts a segment (SentencePiece prepends '▁'
        to every segment); False for text that continues a segment at one of these cuts."""
        if not isinstance(text, str):
            raise TypeError(f"encode_pieces expects str, got {type(text).__name__}")
        out = []
        pos = 0
        seg_first = first
        for seg, tid in self._split_added(text, allow_special):
            if tid is not None:
                n = len(self._added_ids[tid])
                out.append((pos, pos + n, (tid,)))
                pos += n
                seg_first = True
                continue
            if self.kind == "spm":
                self._spm_pieces(seg, pos, seg_first, out)
            else:
                bc = self._byte_char
                for piece in self.pre_tokenize(seg):
                    try:
                        raw = piece.encode("utf-8")
                    except UnicodeEncodeError as e:
                        raise TokenizerError(f"text contains a lone surrogate at {pos + e.start}: cannot be "
                                         "tokenized") from None
                    out.append((pos, pos + len(piece), self._bpe_word("".join([bc[b] for b in raw]))))
                    pos += len(piece)
                seg_first = False
                continue
            pos += len(seg)
            seg_first = False
        return out

    def _spm_pieces(self, seg, pos, first, out):
        off = 1 if first else 0
        w = ("\u2581" if first else "") + seg.replace(" ", "\u2581")
        cuts = [0]
        if self._spm_word_cuts:
            cuts += [i for i in range(1, len(w)) if w[i] == "\u2581" and w[i - 1] != "\u2581"]
        cuts.append(len(w))
        for a, b in zip(cuts, cuts[1:]):
            out.append((pos + max(0, a - off), pos + b - off, self._bpe_word(w[a:b])))

    # ------------------------------------------------------------------ encode
    def encode(self, text: str, allow_special: bool = True, add_bos: bool = False) -> list[int]:
        """Token ids of `text`. With allow_special, special tokens written in the text become their ids;
        without, they are tokenized as plain text (non-special added tokens still match)."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        out = []
        if add_bos:
            if self.bos_id is None:
                raise TokenizerError("this tokenizer has no BOS token")
            out.append(self.bos_id)
        out.extend(self.encode_parts([(text, allow_special)]))
        return out

    def encode_parts(self, parts) -> list[int]:
        """Encode (text, allow_special) pieces as ONE text: pre-tokenizer and BPE see across piece boundaries, but
        special tokens are recognised only inside pieces that allow them (chat markup yes, user content no)."""
        out = []
        pending = []
        for text, allow in parts:
            if not isinstance(text, str):
                raise TypeError(f"encode expects str, got {type(text).__name__}")
            for seg, tid in self._split_added(text, allow):
                if tid is None:
                    pending.append(seg)
                    continue
                if pending:
                    self._encode_segment("".join(pending), out)
                    pending = []
                out.append(tid)
        if pending:
            self._encode_segment("".join(pending), out)
        return out

    def _split_added(self, text, allow_special):
        """Yield (segment, None) for plain text and ('', id) for added tokens; leftmost, then longest match."""
        first = self._added_first
        if not first:
            yield text, None
            return
        added = self._added
        start = 0
        i = 0
        n = len(text)
        while i < n:
            cands = first.get(text[i])
            if cands is not None:
                hit = None
                for c in cands:  # longest first
                    if text.startswith(c, i):
                        tid, special = added[c]
                        if special and not allow_special:
                            continue
                        hit = c
                        break
                if hit is not None:
                    if start < i:
                        yield text[start:i], None
                    yield "", added[hit][0]
                    i += len(hit)
                    start = i
                    continue
            i += 1
        if start < n:
            yield text[start:], None

    def _encode_segment(self, seg, out):
        if self.kind == "spm":
            word = "\u2581" + seg.replace(" ", "\u2581")
            out.extend(self._bpe_word(word))
            return
        if self.normalizer == "nfc":
            seg = unicodedata.normalize("NFC", seg)
        bc = self._byte_char
        for piece in self.pre_tokenize(seg):
            try:
                raw = piece.encode("utf-8")
            except UnicodeEncodeError as e:
                raise TokenizerError(f"text contains a lone surrogate at {e.start}: cannot be tokenized") from None
            out.extend(self._bpe_word("".join([bc[b] for b in raw])))

    def _bpe_word(self, word):
        cache = self._word_cache
        ids = cache.get(word)
        if ids is not None:
            return ids
        ids = self._bpe_merge(word)
        if len(cache) >= _WORD_CACHE_MAX:  # drop the oldest half (insertion order)
            for k in list(cache)[: _WORD_CACHE_MAX // 2]:
                del cache[k]
        cache[word] = ids
        return ids

    def _bpe_merge(self, word):
        vocab = self._vocab
        if self.ignore_merges:
            whole = vocab.get(word)
            if whole is not None:
                return (whole,)
        syms = []  # (n_symbols,) token ids
        if self.kind == "bytelevel":
            for ch in word:
                tid = vocab.get(ch)
                if tid is not None:
                    syms.append(tid)
        else:
            fb = self._byte_fallback
            for ch in word:
                tid = vocab.get(ch)
                if tid is not None:
                    syms.append(tid)
                    continue
                bs = ch.encode("utf-8")
                if all(fb[b] is not None for b in bs):
                    syms.extend(fb[b] for b in bs)
                elif self.unk_id is not None:
                    if not (self.fuse_unk and syms and syms[-1] == self.unk_id):
                        syms.append(self.unk_id)
                else:
                    raise TokenizerError(f"character {ch!r} has no token and no byte fallback")
        n = len(syms)
        if n < 2:
            return tuple(syms)
        merges = self._merges
        if n <= 6:  # short words: plain rescans beat the heap
            while True:
                best = None
                best_rank = None
                for k in range(len(syms) - 1):
                    m = merges.get((syms[k], syms[k + 1]))
                    if m is not None and (best_rank is None or m[0] < best_rank):
                        best_rank = m[0]
                        best = k
                if best is None:
                    return tuple(syms)
                syms[best:best + 2] = [merges[(syms[best], syms[best + 1])][1]]
                if len(syms) == 1:
                    return tuple(syms)
        # Linked list + heap keyed (rank, position): lowest rank first, leftmost among equals.
        nxt = list(range(1, n + 1))  # (n,) next live symbol, n = none
        prv = list(range(-1, n - 1))  # (n,) previous live symbol, -1 = none
        heap = []
        for k in range(n - 1):
            m = merges.get((syms[k], syms[k + 1]))
            if m is not None:
                heap.append((m[0], k, syms[k], syms[k + 1]))
        heapq.heapify(heap)
        alive = [True] * n  # (n,)
        while heap:
            rank, k, a, b = heapq.heappop(heap)
            if not alive[k]:
                continue
            j = nxt[k]
            if j >= n or syms[k] != a or syms[j] != b:
                continue  # stale entry
            merged = merges[(a, b)][1]
            syms[k] = merged
            alive[j] = False
            nj = nxt[j]
            nxt[k] = nj
            if nj < n:
                prv[nj] = k
                m = merges.get((merged, syms[nj]))
                if m is not None:
                    heapq.heappush(heap, (m[0], k, merged, syms[nj]))
            p = prv[k]
            if p >= 0:
                m = merges.get((syms[p], merged))
                if m is not None:
                    heapq.heappush(heap, (m[0], p, syms[p], merged))
        out = []
        k = 0
        while k < n:
            out.append(syms[k])
            k = nxt[k]
        return tuple(out)

    # ------------------------------------------------------------------ pre-tokenizers
    def _classes(self, text):
        cat = self._cat
        out = []  # (len(text),) class per char
        app = out.append
        for ch in text:
            c = cat.get(ch)
            if c is None:
                g = unicodedata.category(ch)[0]
                if g == "L":
                    c = _L
                elif g == "N":
                    c = _N
                elif ch in _WHITE_SPACE:
                    c = _S
                else:
                    c = _O
                if len(cat) < 1 << 20:
                    cat[ch] = c
            app(c)
        return out

    def pre_tokenize(self, text: str) -> list[str]:
        """Split `text` (no special tokens in it) into pre-tokens, as the configured regex would."""
        if not text:
            return []
        cls = self._classes(text)
        if self.pre == "gpt2":
            return _scan_gpt2(text, cls, 0, len(text), [])
        if self.pre == "smollm":
            out = []
            start = 0
            for i, c in enumerate(cls):
                if c == _N:
                    if start < i:
                        _scan_gpt2(text, cls, start, i, out)
                    out.append(text[i])
                    start = i + 1
            if start < len(text):
                _scan_gpt2(text, cls, start, len(text), out)
            return out
        return _scan_llama3(text, cls, 3 if self.pre == "llama3" else 1)

    # ------------------------------------------------------------------ decode
    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of `ids`; invalid UTF-8 becomes U+FFFD. Special tokens appear as their text unless skip_special."""
        data = b"".join(self.token_bytes(int(i)) for i in ids
                        if not (skip_special and int(i) in self.special_ids))
        text = data.decode("utf-8", errors="replace")
        if self.kind == "spm" and text.startswith(" "):
            text = text[1:]
        return text

    def stream(self, skip_special: bool = False) -> "StreamDecoder":
        """Incremental detokenizer: push ids one by one; concatenated output == decode(all ids)."""
        return StreamDecoder(self, skip_special)


class StreamDecoder:
    """Turns token ids into text pieces, holding back bytes of an unfinished UTF-8 character."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self._tok = tokenizer
        self._skip = skip_special
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._strip_space = tokenizer.kind == "spm"  # SentencePiece decoders drop one leading space

    def push(self, tid: int) -> str:
        tid = int(tid)
        if self._skip and tid in self._tok.special_ids:
            return ""
        return self._emit(self._dec.decode(self._tok.token_bytes(tid)))

    def flush(self) -> str:
        """Text still held back (an incomplete character at the end becomes U+FFFD)."""
        out = self._emit(self._dec.decode(b"", final=True))
        self._dec.reset()
        return out

    def _emit(self, s):
        if self._strip_space and s:
            self._strip_space = False
            if s[0] == " ":
                s = s[1:]
        return s


# ---------------------------------------------------------------------- scanners (pure functions)
def _scan_gpt2(s, cls, i, n, out):
    """'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+ over s[i:n]."""
    while i < n:
        ch = s[i]
        if ch == "'" and i + 1 < n:
            c1 = s[i + 1]
            if c1 in "stmd":
                out.append(s[i:i + 2])
                i += 2
                continue
            if i + 2 < n and s[i + 1:i + 3] in ("re", "ve", "ll"):
                out.append(s[i:i + 3])
                i += 3
                continue
        k = cls[i]
        j = i
        if ch == " " and i + 1 < n and cls[i + 1] != _S:
            j = i + 1
            k = cls[j]
        if k != _S:  # L, N or O run, with an optional leading space
            j += 1
            while j < n and cls[j] == k:
                j += 1
            out.append(s[i:j])
            i = j
            continue
        j = i + 1
        while j < n and cls[j] == _S:
            j += 1
        if j < n and j - i > 1:
            j -= 1  # \s+(?!\S): leave the last space to the next token
        out.append(s[i:j])
        i = j
    return out


_CONTRACTION_FOLD = {"S": "s", "\u017f": "s", "T": "t", "M": "m", "D": "d", "R": "r", "E": "e", "V": "v", "L": "l"}


def _scan_llama3(s, cls, max_digits):
    """(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,max_digits}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|
    \\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"""
    out = []
    n = len(s)
    fold = _CONTRACTION_FOLD
    i = 0
    while i < n:
        ch = s[i]
        k = cls[i]
        if ch == "'" and i + 1 < n:
            c1 = s[i + 1]
            c1 = fold.get(c1, c1)
            if c1 in "stmd":
                out.append(s[i:i + 2])
                i += 2
                continue
            if i + 2 < n:
                c2 = s[i + 2]
                c2 = fold.get(c2, c2)
                if c1 + c2 in ("re", "ve", "ll"):
                    out.append(s[i:i + 3])
                    i += 3
                    continue
        if k == _L or (k != _N and ch != "\r" and ch != "\n" and i + 1 < n and cls[i + 1] == _L):
            j = i + 1
            while j < n and cls[j] == _L:
                j += 1
            out.append(s[i:j])
            i = j
            continue
        if k == _N:
            j = i + 1
            while j < n and j - i < max_digits and cls[j] == _N:
                j += 1
            out.append(s[i:j])
            i = j
            continue
        j = i + 1 if (ch == " " and i + 1 < n and cls[i + 1] == _O) else i
        if cls[j] == _O:
            j += 1
            while j < n and cls[j] == _O:
                j += 1
            while j < n and (s[j] == "\r" or s[j] == "\n"):
                j += 1
            out.append(s[i:j])
            i = j
            continue
        # whitespace at i
        j = i + 1
        last_nl = i if (ch == "\r" or ch == "\n") else -1
        while j < n and cls[j] == _S:
            if s[j] == "\r" or s[j] == "\n":
                last_nl = j
            j += 1
        if last_nl >= 0:
            j = last_nl + 1  # \s*[\r\n]+
        elif j < n and j - i > 1:
            j -= 1  # \s+(?!\S)
        out.append(s[i:j])
        i = j
    return out


def _is_spm_normalizer(norm):
    if not isinstance(norm, dict) or norm.get("type") != "Sequence":
        return False
    parts = norm.get("normalizers") or []
    kinds = [(p.get("type"), p.get("prepend"), (p.get("pattern") or {}).get("String"), p.get("content"))
             for p in parts]
    return kinds == [("Prepend", "\u2581", None, None), ("Replace", None, " ", "\u2581")]


_LLAMA3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_QWEN2_RE = _LLAMA3_RE.replace("\\p{N}{1,3}", "\\p{N}")
_GPT2_RE = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"


def _pre_from_json(pt):
    """Map a tokenizer.json pre_tokenizer to one of the scanners, or refuse it by name."""
    if pt is None:
        raise TokenizerUnsupported("byte-level BPE without a pre-tokenizer is not supported")
    t = pt.get("type")
    if t == "ByteLevel":
        if pt.get("add_prefix_space"):
            raise TokenizerUnsupported("ByteLevel add_prefix_space=true is not supported")
        if pt.get("use_regex", True):
            return "gpt2"
        raise TokenizerUnsupported("ByteLevel pre-tokenizer without a split regex is not supported")
    if t != "Sequence":
        raise TokenizerUnsupported(f"pre-tokenizer {t!r} is not supported")
    parts = pt.get("pretokenizers") or []
    types = [p.get("type") for p in parts]
    if types == ["Digits", "ByteLevel"] and parts[0].get("individual_digits") and parts[1].get("use_regex", True) \
            and not parts[1].get("add_prefix_space"):
        return "smollm"
    if types == ["Split", "ByteLevel"] and not parts[1].get("use_regex", True) \
            and not parts[1].get("add_prefix_space"):
        sp = parts[0]
        pat = (sp.get("pattern") or {}).get("Regex")
        if sp.get("behavior") == "Isolated" and not sp.get("invert"):
            if pat == _LLAMA3_RE:
                return "llama3"
            if pat == _QWEN2_RE:
                return "qwen2"
            if pat == _GPT2_RE:
                return "gpt2"
        raise TokenizerUnsupported(f"Split pre-tokenizer pattern {pat!r} is not supported")
    raise TokenizerUnsupported(f"pre-tokenizer sequence {types} is not supported")


# ---------------------------------------------------------------------- GGUF metadata
def gguf_tokenizer_args(meta: dict) -> dict:
    """The Tokenizer constructor's arguments from GGUF tokenizer.ggml.* metadata, every field checked
    (TokenizerError / TokenizerUnsupported): the cheap half of from_gguf_metadata (no tables built), which an import
    runs to refuse a file whose tokenizer cannot work."""
    return Tokenizer._gguf_args(meta)


def _gguf_metadata(path):
    """Metadata key/values of a GGUF file, read by exactspec.formats (the one GGUF parser)."""
    from .formats import FormatError, GGUFFile

    try:
        return GGUFFile(path).metadata
    except FormatError as e:
        raise TokenizerError(f"cannot read the tokenizer from {os.fspath(path)!r}: {e}") from e
