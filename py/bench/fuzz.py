"""Fuzz the model readers and the tokenizer with hostile files (issue 12): Hypothesis draws structure-aware mutations
of the micro-model's GGUF file, Hugging Face folder and tokenizer.json (py/bench/_hostile.py), and each case runs
what the product runs on a file — the import check (Session.inspect), the load (session.load_model_files: config,
tensors, tokenizer, weights) and a forward pass, tokenizer encode / decode / stream on hostile text.

A case may only succeed or raise the project's own clear errors (exactspec.formats.FormatError,
exactspec.tokenizer.TokenizerError); anything else (IndexError, struct.error, MemoryError, RecursionError, ...) is
an unexpected exception, a case running past --timeout-s a hang, and every case's time and peak traced memory are
measured. The address space is capped (--mem-limit-mb above what the process already maps) so an unbounded
allocation fails loudly instead of swapping.

    python build.py bench fuzz                               # 100,000 cases (60k GGUF, 25k HF, 15k tokenizer)
    python build.py bench fuzz --cases 3000 --seed 7 --json out.json
    python build.py bench fuzz --targets gguf --cases 500
tests/test_fuzz.py runs a short seeded slice of the same cases.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import struct
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from hypothesis import HealthCheck, Phase, given, seed as hseed, settings, strategies as st  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench import _hostile as H  # noqa: E402
from exactspec.formats import FormatError  # noqa: E402
from exactspec.formats.gguf import T_ARRAY, T_BOOL, T_FLOAT32, T_FLOAT64, T_INT32, T_STRING, T_UINT32, T_UINT64  # noqa: E402,E501
from exactspec.tokenizer import TokenizerError  # noqa: E402

EXPECTED = (FormatError, TokenizerError)
TARGETS = ("gguf", "hf", "tokenizer")
DEFAULT_SPLIT = {"gguf": 0.60, "hf": 0.25, "tokenizer": 0.15}


class CaseTimeout(BaseException):
    """A case ran past its time limit (BaseException: no `except Exception` in the code under test swallows it)."""


# ---- values a hostile file puts in fields ------------------------------------------------------------------------------
BIG_INTS = [0, 1, 2, 3, 7, 31, 32, 33, 255, 256, 65535, 65536, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32,
            2 ** 40, 2 ** 53, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, -1, -2 ** 31]
FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-45, 1e-38, 1e38, 3.5e38, 1e300, math.inf, -math.inf, math.nan, 1e-5, 1e5, 0.5]
ints = st.one_of(st.sampled_from(BIG_INTS), st.integers(-2 ** 63, 2 ** 64 - 1), st.integers(-4, 600))
floats = st.one_of(st.sampled_from(FLOATS), st.floats(allow_nan=True, allow_infinity=True))
texts = st.one_of(st.text(max_size=40), st.sampled_from(["", "llama", "gpt2", "bert", "smollm", "\udc80\udcff",
                                                            "x" * 5000, "<|im_start|>", "Ġ t", "a b c", "\x00"]))


@dataclass
class Stats:
    target: str
    cases: int = 0
    ok: int = 0
    refused: dict = field(default_factory=dict)      # error type -> count
    unexpected: list = field(default_factory=list)   # (error, case description)
    hangs: int = 0
    worst_s: float = 0.0
    worst_bytes: int = 0
    total_s: float = 0.0
    worst_s_case: tuple = ()         # (case description, outcome) of the slowest case / the largest traced peak
    worst_bytes_case: tuple = ()

    def record(self, outcome: str, dt: float, peak: int, detail=None, desc=None):
        self.cases += 1
        self.total_s += dt
        if dt > self.worst_s:
            self.worst_s, self.worst_s_case = dt, (desc, outcome)
        if peak > self.worst_bytes:
            self.worst_bytes, self.worst_bytes_case = peak, (desc, outcome)
        if outcome == "ok":
            self.ok += 1
        elif outcome == "hang":
            self.hangs += 1
            self.unexpected.append(("hang", detail))
        elif outcome.startswith("refused:"):
            k = outcome[len("refused:"):]
            self.refused[k] = self.refused.get(k, 0) + 1
        else:
            self.unexpected.append((outcome, detail))

    def to_json(self) -> dict:
        return {"target": self.target, "cases": self.cases, "ok": self.ok, "refused": self.refused,
                "unexpected": len(self.unexpected), "hangs": self.hangs, "worst_case_s": round(self.worst_s, 4),
                "mean_case_ms": round(1000 * self.total_s / max(1, self.cases), 3),
                "worst_case_peak_bytes": self.worst_bytes,
                "slowest_case": [str(x)[:400] for x in self.worst_s_case],
                "largest_case": [str(x)[:400] for x in self.worst_bytes_case],
                "unexpected_samples": [{"error": e, "case": d} for e, d in self.unexpected[:20]]}


# ---- what the product does with a file -----------------------------------------------------------------------------------
TEXTS = ["Hello, world! 123 <|im_start|>user\nhi<|im_end|>", "ééé 😀 \u0301\u200d   \n\t  x"]


def _exercise_tokenizer(tok, extra_text: str | None = None):
    for t in TEXTS + ([extra_text] if extra_text is not None else []):
        ids = tok.encode(t)
        tok.decode(ids)
        st_ = tok.stream(skip_special=True)
        "".join(st_.push(i) for i in ids) + st_.flush()
    n = min(tok.vocab_size, 512)
    tok.decode(list(range(n)))


def exercise_model(path: str, text: str | None = None):
    """The import check, the load, a forward pass and the tokenizer: what a stored model goes through."""
    from exactspec.session import Session, load_model_files
    s = Session()
    s.inspect(path)                         # (the page's import check; the parse is kept for the load)
    be, tok, _template, cfg, _summary = load_model_files(path, gguf=s._gguf(path))
    be.forward([1, 2, 3][: max(1, min(3, cfg.seq_len - 1))], 0)
    if tok is not None:
        _exercise_tokenizer(tok, text)


def exercise_tokenizer_json(folder: str, text: str | None):
    from exactspec.tokenizer import Tokenizer
    tok = Tokenizer.from_tokenizer_json(os.path.join(folder, "tokenizer.json"))
    _exercise_tokenizer(tok, text)


def exercise_tokenizer_meta(meta: dict, text: str | None):
    from exactspec.tokenizer import Tokenizer
    _exercise_tokenizer(Tokenizer.from_gguf_metadata(meta), text)


# ---- mutations ---------------------------------------------------------------------------------------------------------
def _memo(fn):
    """Memoise an unmutated base (building and quantising weights is most of a case's cost otherwise); `copy` gives
    each case its own copy to mutate. (The fuzzer's own cache: the code under test keeps none.)"""
    import functools
    return functools.lru_cache(maxsize=64)(fn)


@_memo
def _gguf_base(ttype, n_layers, tied, seed_):
    parts = H.micro_parts(H.fuzz_config(n_layers=n_layers, tied_embeddings=tied), seed_, tensor_type=ttype)
    for kv in parts.kvs:            # encoded once; a mutation that changes a value clears its raw bytes
        kv.raw = H._value(kv.vtype, kv.value, kv.etype, kv.count)
    return parts


def _base_gguf(ttype, n_layers, tied, seed_):
    """A copy a case may mutate: KVs and tensor infos copied one level (mutations replace values, never edit a
    shared list in place), the data section copied."""
    import copy
    b = _gguf_base(ttype, n_layers, tied, seed_)
    return H.GGUFParts(kvs=[copy.copy(k) for k in b.kvs],
                       infos=[H.TInfo(t.name, list(t.dims), t.tid, t.rel) for t in b.infos],
                       data=bytearray(b.data), version=b.version, magic=b.magic, alignment=b.alignment)


@_memo
def _hf_base(n_layers, tied, dtype, seed_):
    return H.micro_hf(H.fuzz_config(n_layers=n_layers, tied_embeddings=tied), seed_, dtype)


def _base_hf(n_layers, tied, dtype, seed_):
    return dict(_hf_base(n_layers, tied, dtype, seed_))      # (file contents are bytes: replaced, never edited)


@_memo
def _tokjson_base():
    return json.dumps(H.micro_tokenizer_json(300))


def _base_tokjson():
    return tuple(json.loads(_tokjson_base()))


def _gguf_case(draw):
    """(GGUF bytes, description) drawn from the micro-model's parts and a list of mutations."""
    ttype = _choice(draw, ["F32", "F16", "Q8_0", "Q4_0", "Q4_1"])
    n_layers = _choice(draw, [1, 1, 2])
    tied = draw(st.booleans())
    parts = _base_gguf(ttype, n_layers, tied, _int(draw, 0, 3))
    ops = draw(st.lists(st.sampled_from(GGUF_OPS), min_size=0, max_size=4))
    desc = [f"base {ttype} layers={n_layers} tied={tied}"]
    cut = None
    for op in ops:
        d = _apply(op, draw, parts)
        if isinstance(d, tuple) and d[0] == "truncate":
            cut = d[1]
            d = f"truncate {cut:.3f}"
        desc.append(d)
    blob = parts.to_bytes()
    if cut is not None:
        blob = blob[: int(len(blob) * cut)]
    if _int(draw, 0, 9) == 0:        # raw byte flips anywhere
        b = bytearray(blob)
        for _ in range(_int(draw, 1, 8)):
            if b:
                b[_int(draw, 0, len(b) - 1)] = _int(draw, 0, 255)
        blob = bytes(b)
        desc.append("byte flips")
    return blob, desc


def _apply(op, draw, *target):
    """One mutation; a mutation that does not fit what earlier ones left (the fuzzer's own crafting, not the code
    under test) is skipped."""
    try:
        return op(draw, *target)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, struct.error, OverflowError):
        return f"{op.__name__} skipped"


_U32 = st.integers(0, 2 ** 32 - 1)


def _int(draw, lo: int, hi: int) -> int:
    """An integer in [lo, hi] from one shared strategy (a strategy built per call costs Hypothesis more than the draw;
    the boundary values that matter come from the module's lists)."""
    if hi <= lo:
        return lo
    span = hi - lo + 1
    if span > 2 ** 32:
        return lo + (draw(_U32) << 32 | draw(_U32)) % span
    return lo + draw(_U32) % span


def _choice(draw, seq):
    seq = list(seq)
    return seq[_int(draw, 0, len(seq) - 1)]


def _pick(draw, seq):
    return seq[_int(draw, 0, len(seq) - 1)] if seq else None


def op_kv_value(draw, p):
    kv = _pick(draw, p.kvs)
    if kv is None:
        return "no kv"
    choice = _int(draw, 0, 4)
    if choice == 0:
        kv.vtype, kv.value, kv.etype, kv.raw = T_UINT32, draw(ints), None, None
    elif choice == 1:
        kv.vtype, kv.value, kv.etype, kv.raw = _choice(draw, [T_FLOAT32, T_FLOAT64]), draw(floats), None, None
    elif choice == 2:
        kv.vtype, kv.value, kv.etype, kv.raw = T_STRING, draw(texts), None, None
    elif choice == 3:
        kv.vtype, kv.raw = _int(draw, 0, 15), None
        if kv.vtype == T_ARRAY:
            kv.etype = _int(draw, 0, 13)
            kv.value = [] if kv.etype not in (T_UINT32, T_STRING, T_FLOAT32) else \
                draw(st.lists(st.sampled_from([0, 1, 2]) if kv.etype != T_STRING else texts, max_size=5))
        elif kv.vtype == T_STRING:
            kv.value = str(kv.value)[:20]
        elif kv.vtype in (T_FLOAT32, T_FLOAT64):
            kv.value = draw(floats)
        else:
            kv.value = draw(ints)
    else:
        kv.vtype, kv.value, kv.etype, kv.raw = T_BOOL, _int(draw, 0, 255), None, None
    return f"kv {kv.key} -> type {kv.vtype}"


def op_kv_array(draw, p):
    arrays = [k for k in p.kvs if k.vtype == T_ARRAY]
    kv = _pick(draw, arrays)
    if kv is None:
        return "no array"
    kv.raw = None
    choice = _int(draw, 0, 5)
    if choice == 0:
        kv.count = draw(ints) % (2 ** 64)
        return f"array {kv.key} count lie {kv.count}"
    if choice == 1:
        kv.etype = _int(draw, 0, 14)
        if kv.etype == T_ARRAY:
            kv.value = []
        return f"array {kv.key} etype {kv.etype}"
    if choice == 2 and kv.value:
        i = _int(draw, 0, len(kv.value) - 1)
        kv.value = list(kv.value)
        if kv.etype == T_STRING:
            kv.value[i] = draw(texts)
        else:
            kv.value[i] = draw(ints) if kv.etype != T_FLOAT32 else draw(floats)
        return f"array {kv.key}[{i}] changed"
    if choice == 3 and kv.value:
        n = _int(draw, 0, len(kv.value))
        kv.value = list(kv.value)[:n]
        return f"array {kv.key} cut to {n}"
    if choice == 4:
        kv.value = list(kv.value) + list(kv.value)[: _int(draw, 0, 50)]
        return f"array {kv.key} grown"
    depth = _int(draw, 1, 6)
    inner = H.KV("", T_ARRAY, [], etype=T_UINT32)
    for _ in range(depth):
        inner = H.KV("", T_ARRAY, [inner] * _int(draw, 0, 3), etype=T_ARRAY)
    kv.vtype, kv.etype, kv.value, kv.raw = T_ARRAY, T_ARRAY, inner.value, None
    return f"array {kv.key} nested {depth}"


def op_kv_struct(draw, p):
    choice = _int(draw, 0, 4)
    if choice == 0 and p.kvs:
        k = p.kvs.pop(_int(draw, 0, len(p.kvs) - 1))
        return f"remove kv {k.key}"
    if choice == 1 and p.kvs:
        k = _pick(draw, p.kvs)
        p.kvs.append(H.KV(k.key, k.vtype, k.value, k.etype, k.count, k.raw))
        return f"duplicate kv {k.key}"
    if choice == 2:
        n = _choice(draw, [10, 1000, 3_000_000, 2 ** 40])
        body = b"\x00" * (4 * min(n, 3_000_000))
        p.kvs.append(H.KV("junk", T_ARRAY, [], raw=struct.pack("<IQ", T_UINT32, n) + body))
        return f"junk array {n}"
    if choice == 3:
        p.n_kv = draw(ints) % (2 ** 64)
        return f"n_kv lie {p.n_kv}"
    p.kvs.append(H.KV("general.alignment", T_UINT32, _choice(draw, [0, 1, 3, 8, 64, 2 ** 20, 2 ** 21, 2 ** 31])))
    return "alignment"


def op_tensor(draw, p):
    t = _pick(draw, p.infos)
    if t is None:
        return "no tensors"
    choice = _int(draw, 0, 7)
    if choice == 0 and t.dims:
        i = _int(draw, 0, len(t.dims) - 1)
        t.dims[i] = draw(ints) % (2 ** 64)
        return f"tensor {t.name} dim[{i}] {t.dims[i]}"
    if choice == 1:
        t.tid = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 8, 12, 30]), st.integers(0, 2 ** 32 - 1)))
        return f"tensor {t.name} type {t.tid}"
    if choice == 2:
        other = _pick(draw, p.infos)
        t.rel = _choice(draw, [0, other.rel, other.rel + 32, len(p.data), len(p.data) + 32, 2 ** 63, 4, 1])
        return f"tensor {t.name} offset {t.rel}"
    if choice == 3:
        t.name = _choice(draw, [x.name for x in p.infos] + ["blk.0.attn_q.bias", "rope_freqs.weight",
                                                                     "blk.7.attn_q.weight", "output.weight", "", "x"])
        return f"tensor renamed {t.name}"
    if choice == 4:
        p.infos.remove(t)
        return f"tensor removed {t.name}"
    if choice == 5:
        p.n_dims[p.infos.index(t)] = _int(draw, 0, 8)
        return f"tensor {t.name} n_dims lie"
    if choice == 6:
        p.n_tensors = draw(ints) % (2 ** 64)
        return f"n_tensors lie {p.n_tensors}"
    t.dims = list(reversed(t.dims))
    return f"tensor {t.name} dims reversed"


