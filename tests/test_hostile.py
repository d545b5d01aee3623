"""Hostile model files and CLI inputs (issue 12): every defect a hostile-user pass found on main, each refused with
a clear error (FormatError / TokenizerError / exit 2 with a reason) or handled, and nothing else. The files are made
by py/bench/_hostile.py (the fuzzer's own crafting library); the fuzzer itself: tests/test_fuzz.py."""
from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

from bench._hostile import (KV, TInfo, deep_json, fuzz_config, hf_config, hf_name, micro_hf, micro_parts,
                            safetensors_bytes, write_folder)
from exactspec.formats import FormatError, GGUFFile
from exactspec.formats.gguf import MAX_EAGER_ARRAY, MAX_NESTED_ARRAYS, T_ARRAY, T_FLOAT32, T_UINT32, SkippedArray
from exactspec.micro import micro_weights
from exactspec.session import Session, load_model_files
from exactspec.tokenizer import TokenizerError

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _gguf(tmp_path, parts, name="h.gguf"):
    p = tmp_path / name
    p.write_bytes(parts.to_bytes())
    return p


def _refused(path, match):
    with pytest.raises((FormatError, TokenizerError), match=match):
        load_model_files(str(path))
    with pytest.raises((FormatError, TokenizerError), match=match):
        Session().inspect(str(path))          # what the page's import runs: refused before the file is stored


# ---- the tokenizer must fit the model's vocabulary ------------------------------------------------------------------
def test_gguf_tokenizer_smaller_than_the_vocabulary_is_refused(tmp_path):
    """Was: accepted, then `IndexError: token id 44703 outside the vocabulary (300)` mid-answer."""
    cfg = fuzz_config(vocab_size=320)
    parts = micro_parts(cfg, 1, tokenizer=False)
    from bench._hostile import kv_of
    from exactspec.micro import micro_tokenizer
    parts.kvs += [kv_of(k, v) for k, v in micro_tokenizer(300).items()]   # 300 tokens on a 320-row embedding
    p = _gguf(tmp_path, parts)
    _refused(p, "tokenizer has 300 tokens but its model's vocabulary is 320")
    r = _cli("--model", str(p), "--prompt", "hello")
    assert r.returncode == 2 and "300 tokens" in r.stderr and "Traceback" not in r.stderr


def test_hf_tokenizer_smaller_than_the_embedding_is_padding(tmp_path):
    """A Hugging Face folder whose embedding has rows past its tokenizer (real checkpoints pad to a multiple of 64):
    those ids decode to nothing, the answer never fails."""
    cfg = fuzz_config(vocab_size=320)
    files = micro_hf(cfg, 2)
    from bench._hostile import micro_tokenizer_json
    tj, tc = micro_tokenizer_json(300)
    files["tokenizer.json"] = json.dumps(tj).encode()
    write_folder(tmp_path / "hf", files)
    be, tok, _t, c, _s = load_model_files(str(tmp_path / "hf"))
    assert tok.vocab_size == 320 and tok.decode(list(range(290, 320))) == tok.decode(list(range(290, 300)))
    s = Session()
    s.load("m", str(tmp_path / "hf"))
    import asyncio
    out = asyncio.run(s.generate({"prompt_ids": [5, 6, 7], "max_new_tokens": 24, "drafter": "none"}))
    assert out["finish_reason"] in ("length", "eos") and isinstance(out["text"], str)


