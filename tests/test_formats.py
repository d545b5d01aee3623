"""exactspec.formats: GGUF reader checked against PyPI gguf on the real champion, writer round-trips, hostile files,
safetensors, and the micro tokenizer checked with the `tokenizers` library."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from exactspec.backend import ModelConfig
from exactspec.formats import (FormatError, GGUFFile, describe, dequantize, load_model_file, permute_qk, quantize,
                               unpermute_qk, write_gguf)
from exactspec.formats.gguf import gguf_metadata_for_config
from exactspec.formats.quant import GGML_TYPES
from exactspec.micro import micro_config, micro_weights, tiny_config, write_micro_gguf
from exactspec.reference import ReferenceModel

gguf = pytest.importorskip("gguf")
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize, quantize as gguf_quantize  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
needs_champion = pytest.mark.skipif(not CHAMPION.exists(), reason="champion GGUF missing: run `python build.py setup`")


# -- quantisers / dequantisers vs PyPI gguf ---------------------------------------------------------------------------
def test_type_table_matches_gguf():
    for t in GGMLQuantizationType:
        if t.value in GGML_TYPES:
            name, block, size = GGML_TYPES[t.value]
            assert name == t.name
            assert (block, size) == GGML_QUANT_SIZES[t]


def _test_arrays():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 96)).astype(np.float32)          # (16, 96)
    x[1, :32] = 0.0                                                # all-zero block
    x[2, 32:64] = 1.25                                             # constant block
    x[3, :32] = np.linspace(-1, 1, 32)                             # exact halves
    x[4] *= 1e-4
    x[5] *= 300.0
    x[6, 5] = -7.0                                                 # a single large negative
    return x


@pytest.mark.parametrize("tname", ["F16", "Q8_0", "Q4_0", "Q4_1"])
def test_quantize_bytes_equal_gguf(tname):
    x = _test_arrays()
    ours = quantize(x, tname)
    ref = np.asarray(gguf_quantize(x, GGMLQuantizationType[tname])).reshape(-1).view(np.uint8)
    assert ours.dtype == np.uint8 and np.array_equal(ours, ref)
    back = dequantize(ours, tname, x.size)
    ref_back = gguf_dequantize(ref, GGMLQuantizationType[tname]).reshape(-1)
    assert np.array_equal(back, ref_back)
    if tname != "F16":    # error bounded by the block step
        assert np.max(np.abs(back.reshape(x.shape) - x)) < np.abs(x).max() / 4


def test_bf16_and_f32_dequant():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 1 << 16, size=512, dtype=np.uint16)
    bits = bits[(bits & 0x7F80) != 0x7F80]                         # no NaN/inf patterns
    ours = dequantize(bits.view(np.uint8), "BF16", bits.size)
    ref = gguf_dequantize(bits.view(np.uint8), GGMLQuantizationType.BF16).reshape(-1)
    assert np.array_equal(ours, ref)
    x = rng.standard_normal(33).astype(np.float32)
    assert np.array_equal(dequantize(x.view(np.uint8), "F32", 33), x)


def test_unsupported_types_are_named():
    with pytest.raises(FormatError, match="Q4_K"):
        dequantize(np.zeros(144, np.uint8), "Q4_K", 256)
    with pytest.raises(FormatError, match="Q5_0"):
        quantize(np.zeros((2, 32), np.float32), "Q5_0")
    with pytest.raises(FormatError, match="multiple of 32"):
        quantize(np.zeros((2, 40), np.float32), "Q8_0")


def test_permute_roundtrip():
    w = np.arange(48 * 5, dtype=np.float32).reshape(48, 5)          # (n_heads * head_dim, in)
    for n_head in (1, 2, 3, 4, 6):
        p = permute_qk(w, n_head)
        assert not np.array_equal(p, w)
        assert np.array_equal(unpermute_qk(p, n_head), w)
    # llama.cpp order: within a head, HF rows (0..hd/2-1 | hd/2..hd-1) become interleaved pairs
    p = permute_qk(np.arange(8, dtype=np.float32)[:, None], 1)[:, 0]
    assert p.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    with pytest.raises(FormatError):
        permute_qk(w, 5)


# -- the real champion vs PyPI gguf -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def champion_pair():
    return GGUFFile(CHAMPION), gguf.GGUFReader(str(CHAMPION))


@needs_champion
def test_champion_header_and_config(champion_pair):
    ours, ref = champion_pair
    assert ours.version == 3
    assert len(ours.tensors) == len(ref.tensors) == 272
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.offset == t.data_offset
        assert mine.nbytes == t.n_bytes
        assert mine.shape == tuple(int(d) for d in reversed(t.shape.tolist()))
        assert mine.type_name == t.tensor_type.name
    counts = {}
    for t in ours.tensors.values():
        counts[t.type_name] = counts.get(t.type_name, 0) + 1
    assert counts == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    c = ours.config()
    assert (c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.seq_len) == \
        (576, 1536, 30, 9, 3, 64, 49152, 8192)
    assert c.rope_theta == 100000.0 and c.rope_dim == 64 and c.tied_embeddings
    # metadata values equal gguf's parse
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template", "llama.block_count"):
        f = ref.fields[key]
        v = f.contents()
        assert ours.metadata[key] == v
    assert ours.metadata["tokenizer.ggml.tokens"] == ref.fields["tokenizer.ggml.tokens"].contents()
    assert ours.metadata["tokenizer.ggml.merges"][:100] == ref.fields["tokenizer.ggml.merges"].contents()[:100]


@needs_champion
@pytest.mark.parametrize("name", ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                                  "blk.7.ffn_down.weight", "blk.29.ffn_gate.weight", "blk.13.attn_v.weight",
                                  "blk.0.attn_norm.weight", "output_norm.weight"])
def test_champion_dequant_equals_gguf(champion_pair, name):
    ours, ref = champion_pair
    t = next(t for t in ref.tensors if t.name == name)
    expected = gguf_dequantize(t.data, t.tensor_type).reshape(ours.tensors[name].shape)   # llama.cpp row order
    got = ours.tensor(name, unpermute=False)
    assert got.dtype == np.float32 and np.array_equal(got, expected)
    hf = ours.tensor(name)
    if ".attn_q." in name or ".attn_k." in name:
        n_head = 9 if ".attn_q." in name else 3
        assert np.array_equal(hf, unpermute_qk(expected, n_head)) and not np.array_equal(hf, expected)
    else:
        assert np.array_equal(hf, expected)


@needs_champion
def test_champion_describe_offsets_stream_raw_bytes(champion_pair):
    ours, _ = champion_pair
    d = describe(CHAMPION)
    json.dumps(d)                                                  # JSON-able
    assert d["config"]["vocab_size"] == 49152 and len(d["tensors"]) == 272
    by = {t["name"]: t for t in d["tensors"]}
    assert by["blk.0.attn_q.weight"]["qk_permuted"] and not by["blk.0.attn_v.weight"]["qk_permuted"]
    with open(CHAMPION, "rb") as f:
        for name in ("blk.3.attn_output.weight", "output_norm.weight"):
            t = by[name]
            f.seek(t["offset"])
            raw = np.frombuffer(f.read(t["nbytes"]), np.uint8)
            assert t["ggml_type"] in ("Q4_1", "F32")
            assert np.array_equal(dequantize(raw, t["ggml_type"], int(np.prod(t["shape"]))).reshape(t["shape"]),
                                  ours.tensor(name))
    assert "tokenizer.ggml.tokens" not in d["metadata"] and d["metadata"]["general.architecture"] == "llama"


# -- writer round-trips -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tname", ["F32", "F16", "Q8_0", "Q4_0", "Q4_1"])
def test_writer_roundtrip(tmp_path, tname):
    cfg = micro_config(dim=64, n_heads=4, n_kv_heads=2, hidden_dim=96)
    path = tmp_path / f"m_{tname}.gguf"
    write_micro_gguf(path, cfg, seed=5, tensor_type=tname)
    w = micro_weights(cfg, 5)
    g = GGUFFile(path)
    assert g.config() == cfg
    ref = gguf.GGUFReader(str(path))                             # the independent reader accepts our file
    ref_t = {t.name: t for t in ref.tensors}
    assert set(ref_t) == set(w) == set(g.tensors)
    for name, arr in w.items():
        expected_type = "F32" if arr.ndim == 1 else tname
        assert g.tensors[name].type_name == expected_type == ref_t[name].tensor_type.name
        expected = dequantize(quantize(arr, expected_type), expected_type, arr.size).reshape(arr.shape)
        assert np.array_equal(g.tensor(name), expected), name
        # stored in llama.cpp's permuted order
        stored = gguf_dequantize(ref_t[name].data, ref_t[name].tensor_type).reshape(arr.shape)
        if ".attn_q." in name or ".attn_k." in name:
            n_head = cfg.n_heads if ".attn_q." in name else cfg.n_kv_heads
            assert np.array_equal(stored, dequantize(quantize(permute_qk(arr, n_head), expected_type),
                                                     expected_type, arr.size).reshape(arr.shape))
        else:
            assert np.array_equal(stored, expected)
    # metadata: typed like llama.cpp writes it, and readable by gguf
    assert ref.fields["llama.block_count"].types[0].name == "UINT32"
    assert ref.fields["llama.rope.freq_base"].types[0].name == "FLOAT32"
    assert ref.fields["tokenizer.ggml.tokens"].contents() == g.metadata["tokenizer.ggml.tokens"]
    assert ref.fields["tokenizer.ggml.token_type"].contents() == g.metadata["tokenizer.ggml.token_type"]


def test_f32_gguf_model_equals_weights_model(tmp_path):
    cfg = micro_config()
    write_micro_gguf(tmp_path / "m.gguf", cfg, seed=2, tensor_type="F32")
    a = ReferenceModel.from_file(tmp_path / "m.gguf")
    from exactspec.micro import micro_model
    b = micro_model(cfg, 2)
    toks = [3, 17, 99, 250, 4, 4]
    assert np.array_equal(a.forward(toks, 0), b.forward(toks, 0))


def test_tokenizerless_variant(tmp_path):
    cfg = tiny_config()
    write_micro_gguf(tmp_path / "t.gguf", cfg, seed=1)
    g = GGUFFile(tmp_path / "t.gguf")
    assert g.config().vocab_size == 100
    assert not any(k.startswith("tokenizer.") for k in g.metadata)
    with pytest.raises(ValueError):
        write_micro_gguf(tmp_path / "x.gguf", cfg, seed=1, with_tokenizer=True)


def test_micro_tokenizer_works_with_tokenizers_library(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    write_micro_gguf(tmp_path / "m.gguf", micro_config(), seed=0)
    md = GGUFFile(tmp_path / "m.gguf").metadata
    toks, merges = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.merges"]
    assert len(toks) == 300 and len(set(toks)) == 300
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "smollm"
    assert toks[md["tokenizer.ggml.bos_token_id"]] == "<|im_start|>"
    assert toks[md["tokenizer.ggml.eos_token_id"]] == "<|im_end|>"
    assert md["tokenizer.ggml.token_type"][:3] == [3, 3, 3] and set(md["tokenizer.ggml.token_type"][3:]) == {1}
    assert "<|im_start|>" in md["tokenizer.chat_template"]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=[tuple(m.split(" ")) for m in merges])
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    text = "the cat in the hat is on and on\nüñí €"
    ids = tk.encode(text).ids
    assert tk.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8"))                     # merges are applied
    assert toks.index("Ġthe") in ids


# -- hostile GGUF files ------------------------------------------------------------------------------------------------
def _s(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _gguf(n_tensors=1, n_kv=1, kvs=None, infos=None, data=b"\x00" * 64, version=3, magic=b"GGUF"):
    kvs = kvs if kvs is not None else _s(b"general.architecture") + struct.pack("<I", 8) + _s(b"llama")
    if infos is None:
        infos = _s(b"w") + struct.pack("<I", 1) + struct.pack("<Q", 16) + struct.pack("<I", 0) + struct.pack("<Q", 0)
    head = magic + struct.pack("<IQQ", version, n_tensors, n_kv) + kvs + infos
    head += b"\x00" * ((-len(head)) % 32)
    return head + data


def _write(tmp_path, blob, name="h.gguf"):
    p = tmp_path / name
    p.write_bytes(blob)
    return p


def test_handmade_gguf_parses(tmp_path):
    data = np.arange(16, dtype=np.float32).tobytes()
    g = GGUFFile(_write(tmp_path, _gguf(data=data)))
    assert np.array_equal(g.tensor("w"), np.arange(16, dtype=np.float32))


@pytest.mark.parametrize("blob,match", [
    (b"GGML" + b"\x00" * 60, "magic"),
    (b"GG", "magic"),
    (_gguf(version=7), "version"),
    (_gguf(n_tensors=1 << 40), "tensor count"),
    (_gguf(n_kv=1 << 40), "metadata count"),
    (_gguf(kvs=struct.pack("<Q", 1 << 60) + b"x" * 40), "absurd"),
    (_gguf(kvs=_s(b"k") + struct.pack("<I", 8) + struct.pack("<Q", 1 << 23) + b"abc"), "truncated"),
    (_gguf(kvs=_s(b"k") + struct.pack("<IIQ", 9, 5, 1 << 50)), "exceeds the file"),
    (_gguf(kvs=_s(b"k") + struct.pack("<IIQ", 9, 8, 1 << 50)), "exceeds the file"),
    (_gguf(kvs=_s(b"k") + struct.pack("<I", 99)), "unknown metadata value type"),
    (_gguf(kvs=_s(b"general.alignment") + struct.pack("<II", 4, 3)), "alignment"),
    (_gguf(infos=_s(b"w") + struct.pack("<I", 5) + struct.pack("<5Q", 1, 1, 1, 1, 1) + struct.pack("<IQ", 0, 0)),
     "dims"),
    (_gguf(infos=_s(b"w") + struct.pack("<I", 2) + struct.pack("<2Q", 1 << 39, 1 << 39) + struct.pack("<IQ", 0, 0)),
     "absurd"),
    (_gguf(infos=_s(b"w") + struct.pack("<I", 1) + struct.pack("<Q", 16) + struct.pack("<IQ", 0, 1 << 62)),
     "outside the data section"),
    (_gguf(infos=_s(b"w") + struct.pack("<I", 1) + struct.pack("<Q", 1 << 30) + struct.pack("<IQ", 0, 0)),
     "outside the data section"),
    (_gguf(infos=_s(b"w") + struct.pack("<I", 1) + struct.pack("<Q", 16) + struct.pack("<IQ", 0, 4)),
     "not aligned"),
    (_gguf(infos=_s(b"w") + struct.pack("<I", 1) + struct.pack("<Q", 16) + struct.pack("<IQ", 77, 0)),
     "unknown ggml type id 77"),
    (_gguf(infos=_s(b"w") + struct.pack("<I", 1) + struct.pack("<Q", 40) + struct.pack("<IQ", 8, 0)),
     "multiple of the block size"),
    (_gguf(n_tensors=5, data=b""), "truncated|duplicate|outside"),
])
def test_hostile_gguf_raises_format_error(tmp_path, blob, match):
    with pytest.raises(FormatError, match=match):
        GGUFFile(_write(tmp_path, blob))


def test_unsupported_tensor_type_named_on_read(tmp_path):
    infos = _s(b"kq") + struct.pack("<I", 1) + struct.pack("<Q", 256) + struct.pack("<IQ", 12, 0)   # Q4_K
    g = GGUFFile(_write(tmp_path, _gguf(infos=infos, data=b"\x00" * 160)))
    assert g.tensors["kq"].type_name == "Q4_K"
    with pytest.raises(FormatError, match="Q4_K"):
        g.tensor("kq")
    with pytest.raises(FormatError, match="not in"):
        g.tensor("nope")


def test_truncations_and_bit_flips_never_crash(tmp_path):
    """Every truncation point of a real (micro) GGUF and 300 random byte corruptions of its header either parse or
    raise FormatError; nothing else (no MemoryError, struct.error, IndexError...)."""
    src = tmp_path / "m.gguf"
    write_micro_gguf(src, micro_config(n_layers=1, vocab_size=300), seed=0, tensor_type="Q8_0")
    blob = src.read_bytes()
    g = GGUFFile(src)
    header_len = g.data_offset
    for cut in list(range(0, header_len, max(1, header_len // 150))) + [len(blob) - 1, len(blob) - 33]:
        with pytest.raises(FormatError):
            GGUFFile(_write(tmp_path, blob[:cut], "cut.gguf"))
    rng = np.random.default_rng(0)
    parsed = 0
    for _ in range(300):
        b = bytearray(blob)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(0, header_len))
            b[i] = int(rng.integers(0, 256))
        p = _write(tmp_path, bytes(b), "flip.gguf")
        try:
            gg = GGUFFile(p)
            parsed += 1
            for name in list(gg.tensors)[:3]:
                try:
                    gg.tensor(name)
                except FormatError:
                    pass
        except FormatError:
            pass
    assert parsed > 0   # some flips only touch string bytes


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(FormatError):
        GGUFFile(tmp_path / "none.gguf")
    with pytest.raises(FormatError):
        load_model_file(tmp_path / "none.gguf")
    with pytest.raises(FormatError, match="neither"):
        load_model_file(_write(tmp_path, b"hello world", "x.bin"))


def test_config_from_bad_metadata(tmp_path):
    cfg = micro_config()
    md = gguf_metadata_for_config(cfg)
    md["llama.attention.head_count_kv"] = 3         # 4 heads not divisible by 3
    write_gguf(tmp_path / "b.gguf", md, {"token_embd.weight": np.zeros((10, 64), np.float32)})
    with pytest.raises(FormatError, match="heads"):
        GGUFFile(tmp_path / "b.gguf").config()
    md = gguf_metadata_for_config(cfg)
    md["general.architecture"] = "gpt2"
    write_gguf(tmp_path / "c.gguf", md, {"token_embd.weight": np.zeros((10, 64), np.float32)})
    with pytest.raises(FormatError, match="architecture"):
        GGUFFile(tmp_path / "c.gguf").config()


# -- safetensors -------------------------------------------------------------------------------------------------------
from bench._hostile import hf_name as _hf_name  # noqa: E402  (the GGUF -> HF tensor names, one copy)


def _write_safetensors(path, tensors: dict, dtype: str):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        if dtype == "F32":
            b = arr.astype("<f4").tobytes()
        elif dtype == "F16":
            b = arr.astype("<f2").tobytes()
        else:   # BF16: truncate (exact for values that are already bf16)
            b = (arr.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def _hf_config(cfg: ModelConfig) -> dict:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": cfg.dim,
            "intermediate_size": cfg.hidden_dim, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "vocab_size": cfg.vocab_size,
            "max_position_embeddings": cfg.seq_len, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.norm_eps,
            "tie_word_embeddings": cfg.tied_embeddings}


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("tied", [True, False])
def test_safetensors_model(tmp_path, dtype, tied):
    cfg = micro_config(tied_embeddings=tied)
    w = micro_weights(cfg, 4)
    if dtype == "BF16":
        w = {k: (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) for k, v in w.items()}
    _write_safetensors(tmp_path / "model.safetensors", {_hf_name(k): v for k, v in w.items()}, dtype)
    (tmp_path / "config.json").write_text(json.dumps(_hf_config(cfg)))
    c2, w2 = load_model_file(tmp_path)
    assert c2 == cfg and set(w2) == set(w)
    for k, v in w.items():
        exp = v.astype(np.float16).astype(np.float32) if dtype == "F16" else v
        assert np.array_equal(w2[k], exp), k
    if dtype == "F32":
        from exactspec.micro import micro_model
        a = ReferenceModel.from_file(tmp_path / "config.json")
        assert np.array_equal(a.forward([1, 2, 3], 0), micro_model(cfg, 4).forward([1, 2, 3], 0))


def test_hostile_safetensors(tmp_path):
    from exactspec.formats import SafetensorsFile
    (tmp_path / "a.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(FormatError, match="absurd"):
        SafetensorsFile(tmp_path / "a.safetensors")
    h = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1 << 30]}}).encode()
    (tmp_path / "b.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + b"\x00" * 16)
    with pytest.raises(FormatError, match="outside"):
        SafetensorsFile(tmp_path / "b.safetensors")
    h = json.dumps({"x": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}).encode()
    (tmp_path / "c.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + b"\x00" * 16)
    with pytest.raises(FormatError, match="bytes for shape"):
        SafetensorsFile(tmp_path / "c.safetensors")
    h = json.dumps({"x": {"dtype": "I8", "shape": [16], "data_offsets": [0, 16]}}).encode()
    (tmp_path / "d.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + b"\x00" * 16)
    with pytest.raises(FormatError, match="I8"):
        SafetensorsFile(tmp_path / "d.safetensors").tensor("x")
    (tmp_path / "e.safetensors").write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(FormatError, match="JSON"):
        SafetensorsFile(tmp_path / "e.safetensors")
    os.makedirs(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": -3}))
    with pytest.raises(FormatError, match="hidden_size"):
        load_model_file(tmp_path / "m")