def op_data(draw, p):
    t = _pick(draw, p.infos)
    if t is None or not p.data:
        return "no data"
    pat = _choice(draw, [struct.pack("<f", math.nan), struct.pack("<f", math.inf), b"\x00\x7c", b"\x00\xfc",
                                b"\xff\xff", b"\x00\x00\x80\x7f", b"\xff" * 8])
    at = min(max(0, t.rel + _int(draw, 0, 64)), max(0, len(p.data) - len(pat)))
    p.data[at: at + len(pat)] = pat
    return f"data pattern at {at}"


def op_truncate(draw, p):
    return ("truncate", draw(st.floats(0.0, 1.0)))


def op_header(draw, p):
    choice = _int(draw, 0, 2)
    if choice == 0:
        p.version = _choice(draw, [0, 1, 2, 3, 4, 2 ** 32 - 1])
        return f"version {p.version}"
    if choice == 1:
        p.magic = _choice(draw, [b"GGUF", b"GGML", b"FUGG", b"\x00\x00\x00\x00"])
        return "magic"
    kv = p.kv("tokenizer.ggml.tokens")
    if kv is not None:
        kv.value = list(kv.value)[: _int(draw, 0, len(kv.value))]
        kv.raw = None
    return "tokens cut"


GGUF_OPS = [op_kv_value, op_kv_array, op_kv_struct, op_tensor, op_tensor, op_data, op_truncate, op_header]