# ---- metadata arrays: bounded memory and time -----------------------------------------------------------------------
def test_huge_unused_metadata_array_is_skipped_not_materialised(tmp_path):
    """Was: an unused 560-million-element array drove memory past 4 GiB (tolist()). Here 3M UINT32 (12 MB): skipped
    unread, the model loads, and parsing allocates far less than the array."""
    parts = micro_parts(fuzz_config(), 1)
    n = MAX_EAGER_ARRAY + 1_000_000
    parts.kvs.append(KV("junk.array", T_ARRAY, [], etype=T_UINT32, count=n,
                        raw=struct.pack("<IQ", T_UINT32, n) + b"\x01" * (4 * n)))
    p = _gguf(tmp_path, parts)
    tracemalloc.start()
    g = GGUFFile(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert isinstance(g.metadata["junk.array"], SkippedArray) and len(g.metadata["junk.array"]) == n
    assert peak < 4 * n / 4, peak                        # well below the array's 12 MB (let alone a list of 3M ints)
    load_model_files(str(p))                             # the model is fine
    json.dumps(g.describe())                             # and its description stays JSON


def test_millions_of_nested_arrays_refused_fast(tmp_path):
    """Was: 5 million empty nested arrays took 35 s to parse."""
    parts = micro_parts(fuzz_config(), 1)
    n = 5_000_000
    parts.kvs.append(KV("junk.nested", T_ARRAY, [], raw=struct.pack("<IQ", T_ARRAY, n) +
                        struct.pack("<IQ", T_UINT32, 0) * n))
    p = _gguf(tmp_path, parts)
    t0 = time.perf_counter()
    with pytest.raises(FormatError, match="nested arrays"):
        GGUFFile(p)
    assert time.perf_counter() - t0 < 2.0
    assert n > MAX_NESTED_ARRAYS


def test_a_load_parses_the_file_once(tmp_path, monkeypatch):
    """Was: the session parsed a GGUF 3-4 times per load (inspect, template, tokenizer, weights); describe (the GPU
    path), inspect and load of one file now share one parse."""
    p = _gguf(tmp_path, micro_parts(fuzz_config(), 1))
    calls = []
    orig = GGUFFile._parse
    monkeypatch.setattr(GGUFFile, "_parse", lambda self, c: (calls.append(1), orig(self, c))[1])
    s = Session()
    s.inspect(str(p))
    s.describe(str(p))
    s.load("m", str(p))
    assert len(calls) == 1


# ---- tensor layout --------------------------------------------------------------------------------------------------
def test_overlapping_gguf_tensors_refused(tmp_path):
    parts = micro_parts(fuzz_config(), 1)
    parts.info("blk.0.attn_k.weight").rel = parts.info("blk.0.attn_q.weight").rel   # reads q's bytes
    _refused(_gguf(tmp_path, parts), "overlap")


def test_norm_retyped_as_q4_0_refused(tmp_path):
    parts = micro_parts(fuzz_config(), 1)
    parts.info("blk.0.attn_norm.weight").tid = 2                # Q4_0: 32 floats now read as 2 blocks
    _refused(_gguf(tmp_path, parts), "norm stored as Q4_0")


def test_phantom_tensor_refused(tmp_path):
    """An extra tensor the model does not use (here reading the padding after the last tensor)."""
    parts = micro_parts(fuzz_config(), 1)
    end = len(parts.data)
    parts.data += b"\x00" * 64
    parts.infos.append(TInfo("blk.0.attn_q.bias", [16], 0, end))
    _refused(_gguf(tmp_path, parts), "does not use")
    parts = micro_parts(fuzz_config(), 1)
    parts.data += b"\x00" * (300 * 32 * 4)
    parts.infos.append(TInfo("output.weight", [32, 300], 0, len(parts.data) - 300 * 32 * 4))   # untied from zeros?
    GGUFFile(_gguf(tmp_path, parts))       # (a real untied head is allowed: its own bytes, its shape)


def test_block_count_smaller_than_the_layers_refused(tmp_path):
    parts = micro_parts(fuzz_config(n_layers=2), 1)
    parts.kv("llama.block_count").value = 1                     # 2 layers in the file, 1 declared
    _refused(_gguf(tmp_path, parts), "holds layer 1")
    parts = micro_parts(fuzz_config(n_layers=1), 1)
    parts.kv("llama.block_count").value = 2                     # more declared than present
    _refused(_gguf(tmp_path, parts), "lacks tensor|declares 2 layers")


def _hf(tmp_path, files, name="hf"):
    write_folder(tmp_path / name, files)
    return tmp_path / name


def test_overlapping_safetensors_offsets_refused(tmp_path):
    cfg = fuzz_config()
    w = {hf_name(k): v for k, v in micro_weights(cfg, 1).items()}
    data = safetensors_bytes(w)
    (n,) = struct.unpack("<Q", data[:8])
    h = json.loads(data[8:8 + n])
    h["model.layers.0.self_attn.k_proj.weight"]["data_offsets"] = list(
        h["model.layers.0.self_attn.v_proj.weight"]["data_offsets"])
    hb = json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    files = micro_hf(cfg, 1)
    files["model.safetensors"] = struct.pack("<Q", len(hb)) + hb + data[8 + n:]
    _refused(_hf(tmp_path, files), "overlap")


def test_second_shard_redefining_a_tensor_refused(tmp_path):
    cfg = fuzz_config()
    files = micro_hf(cfg, 1)
    other = micro_weights(cfg, 9)
    files["model-00002.safetensors"] = safetensors_bytes({"model.norm.weight": other["output_norm.weight"]})
    _refused(_hf(tmp_path, files), "defined in both")


def test_hf_bias_tensors_refused(tmp_path):
    """A Qwen2-style checkpoint (q/k/v biases) would silently run without its biases: refused."""
    cfg = fuzz_config()
    w = {hf_name(k): v for k, v in micro_weights(cfg, 1).items()}
    w["model.layers.0.self_attn.q_proj.bias"] = np.ones(32, np.float32)
    files = micro_hf(cfg, 1)
    files["model.safetensors"] = safetensors_bytes(w)
    _refused(_hf(tmp_path, files), "q_proj.bias")
    w.pop("model.layers.0.self_attn.q_proj.bias")
    w["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(8, np.float32)    # old checkpoints: harmless
    files["model.safetensors"] = safetensors_bytes(w)
    load_model_files(str(_hf(tmp_path, files, "hf2")))


# ---- config values --------------------------------------------------------------------------------------------------
def test_gguf_rope_theta_inf_and_bad_eps_refused(tmp_path):
    for key, v in (("llama.rope.freq_base", math.inf), ("llama.rope.freq_base", math.nan),
                   ("llama.attention.layer_norm_rms_epsilon", -1e-5), ("llama.rope.freq_base", 1e39)):
        parts = micro_parts(fuzz_config(), 1)
        kv = parts.kv(key)
        kv.vtype, kv.value = T_FLOAT32, v
        _refused(_gguf(tmp_path, parts), "finite")


@pytest.mark.parametrize("field,value,match", [
    ("rope_theta", 0, "rope_theta"), ("rope_theta", -5.0, "rope_theta"), ("rope_theta", "NaN", "rope_theta"),
    ("rope_theta", "1e4", "must be a number"), ("rms_norm_eps", -1e-6, "rms_norm_eps"),
    ("rms_norm_eps", 2.0, "rms_norm_eps"), ("tie_word_embeddings", "false", "true or false"),
    ("hidden_size", None, "hidden_size"), ("num_hidden_layers", 2.5, "num_hidden_layers"),
    ("partial_rotary_factor", 7, "partial_rotary_factor"), ("architectures", "LlamaForCausalLM", "architectures"),
])
def test_hf_config_values_refused(tmp_path, field, value, match):
    cfg = fuzz_config()
    files = micro_hf(cfg, 1)
    c = hf_config(cfg)
    if value == "NaN":
        files["config.json"] = json.dumps(c).replace(f'"{field}": {json.dumps(c[field])}', f'"{field}": NaN').encode()
    else:
        c[field] = value
        files["config.json"] = json.dumps(c).encode()
    _refused(_hf(tmp_path, files), match)


def test_hf_null_numeric_fields_take_the_defaults(tmp_path):
    cfg = fuzz_config()
    files = micro_hf(cfg, 1)
    c = hf_config(cfg)
    c.update(rope_theta=None, rms_norm_eps=None, tie_word_embeddings=None, num_key_value_heads=None)
    c["num_key_value_heads"] = 1
    files["config.json"] = json.dumps(c).encode()
    _be, _tok, _t, got, _s = load_model_files(str(_hf(tmp_path, files)))
    assert got.rope_theta == 10000.0 and got.norm_eps == 1e-5


@pytest.mark.parametrize("doc", [b"[1, 2, 3]", b'"llama"', b"null", deep_json(100_000), b"{" * 50_000,
                                 b'{"hidden_size": ' + b"9" * 5000 + b"}", b"\xff\xfe{}"])
def test_hf_config_json_of_the_wrong_kind_refused(tmp_path, doc):
    files = micro_hf(fuzz_config(), 1)
    files["config.json"] = doc
    _refused(_hf(tmp_path, files), "config.json")


def test_deep_safetensors_header_and_tokenizer_refused(tmp_path):
    files = micro_hf(fuzz_config(), 1)
    deep = deep_json(100_000)
    files["model.safetensors"] = struct.pack("<Q", len(deep)) + deep
    _refused(_hf(tmp_path, files), "nests")
    files = micro_hf(fuzz_config(), 1)
    files["tokenizer.json"] = b'{"model": ' + deep + b"}"
    _refused(_hf(tmp_path, files, "hf2"), "nests")


@pytest.mark.parametrize("mutate,match", [
    (lambda tj: tj["model"].update(type="Unigram"), "Unigram"),
    (lambda tj: tj["model"].update(dropout=0.1), "dropout"),
    (lambda tj: tj.update(normalizer={"type": "Lowercase"}), "Lowercase"),
    (lambda tj: tj.update(pre_tokenizer={"type": "Whitespace"}), "Whitespace"),
    (lambda tj: tj.update(pre_tokenizer=[1, 2]), "tokenizer"),
    # found by the 100,000-case fuzz run (seed 13): an empty vocab with no added tokens was a ValueError from max()
    (lambda tj: (tj["model"].update(vocab={}), tj.update(added_tokens=[])), "no tokens"),
])
def test_unsupported_tokenizer_kinds_are_clear_errors(tmp_path, mutate, match):
    """Was: NotImplementedError tracebacks. Now TokenizerError (a ValueError) at import and load, exit 2 in the CLI."""
    files = micro_hf(fuzz_config(), 1)
    tj = json.loads(files["tokenizer.json"])
    mutate(tj)
    files["tokenizer.json"] = json.dumps(tj).encode()
    folder = _hf(tmp_path, files)
    _refused(folder, match)
    r = _cli("--model", str(folder), "--prompt", "hi")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "error:" in r.stderr


def test_unsupported_gguf_tokenizer_model_is_a_clear_error(tmp_path):
    parts = micro_parts(fuzz_config(), 1)
    parts.kv("tokenizer.ggml.model").value = "bert"
    _refused(_gguf(tmp_path, parts), "bert")


# ---- CLI inputs -----------------------------------------------------------------------------------------------------
def _cli(*args):
    import os
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py"), OPENBLAS_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "exactspec", "generate", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_cli_max_len_shorter_than_the_prompt_says_why(tmp_path):
    """Was: exit 3 with no reason unless --json."""
    p = _gguf(tmp_path, micro_parts(fuzz_config(), 1))
    r = _cli("--model", str(p), "--prompt", "hello there, how are you", "--max-len", "4")
    assert r.returncode == 2 and "--max-len" in r.stderr and "prompt is" in r.stderr
    r = _cli("--model", str(p), "--prompt", "hi", "--max-len", "12", "--max-new-tokens", "50")
    assert r.returncode == 0 and "capped" in r.stderr
    r = _cli("--model", str(p), "--prompt", "hi", "--max-len", "0")
    assert r.returncode == 2 and "--max-len" in r.stderr


def test_seeds_past_2_64_never_alias():
    from exactspec.sampling import Rng
    with pytest.raises(ValueError, match="2\\*\\*64"):
        Rng(2 ** 64)
    with pytest.raises(ValueError):
        Rng(-2 ** 63 - 1)
    with pytest.raises(ValueError):
        Rng(2 ** 70 + 5)
    assert Rng(2 ** 64 - 1).uniform(0, 3) != Rng(0).uniform(0, 3)
    r = _cli("--model", "x.gguf", "--prompt", "hi", "--seed", str(2 ** 64))
    assert r.returncode == 2 and "seed" in r.stderr


def test_draft_vocabulary_compared_on_every_id(tmp_path):
    """Was: the draft/champion vocabulary check sampled every 97th id. One differing token is now a difference."""
    from exactspec.micro import micro_tokenizer
    from exactspec.tokenizer import Tokenizer
    from exactspec.vocab import bridge_pair
    md = {k: getattr(v, "value", v) for k, v in micro_tokenizer(300).items()}    # (GGUFValue -> plain values)
    a = Tokenizer.from_gguf_metadata(md)
    toks = list(md["tokenizer.ggml.tokens"])
    i = len(toks) - 1                                       # 299: an id the old check (0, 97, 194, 291) skipped
    toks[i] = "zzqq"                                        # another string, made by no merge
    b = Tokenizer.from_gguf_metadata({**md, "tokenizer.ggml.tokens": toks,
                                      "tokenizer.ggml.merges": md["tokenizer.ggml.merges"][:-1]})
    assert bridge_pair(a, a).compat.same
    assert not bridge_pair(a, b).compat.same


@pytest.mark.parametrize("ttype", ["F32", "Q8_0", "F16"])
def test_nan_inf_weights_refused_at_import_and_load(tmp_path, ttype):
    """Non-finite weights (a float element, or a quantised block's f16 scale) are refused by the import's check
    (read once, not dequantised) and by the reference's load."""
    from exactspec.reference import ReferenceModel
    parts = micro_parts(fuzz_config(), 1, tensor_type=ttype)
    t = parts.info("blk.0.ffn_up.weight")
    bad = {"F32": struct.pack("<f", math.nan), "Q8_0": b"\x00\x7c", "F16": b"\x00\xfc"}[ttype]   # NaN, f16 +Inf, -Inf
    parts.data[t.rel: t.rel + len(bad)] = bad
    p = _gguf(tmp_path, parts)
    _refused(p, "non-finite")
    with pytest.raises(FormatError, match="non-finite"):
        ReferenceModel.from_file(str(p))


def test_gguf_tokenizer_fields_of_the_wrong_type_are_refused(tmp_path):
    """Found by the fuzzer: tokenizer.ggml.pre stored as an array raised TypeError (unhashable list)."""
    parts = micro_parts(fuzz_config(), 1)
    kv = parts.kv("tokenizer.ggml.pre")
    kv.vtype, kv.etype, kv.value = T_ARRAY, 8, ["smollm"]     # an array of strings
    _refused(_gguf(tmp_path, parts), "tokenizer.ggml.pre must be a string")