def _hf_case(draw):
    n_layers, tied = _choice(draw, [1, 2]), draw(st.booleans())
    cfg = H.fuzz_config(n_layers=n_layers, tied_embeddings=tied)
    dtype = _choice(draw, ["F32", "F16", "BF16"])
    files = _base_hf(n_layers, tied, dtype, _int(draw, 0, 3))
    desc = [f"hf {dtype}"]
    for _ in range(_int(draw, 0, 3)):
        desc.append(_apply(_choice(draw, HF_OPS), draw, files, cfg))
    return files, desc


def hf_config_op(draw, files, cfg):
    c = H.load_json_or(files.get("config.json"), {})
    if not isinstance(c, dict):
        c = {}
    keys = list(H.hf_config(cfg)) + ["partial_rotary_factor", "rope_scaling", "head_dim", "architectures"]
    k = _choice(draw, keys)
    v = draw(st.one_of(ints, floats, texts, st.none(), st.booleans(), st.just([]), st.just({}),
                       st.just({"rope_type": "llama3"}), st.just(["LlamaForCausalLM"])))
    if _int(draw, 0, 5) == 0:
        c.pop(k, None)
    else:
        c[k] = v
    files["config.json"] = json.dumps(c, allow_nan=True).encode()
    return f"config {k}={v!r}"[:200]


def hf_doc_op(draw, files, cfg):
    name = _choice(draw, ["config.json", "tokenizer.json", "tokenizer_config.json"])
    files[name] = _choice(draw, [b"[]", b"null", b"1", b'"x"', H.deep_json(_int(draw, 1, 100_000)),
                                        b"{" * 1000, b"\xff\xfe", b"", b'{"a": ' + b"1" * 5000 + b"}",
                                        files.get(name, b"")[: _int(draw, 0, 200)]])
    return f"{name} document replaced"


def hf_header_op(draw, files, cfg):
    data = files["model.safetensors"]
    if len(data) < 8:
        return "no header"
    (n,) = struct.unpack("<Q", data[:8])
    h = H.load_json_or(data[8:8 + n], None)
    if not isinstance(h, dict):
        return "header unreadable"
    body = data[8 + n:]
    names = [k for k in h if k != "__metadata__" and isinstance(h[k], dict)]
    if not names:
        return "no entries"
    k = _choice(draw, names)
    choice = _int(draw, 0, 6)
    e = h[k]
    if choice == 0:
        e["data_offsets"] = [draw(ints), draw(ints)]
    elif choice == 1:
        other = h[_choice(draw, names)]
        e["data_offsets"] = other.get("data_offsets")
    elif choice == 2:
        e["shape"] = draw(st.lists(ints, max_size=9))
    elif choice == 3:
        e["dtype"] = _choice(draw, ["F32", "F16", "BF16", "I8", "F64", "U8", "", 3])
    elif choice == 4:
        h[_choice(draw, ["model.layers.0.self_attn.q_proj.bias", "lm_head.weight", "model.layers.5.mlp.up_proj.weight",
                                 "x", "__metadata__"])] = dict(e)
    elif choice == 5:
        h.pop(k)
    else:
        h[k] = _choice(draw, [None, [], 1, "x", {"dtype": "F32"}])
    hb = json.dumps(h).encode()
    lie = _choice(draw, [None, None, 0, 1, len(hb) + 1, 2 ** 40, 2 ** 64 - 1])
    files["model.safetensors"] = struct.pack("<Q", len(hb) if lie is None else lie) + hb + body
    return f"header {k} op {choice} lie {lie}"


def hf_shard_op(draw, files, cfg):
    from exactspec.micro import micro_weights
    w = micro_weights(cfg, 5)
    pick = _choice(draw, sorted(w))
    files[f"model-0000{_int(draw, 2, 3)}.safetensors"] = H.safetensors_bytes({H.hf_name(pick): w[pick]})
    return f"extra shard {pick}"


def hf_data_op(draw, files, cfg):
    data = bytearray(files["model.safetensors"])
    if len(data) < 8:
        return "no header"
    (n,) = struct.unpack("<Q", data[:8])
    if len(data) <= 8 + n + 4:
        return "no data"
    at = _int(draw, 8 + n, len(data) - 4)
    data[at: at + 4] = _choice(draw, [struct.pack("<f", math.nan), struct.pack("<f", -math.inf),
                                             b"\x80\x7f\x80\x7f", b"\x00\x7c\x00\x7c"])
    if _int(draw, 0, 3) == 0:
        data = data[: _int(draw, 0, len(data))]
    files["model.safetensors"] = bytes(data)
    return f"data pattern at {at}"


HF_OPS = [hf_config_op, hf_config_op, hf_doc_op, hf_header_op, hf_header_op, hf_shard_op, hf_data_op]


def _tokenizer_case(draw):
    tj, tc = _base_tokjson()
    desc = []
    for _ in range(_int(draw, 0, 4)):
        desc.append(_apply(_choice(draw, TOK_OPS), draw, tj, tc))
    return tj, tc, desc


def tok_model_op(draw, tj, tc):
    m = tj["model"]
    k = _choice(draw, ["type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                              "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"])
    m[k] = draw(st.one_of(texts, ints, floats, st.none(), st.booleans(), st.just([]), st.just({}),
                          st.just("BPE"), st.just("Unigram"), st.just([["a", "b", "c"]]), st.just({"a": -1})))
    return f"model.{k}"


def tok_vocab_op(draw, tj, tc):
    v = tj["model"]["vocab"]
    keys = list(v)
    k = _choice(draw, keys)
    choice = _int(draw, 0, 3)
    if choice == 0:
        v[k] = draw(st.one_of(ints, st.just(None), st.just("3"), st.just(1.5)))
    elif choice == 1:
        del v[k]
    elif choice == 2:
        v[draw(texts)] = _int(draw, 0, 400)
    else:
        v[k] = _choice(draw, [10 ** 6, 10 ** 9, 2 ** 40])
    return f"vocab {k!r} op {choice}"


def tok_merge_op(draw, tj, tc):
    ms = tj["model"]["merges"]
    if not ms:
        return "no merges"
    i = _int(draw, 0, len(ms) - 1)
    ms[i] = draw(st.one_of(texts, st.just(["a"]), st.just(["a", "b", "c"]), st.just([1, 2]), st.just(None),
                           st.just("Ġ t"), st.just("x y")))
    return f"merge {i}"


def tok_added_op(draw, tj, tc):
    a = tj["added_tokens"]
    choice = _int(draw, 0, 3)
    if choice == 0 and a:
        e = a[_int(draw, 0, len(a) - 1)]
        e[_choice(draw, ["id", "content", "special", "lstrip", "rstrip", "single_word"])] = \
            draw(st.one_of(ints, texts, st.booleans(), st.none()))
    elif choice == 1:
        a.append({"id": draw(ints), "content": draw(texts), "special": draw(st.booleans())})
    elif choice == 2:
        tj["added_tokens"] = _choice(draw, [None, [], {}, "x", [1]])
    else:
        tc[_choice(draw, ["bos_token", "eos_token", "chat_template", "add_bos_token"])] = \
            draw(st.one_of(texts, ints, st.none(), st.just({"content": "<|im_end|>"}), st.just([{"name": "x"}])))
    return f"added op {choice}"


def tok_pipeline_op(draw, tj, tc):
    k = _choice(draw, ["normalizer", "pre_tokenizer", "decoder", "post_processor"])
    tj[k] = _choice(draw, [None, {}, [], "x", {"type": "NFC"}, {"type": "NFKC"}, {"type": "Lowercase"},
                                  {"type": "ByteLevel", "add_prefix_space": True},
                                  {"type": "ByteLevel", "use_regex": False}, {"type": "Whitespace"},
                                  {"type": "Sequence", "pretokenizers": None},
                                  {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "("}},
                                                                         {"type": "ByteLevel", "use_regex": False}]},
                                  {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}]}])
    return f"{k} replaced"


TOK_OPS = [tok_model_op, tok_vocab_op, tok_vocab_op, tok_merge_op, tok_added_op, tok_pipeline_op]

# text a person (or a page request) may send: mostly short, sometimes long runs and lone surrogates
hostile_text = st.one_of(st.text(max_size=120), st.text(max_size=120), st.text(max_size=120),
                         st.text(max_size=120), st.text(max_size=120), st.text(max_size=120),
                         st.sampled_from(["\ud800", "\udfff abc", "x" * 20000, " " * 5000, "\x00" * 100,
                                          "🂡" * 500, "1" * 3000, "<|im_start|>" * 200]))


def _tokenizer_meta_case(draw):
    from exactspec.micro import micro_tokenizer
    md = {k: getattr(v, "value", v) for k, v in micro_tokenizer(300).items()}
    k = _choice(draw, sorted(md))
    md[k] = draw(st.one_of(ints, floats, texts, st.none(), st.booleans(), st.just([]), st.just([1, 2]),
                           st.just(["a b"]), st.lists(texts, max_size=4)))
    return md, [f"meta {k}"]


# ---- the run ---------------------------------------------------------------------------------------------------------------
class Runner:
    def __init__(self, workdir: str, timeout_s: float):
        self.workdir = workdir
        self.timeout_s = timeout_s
        self.path = os.path.join(workdir, "case.gguf")
        self.folder = os.path.join(workdir, "hf")

    def run(self, stats: Stats, fn, desc):
        def on_alarm(signum, frame):
            raise CaseTimeout()
        old = signal.signal(signal.SIGALRM, on_alarm)
        tracemalloc.start()              # traced around the code under test only (not Hypothesis' generation)
        t0 = time.perf_counter()
        outcome, detail = "ok", None
        signal.setitimer(signal.ITIMER_REAL, self.timeout_s)
        try:
            fn()
        except CaseTimeout:
            outcome, detail = "hang", desc
        except EXPECTED as e:
            outcome = "refused:" + type(e).__name__
        except BaseException as e:          # noqa: BLE001 — what the fuzzer is for
            if isinstance(e, KeyboardInterrupt):
                raise
            outcome, detail = f"{type(e).__name__}: {str(e)[:300]}", desc
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        dt = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        stats.record(outcome, dt, peak, detail, desc)


def _case_strategy(target: str):
    """One case of `target` as a single Hypothesis strategy (st.composite: its draws are cheap, unlike st.data's)."""
    @st.composite
    def case(draw):
        text = draw(hostile_text)
        if target == "gguf":
            blob, desc = _gguf_case(draw)
            return ("gguf", blob, text), desc
        if target == "hf":
            files, desc = _hf_case(draw)
            return ("hf", files, text), desc
        if _int(draw, 0, 3) == 0:
            md, desc = _tokenizer_meta_case(draw)
            return ("meta", md, text), desc
        tj, tc, desc = _tokenizer_case(draw)
        return ("tokjson", (tj, tc), text), desc
    return case()


def run_target(target: str, cases: int, seed_: int, runner: Runner, progress=None) -> Stats:
    stats = Stats(target)

    @hseed(seed_)
    @settings(max_examples=cases, database=None, deadline=None, phases=[Phase.generate], derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(_case_strategy(target))
    def one(drawn):
        (kind, payload, text), desc = drawn
        if kind == "gguf":
            def fn():
                with open(runner.path, "wb") as f:
                    f.write(payload)
                exercise_model(runner.path, text)
        elif kind == "hf":
            def fn():
                H.write_folder(runner.folder, payload)
                exercise_model(runner.folder, text)
        elif kind == "meta":
            def fn():
                exercise_tokenizer_meta(payload, text)
        else:
            tj, tc = payload

            def fn():
                H.write_folder(runner.folder, {"tokenizer.json": json.dumps(tj, allow_nan=True).encode(),
                                               "tokenizer_config.json": json.dumps(tc, allow_nan=True).encode()})
                exercise_tokenizer_json(runner.folder, text)
        runner.run(stats, fn, desc)
        if progress is not None and stats.cases % 500 == 0:
            progress(stats)

    one()
    return stats


def cap_memory(extra_mb: int) -> int | None:
    """Cap the address space at what is mapped now + extra_mb; returns the cap in bytes (None where unsupported)."""
    try:
        import resource
        with open("/proc/self/statm") as f:
            vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = vm + extra_mb * (1 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
        return cap
    except (OSError, ValueError, ImportError):
        return None


def fuzz(cases: int, seed_: int = 0, targets=TARGETS, timeout_s: float = 10.0, progress=None) -> dict:
    """Run `cases` cases split over `targets` (DEFAULT_SPLIT); returns the figures (JSON-able)."""
    share = {t: DEFAULT_SPLIT[t] for t in targets}
    tot = sum(share.values())
    counts = {t: max(1, int(round(cases * share[t] / tot))) for t in targets}
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    out = {"seed": seed_, "targets": {}}
    t0 = time.perf_counter()
    if tracemalloc.is_tracing():
        raise RuntimeError("fuzz traces each case itself: stop tracemalloc first")
    with tempfile.TemporaryDirectory(prefix="exactspec-fuzz-", dir=base) as d:
        runner = Runner(d, timeout_s)
        for i, t in enumerate(targets):
            out["targets"][t] = run_target(t, counts[t], seed_ * 1000 + i, runner, progress).to_json()
    tt = out["targets"].values()
    out.update(cases=sum(x["cases"] for x in tt), unexpected=sum(x["unexpected"] for x in tt),
               hangs=sum(x["hangs"] for x in tt), worst_case_s=max(x["worst_case_s"] for x in tt),
               worst_case_peak_bytes=max(x["worst_case_peak_bytes"] for x in tt),
               wall_s=round(time.perf_counter() - t0, 1))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python build.py bench fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--timeout-s", type=float, default=10.0, help="a case running longer is a hang")
    ap.add_argument("--mem-limit-mb", type=int, default=2048, help="address space allowed above the start's")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    targets = [t for t in a.targets.split(",") if t]
    bad = [t for t in targets if t not in TARGETS]
    if bad:
        ap.error(f"unknown targets {bad}: choose from {', '.join(TARGETS)}")
    cap = cap_memory(a.mem_limit_mb)

    partial: dict = {}

    def progress(s: Stats):
        print(f"  {s.target}: {s.cases} cases, {len(s.unexpected)} unexpected, worst {s.worst_s * 1000:.0f} ms / "
              f"{s.worst_bytes / 1e6:.1f} MB", flush=True)
        if a.json:                   # the figures so far (a long run can be read while it goes)
            partial[s.target] = s.to_json()
            with open(a.json + ".partial", "w") as f:
                json.dump(partial, f, indent=1)
    res = fuzz(a.cases, a.seed, targets, a.timeout_s, progress)
    res["address_space_cap_bytes"] = cap
    print(json.dumps({k: v for k, v in res.items() if k != "targets"}, indent=1))
    for t, r in res["targets"].items():
        print(f"{t}: {r['cases']} cases, {r['ok']} loaded, refused {r['refused']}, unexpected {r['unexpected']}, "
              f"hangs {r['hangs']}, worst {r['worst_case_s'] * 1000:.1f} ms, mean {r['mean_case_ms']:.2f} ms, "
              f"worst peak {r['worst_case_peak_bytes'] / 1e6:.2f} MB")
        for u in r["unexpected_samples"][:5]:
            print(f"   UNEXPECTED {u['error']}\n      case: {u['case']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if res["unexpected"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
