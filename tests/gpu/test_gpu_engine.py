"""The WGSL engine under Node + Dawn (OpenGL on llvmpipe) against the numpy ReferenceModel.

(a) batch invariance, bitwise: every position's logits are the same whether computed in one prefill, one token at
    a time, in verify blocks of k+1 (k = 1..8), in prefill chunks of several sizes, with internal row-chunking and
    with weights split across several storage bindings;
(b) parity with exactspec.reference.ReferenceModel: top-1 equal everywhere, max |diff| <= 1e-3;
(c) truncate + re-forward reproduces a fresh computation bitwise; bad calls are refused with clear errors.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from dawn_harness import probe, run_engine

ROOT = Path(__file__).resolve().parents[2]
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"

_why = probe()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")
if _why is not None:
    print(f"[tests/gpu] skipping: {_why}")


VERIFY_KS = tuple(range(1, 9))     # verify passes of k + 1 rows
CHUNKS = (3, 5, 7)                 # prefill chunk sizes
# SmolLM2 on llvmpipe costs seconds a forward: its runs take the verify sizes and a chunk size that cover every tile
# variant (1-, 4- and 8-row tiles, a partial last tile) and leave the full k = 1..8 / chunk sweep to the micro models
SMOL_KS, SMOL_CHUNKS = (1, 3, 4, 7, 8), (5,)


def invariance_ops(toks: list[int], alt: list[int], ks=VERIFY_KS, chunks=CHUNKS) -> tuple[list[dict], dict]:
    """Ops for one engine run, and how to slice the outputs: name -> list of output indices."""
    n = len(toks)
    ops: list[dict] = []
    plan: dict[str, list[int]] = {}
    k_out = 0

    def fwd(name, tokens, start, n_out=None):
        nonlocal k_out
        ops.append({"op": "forward", "tokens": tokens, "start_pos": start, "n_out": n_out})
        plan.setdefault(name, []).append(k_out)
        k_out += 1

    def trunc(m):
        ops.append({"op": "truncate", "n": m})

    fwd("full", toks, 0)
    trunc(0)
    for i in range(n):
        fwd("single", toks[i:i + 1], i)
    for k in ks:
        trunc(0)
        fwd(f"verify{k}", toks[:2], 0)
        for s in range(2, n, k + 1):
            fwd(f"verify{k}", toks[s:s + k + 1], s)
    for c in chunks:
        trunc(0)
        for s in range(0, n, c):
            fwd(f"chunk{c}", toks[s:s + c], s)
    # truncate: roll back to m, take a different branch, roll back again and redo the original suffix
    m = n // 2
    trunc(m)
    fwd("branch", alt, m)
    trunc(m)
    fwd("redo", toks[m:], m, n - m)
    trunc(0)
    fwd("fresh_branch", toks[:m] + alt, 0, len(alt))
    # refusals
    fwd("bad_start", toks[:1], m + len(alt) + 1)
    fwd("bad_token", [10 ** 6], m + len(alt))
    return ops, plan


def rows_of(outs, plan, name):
    return np.concatenate([outs[i] for i in plan[name]], axis=0)


def check_engine(path, n=24, seed=0, max_rows=None, max_binding_bytes=None, parity=1e-3, lanes=None, emulate_sg=False,
                 ksplit=None, engine_opts=None, description=None, ref_path=None, ks=VERIFY_KS, chunks=CHUNKS,
                 n_layers=None):
    """description/ref_path: the engine runs `description` on `path` (default describe(path)), the reference model
    is read from ref_path (default path). n_layers: the engine and the reference run the model's first n_layers
    layers only (every layer runs the same kernels: SmolLM2's shapes at a fraction of its time on llvmpipe)."""
    import copy
    import dataclasses

    from exactspec.formats import describe, load_model_file
    from exactspec.reference import ReferenceModel

    d = copy.deepcopy(description or describe(path))
    if n_layers is not None:
        assert 1 <= n_layers <= d["config"]["n_layers"]
        d["config"]["n_layers"] = n_layers
    vocab = d["config"]["vocab_size"]
    rng = np.random.default_rng(seed)
    toks = [int(t) for t in rng.integers(0, vocab, n)]
    alt = [int(t) for t in rng.integers(0, vocab, 6)]
    ops, plan = invariance_ops(toks, alt, ks, chunks)
    info, outs = run_engine(path, d, ops, max_rows=max_rows, max_binding_bytes=max_binding_bytes, lanes=lanes,
                            emulate_sg=emulate_sg, ksplit=ksplit, engine_opts=engine_opts)
    res = [r for r in info["results"] if r["op"] == "forward"]
    assert "start_pos" in res[-2].get("error", "") and "length" in res[-2]["error"], res[-2]
    assert "outside" in res[-1].get("error", ""), res[-1]
    full = rows_of(outs, plan, "full")                      # (n, vocab)
    assert full.shape == (n, vocab) and np.isfinite(full).all()
    # (a) batch invariance, bitwise
    for name in ["single"] + [f"verify{k}" for k in ks] + [f"chunk{c}" for c in chunks]:
        got = rows_of(outs, plan, name)
        assert got.shape == full.shape, name
        bad = np.nonzero((got.view(np.uint32) != full.view(np.uint32)).any(axis=1))[0]
        assert bad.size == 0, f"{name}: rows {bad.tolist()} differ from the one-shot prefill"
    # (c) truncate + re-forward
    assert np.array_equal(rows_of(outs, plan, "redo").view(np.uint32), full[n // 2:].view(np.uint32))
    assert np.array_equal(rows_of(outs, plan, "branch").view(np.uint32),
                          rows_of(outs, plan, "fresh_branch").view(np.uint32))
    # (b) parity with the reference
    config, weights = load_model_file(ref_path or path)
    if n_layers is not None:
        config = dataclasses.replace(config, n_layers=n_layers)
    ref = ReferenceModel(config, weights).forward(toks, 0)  # (n, vocab)
    diff = float(np.abs(ref - full).max())
    assert (ref.argmax(axis=1) == full.argmax(axis=1)).all(), "top-1 differs from the reference"
    assert diff <= parity, f"max |diff| {diff} > {parity}"
    return full, diff, info


@pytest.fixture(scope="module")
def micro_paths(tmp_path_factory):
    from exactspec.micro import micro_config, write_micro_gguf

    td = tmp_path_factory.mktemp("micro")
    paths = {}
    for ty in ("F32", "F16", "Q8_0", "Q4_0", "Q4_1"):
        p = td / f"micro-{ty}.gguf"
        write_micro_gguf(p, micro_config(), seed=3, tensor_type=ty)
        paths[ty] = p
    return paths


@pytest.mark.parametrize("ty", ["F32", "F16", "Q8_0", "Q4_0", "Q4_1"])
def test_micro_invariance_parity_truncate(micro_paths, ty):
    """The CPU-adapter matmul path (one invocation per row pair, no barriers: what SwiftShader/llvmpipe run)."""
    full, diff, info = check_engine(micro_paths[ty])
    print(f"[{ty}] max |diff| vs reference {diff:.3g}; adapter {info['adapter']['device']}")


@pytest.mark.parametrize("ty", ["F32", "Q8_0", "Q4_1"])
def test_micro_invariance_parity_gpu_path(micro_paths, ty):
    """The GPU matmul path (32 lanes per row pair, fixed tree reduction in workgroup memory), forced here."""
    check_engine(micro_paths[ty], n=20, lanes=32)


@pytest.mark.parametrize("ty,ksplit", [("F32", 1), ("Q4_1", 1), ("Q4_1", 2), ("Q8_0", 4)])
def test_micro_invariance_parity_subgroup_kernel(micro_paths, ty, ksplit):
    """matmul_sg.wgsl (what GPUs with subgroups run) with subgroups of one lane emulated: 1-, 4- and 8-row tiles,
    the RMSNorm statistic from the dot pass, every epilogue, and with ksplit > 1 several subgroups per row pair
    summed through workgroup memory; only the cross-lane subgroupAdd itself is left out."""
    full, diff, info = check_engine(micro_paths[ty], n=20, emulate_sg=True, ksplit=ksplit)
    assert info["adapter"]["kernels"]["matmul"].startswith("matmul (LANES=1" + (f", KSPLIT={ksplit})" if ksplit > 1 else ")"))


def test_micro_row_chunks_and_split_bindings(micro_paths):
    """Internal chunking (max_rows 5) and weights split over 4 KiB bindings give the very same bits."""
    from exactspec.formats import describe

    path = micro_paths["Q4_1"]
    d = describe(path)
    toks = [int(t) for t in np.random.default_rng(1).integers(0, d["config"]["vocab_size"], 17)]
    ops = [{"op": "forward", "tokens": toks, "start_pos": 0}]
    _, (a,) = run_engine(path, d, ops)
    _, (b,) = run_engine(path, d, ops, max_rows=5)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    # split bindings: the default ('auto') runs such a model unfused on GPUs that fuse, so compare unfused runs
    _, (c,) = run_engine(path, d, ops, engine_opts={"fuse": False})
    _, (e,) = run_engine(path, d, ops, max_rows=5, max_binding_bytes=4096, engine_opts={"fuse": False})
    assert np.array_equal(c.view(np.uint32), e.view(np.uint32))


def test_micro_gqa_partial_rope_untied(tmp_path):
    """Other shapes: 1 kv head for 4 query heads, rotary on half the head, untied output, 3 layers."""
    from exactspec.micro import micro_config, write_micro_gguf

    p = tmp_path / "m.gguf"
    write_micro_gguf(p, micro_config(n_kv_heads=1, rope_dim=8, tied_embeddings=False, n_layers=3, vocab_size=301),
                     seed=5, tensor_type="F32")
    check_engine(p, n=12)


def test_device_loss_rejects_forward(micro_paths):
    """A lost device makes forward reject with an Error starting "device lost" (no hang), before and after."""
    from exactspec.formats import describe

    d = describe(micro_paths["F32"])
    ops = [{"op": "forward", "tokens": [1, 2, 3], "start_pos": 0}, {"op": "lose_device"},
           {"op": "forward", "tokens": [4], "start_pos": 3}, {"op": "forward", "tokens": [4], "start_pos": 3}]
    info, outs = run_engine(micro_paths["F32"], d, ops, timeout=120)
    res = info["results"]
    assert "error" not in res[0] and len(outs) == 1
    for r in res[2:]:
        assert r.get("error", "").startswith("device lost"), r


def test_bad_description_is_refused(micro_paths):
    from exactspec.formats import describe

    d = describe(micro_paths["F32"])
    d["tensors"] = [t for t in d["tensors"] if t["name"] != "blk.1.ffn_up.weight"]
    with pytest.raises(RuntimeError, match="lacks tensor blk.1.ffn_up.weight"):
        run_engine(micro_paths["F32"], d, [])


@pytest.mark.slow
@pytest.mark.skipif(not CHAMPION.exists(), reason="champion GGUF not fetched (python build.py setup)")
def test_smollm2_invariance_parity():
    """SmolLM2's shapes on the CPU adapters' matmul path, its first 4 layers of 30 (the whole model on this path runs
    in tests/gpu/test_browser_gpu.py on SwiftShader; here it took 2.3 of the suite's minutes)."""
    full, diff, _ = check_engine(CHAMPION, n=10, seed=7, ks=SMOL_KS, chunks=SMOL_CHUNKS, n_layers=4)
    print(f"[SmolLM2 Q4_1 (4 layers)] max |diff| vs reference over 10 positions: {diff:.3g}")


# ---- the fused engine (opts.fuse: attention.wgsl O_PROJ, matmul_sg.wgsl PRO, ffn_sg.wgsl), with one-lane subgroups emulated

def write_bf16_pair(src, ref_path, bf16_path):
    """From an F32 GGUF: ref_path = the same file with every matrix truncated to bfloat16 values (still F32, what the
    reference reads), bf16_path = ref_path plus the matrices as BF16 appended; returns the description of the BF16
    tensors (2-D tensors point at the appended BF16 bytes)."""
    import copy

    from exactspec.formats import describe

    d = describe(src)
    raw = bytearray(Path(src).read_bytes())
    d2 = copy.deepcopy(d)
    tail = bytearray()
    base = (len(raw) + 31) // 32 * 32
    for t, t2 in zip(d["tensors"], d2["tensors"]):
        if len(t["shape"]) != 2:
            continue
        assert t["ggml_type"] == "F32"
        a = np.frombuffer(bytes(raw[t["offset"]:t["offset"] + t["nbytes"]]), "<u4") & np.uint32(0xFFFF0000)  # (numel,)
        raw[t["offset"]:t["offset"] + t["nbytes"]] = a.tobytes()
        b = (a >> 16).astype("<u2").tobytes()
        t2.update(ggml_type="BF16", offset=base + len(tail), nbytes=len(b))
        tail += b + b"\0" * (-len(b) % 32)
    Path(ref_path).write_bytes(bytes(raw))
    Path(bf16_path).write_bytes(bytes(raw) + b"\0" * (base - len(raw)) + bytes(tail))
    return d2


def fused_dispatches(info, n_layers, fuse, extra=0):
    """Dispatches of every one-chunk forward of a run (all the same: embed + per layer + head; `extra` for weights
    split over several bindings)."""
    per = {"attn": 4, True: 3}[fuse]
    got = {r["dispatches"] for r in info["results"] if r["op"] == "forward" and "error" not in r and r["chunks"] == 1}
    assert got == {per * n_layers + 2 + extra}, got


SMALL_WG = {"fuseWg": 16, "fuseHeadWg": 16, "fuseHeadPairs": 3, "fuseMatmulWg": 8}


@pytest.mark.parametrize("ty,fuse,slice_,more", [("F32", True, 32, {}), ("F16", True, 64, {}), ("Q8_0", True, 96, {}),
                                                 ("Q4_0", True, 32, SMALL_WG), ("Q4_1", True, 32, {}),
                                                 ("Q4_1", "attn", 32, {}), ("Q8_0", "attn", 32, SMALL_WG)])
def test_fused_invariance_parity(micro_paths, ty, fuse, slice_, more):
    """fuse true (3 dispatches per layer) and 'attn' (4): bitwise batch invariance (one token at a time, verify blocks
    k+1 for k = 1..8, prefill chunks, truncate) and parity with the reference. head_dim 16 puts two heads in one Q4
    block of W_o (attention.wgsl O_PROJ's zero-padded units); slice 96 of hidden 128 leaves a short last FFN slice; SMALL_WG
    makes each FFN subgroup take 2 gate/up pairs and 4 down passes, the head's subgroups 3 row pairs each (the
    last workgroup partly past the vocabulary) and the qkv / gate-up prologue matmuls stage x in 8-invocation
    workgroups."""
    _, _, info = check_engine(micro_paths[ty], n=20, emulate_sg=True,
                              engine_opts={"fuse": fuse, "fuseSlice": slice_, **more})
    assert info["adapter"]["kernels"]["fuse"]["fuse"] == fuse
    fused_dispatches(info, 2, fuse)


def test_fused_bf16(micro_paths, tmp_path):
    """BF16 matrices (written here: the project's GGUF writer has no BF16) through every fused kernel."""
    ref, bf = tmp_path / "ref.gguf", tmp_path / "bf16.gguf"
    d = write_bf16_pair(micro_paths["F32"], ref, bf)
    _, _, info = check_engine(bf, n=12, emulate_sg=True, engine_opts={"fuse": True, "fuseSlice": 32},
                              description=d, ref_path=ref)
    fused_dispatches(info, 2, True)


def test_fused_gqa_partial_rope_untied_chunks(tmp_path):
    """fuse true on other shapes (1 kv head for 4 query heads, rotary on half the head, untied Q4_1 head, 3 layers),
    with internal row chunks of 5 (each chunk its own pass through the ping-pong residuals and partials), and the
    head and token_embd (301 x 40 B) split over two 11000-byte bindings: two head dispatches, each with the prologue."""
    from exactspec.micro import micro_config, write_micro_gguf

    p = tmp_path / "m.gguf"
    write_micro_gguf(p, micro_config(n_kv_heads=1, rope_dim=8, tied_embeddings=False, n_layers=3, vocab_size=301),
                     seed=5, tensor_type="Q4_1")
    _, _, info = check_engine(p, n=12, emulate_sg=True, max_rows=5, max_binding_bytes=11000,
                              engine_opts={"fuse": True, "fuseSlice": 64})
    fused_dispatches(info, 3, True, extra=2)


def test_fused_refusals(micro_paths):
    """fuse is refused, with a message naming why, without the subgroup matmul, with ksplit > 1, with a bad slice,
    and when a fused layer's weights are split over several storage bindings."""
    from exactspec.formats import describe

    path = micro_paths["Q4_1"]
    d = describe(path)
    cases = [({"engine_opts": {"fuse": True, "subgroups": False}}, "fuse needs the subgroup matmul"),
             ({"emulate_sg": True, "ksplit": 2, "engine_opts": {"fuse": True}}, "fuse needs ksplit 1"),
             ({"emulate_sg": True, "engine_opts": {"fuse": True, "fuseSlice": 48}}, "fuseSlice 48 must be"),
             ({"emulate_sg": True, "engine_opts": {"fuse": "yes"}}, "must be false, true, 'attn' or 'auto'"),
             ({"emulate_sg": True, "max_binding_bytes": 4096, "engine_opts": {"fuse": True}}, "storage bindings")]
    for kw, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            run_engine(path, d, [{"op": "forward", "tokens": [1, 2], "start_pos": 0}], **kw)


@pytest.mark.slow
@pytest.mark.skipif(not CHAMPION.exists(), reason="champion GGUF not fetched (python build.py setup)")
def test_smollm2_fused_invariance_parity():
    """SmolLM2-135M with fuse true (92 dispatches per forward): invariance and parity as above."""
    _, diff, info = check_engine(CHAMPION, n=10, seed=7, emulate_sg=True, engine_opts={"fuse": True}, ks=SMOL_KS,
                                 chunks=SMOL_CHUNKS)
    fused_dispatches(info, 30, True)
    print(f"[SmolLM2 Q4_1, fused] max |diff| vs reference over 10 positions: {diff:.3g}")


def test_fuse_auto_falls_back_per_model(micro_paths):
    """fuse 'auto' (the default where the subgroup matmul runs) fuses a model it can (3 * n_layers + 2 dispatches)
    and runs one it cannot (FFN weights split over several bindings) unfused, bit for bit as fuse false does."""
    from exactspec.formats import describe

    path = micro_paths["Q4_1"]
    d = describe(path)
    nl = d["config"]["n_layers"]
    ops = [{"op": "forward", "tokens": [3, 1, 4, 1, 5], "start_pos": 0}]
    info, (a,) = run_engine(path, d, ops, emulate_sg=True, engine_opts={"fuse": "auto"})
    assert info["results"][0]["fused"] is True and info["results"][0]["dispatches"] == 3 * nl + 2
    info, (b,) = run_engine(path, d, ops, emulate_sg=True, max_binding_bytes=4096, engine_opts={"fuse": "auto"})
    _, (c,) = run_engine(path, d, ops, emulate_sg=True, max_binding_bytes=4096, engine_opts={"fuse": False})
    assert info["results"][0]["fused"] is False
    assert np.array_equal(b.view(np.uint32), c.view(np.uint32))


def test_fuse_auto_survives_a_rejected_fused_kernel(micro_paths):
    """If the implementation rejects a fused kernel's WGSL, fuse 'auto' runs the unfused engine (same bits as fuse
    false); an explicit fuse true reports the kernel by name instead."""
    from exactspec.formats import describe

    path = micro_paths["Q8_0"]
    d = describe(path)
    ops = [{"op": "forward", "tokens": [2, 7, 1, 8], "start_pos": 0}]
    info, (a,) = run_engine(path, d, ops, emulate_sg=True, break_shader="ffn_sg", engine_opts={"fuse": "auto"})
    _, (b,) = run_engine(path, d, ops, emulate_sg=True, engine_opts={"fuse": False})
    assert info["results"][0]["fused"] is False and info["adapter"]["kernels"]["fuse"] is False
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    with pytest.raises(RuntimeError, match="WGSL ffn"):
        run_engine(path, d, ops, emulate_sg=True, break_shader="ffn_sg", engine_opts={"fuse": True})


# ---- Hugging Face folders (safetensors) on the engine, through Python's one tensor-name map (formats.describe)

def write_hf_folder(folder, cfg, seed, dtype, shards):
    """A Hugging Face folder: config.json + the micro weights in `shards` safetensors files of `dtype` (BF16 weights
    are bfloat16 values already, so every dtype holds the reference's weights exactly or as rounded by the file)."""
    import json

    from exactspec.formats.safetensors import config_to_hf, gguf_to_hf_name, write_safetensors
    from exactspec.micro import micro_weights

    folder.mkdir()
    w = micro_weights(cfg, seed)
    if dtype == "BF16":
        w = {k: (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) for k, v in w.items()}
    names = sorted(w)
    for s in range(shards):
        write_safetensors(folder / f"model-{s + 1:05d}-of-{shards:05d}.safetensors",
                          {gguf_to_hf_name(n): w[n] for n in names[s::shards]}, dtype)
    (folder / "config.json").write_text(json.dumps(config_to_hf(cfg)))
    return folder


@pytest.mark.parametrize("dtype,shards,kw", [("F32", 1, {}), ("F16", 2, {}), ("BF16", 3, {"n_kv_heads": 1, "rope_dim": 8,
                                                                                    "tied_embeddings": False})])
def test_hf_folder_invariance_parity(tmp_path, dtype, shards, kw):
    """A Hugging Face folder (F32 / F16 / BF16 safetensors, 1-3 shards; Q/K rows in HF order, gathered into the
    engine's RoPE-pair order) runs on the engine: batch invariant, within 1e-3 of the reference read from the same
    folder. The description's tensor names are Python's GGUF names; each names its shard."""
    from exactspec.formats import describe
    from exactspec.micro import micro_config

    folder = write_hf_folder(tmp_path / "hf", micro_config(**kw), seed=9, dtype=dtype, shards=shards)
    d = describe(folder)
    assert d["format"] == "hf" and all(t["name"].startswith(("blk.", "token_embd", "output")) for t in d["tensors"])
    assert len({t["file"] for t in d["tensors"]}) == shards
    check_engine(folder, n=14, description=d)


# ---- tile policies (engine options rowTiles / rowTilesMax / attnSplit): the same arithmetic per row, so the same bits

ROW_ALL = ["qkv", "attn_output", "ffn_gate_up", "ffn_down", "ffn", "logits"]
TOUCH_ALL = ["qkv", "logits", "attn", "ffn_gate_up", "ffn_down"]   # fuseTouch: true


@pytest.mark.parametrize("fuse,more", [(False, {"rowTiles": ROW_ALL, "rowTilesMax": 5}),
                                       (True, {"rowTiles": ROW_ALL, "rowTilesMax": 5, "attnSplit": 3}),
                                       (True, {"rowTiles": "all", "attnSplit": 2}),
                                       ("attn", {"rowTiles": ["qkv", "ffn_gate_up"], "attnSplit": 4}),
                                       (True, {"headSum": True}), (True, {"headSum": True, "rowTiles": "all"}),
                                       (True, {"headSum": True, "headStage": True}),
                                       (True, {"headSum": True, "headStage": True, "fuseHeadPairs": 3, "fuseHeadWg": 8, "rowTiles": "all"}),
                                       (True, {"fuseQkvPairs": 3, "fuseMatmulWg": 4}),
                                       (True, {"fuseQkvPairs": 2, "rowTiles": ["qkv"]}),
                                       (True, {"fuseWgRows": 128, "fuseMatmulWgRows": 32, "fuseQkvPairsRows": 2}),
                                       (True, {"fuseWgRows": 32, "fuseQkvPairsRows": 3, "rowTiles": ["qkv", "ffn"]}),
                                       (True, {"fuseQkvAttn": True}),
                                       (True, {"fuseQkvAttn": True, "fuseQkvAttnWg": 128, "attnWg": 64, "attnSplit": 3, "rowTiles": "all"}),
                                       (True, {"fuseTouch": True}), ("attn", {"fuseTouch": True, "attnSplit": 3}),
                                       (True, {"fuseTouch": True, "fuseQkvPairs": 2, "rowTiles": "all", "headSum": True}),
                                       (True, {"fuseTouch": True, "fuseQkvAttn": True, "attnSplit": 2}),
                                       (True, {"fuseTouch": ["qkv", "attn", "ffn_down"]}),
                                       (True, {"lightDown": True, "fuseWgRows": 32, "rowTiles": ["qkv", "ffn"]}),
                                       (True, {"lightDown": True, "fuseWgRows": 32, "rowTiles": "all", "rowTilesMax": 3}),
                                       (True, {"fuseQkvPairsRows": 2, "fuseMatmulWgRows": 32, "qkvRowsMin": 3, "qkvRowsMax": 5,
                                               "rowTiles": ["qkv", "ffn"]}),
                                       (True, {"tile8Rows": 9, "rowTiles": ["qkv", "ffn"], "rowTilesMax": 3}),
                                       (True, {"attnRowsZ": "all", "attnSplit": 3}),
                                       (True, {"fuseQkvPairsRows": 2, "qkvRowsMin": 3, "qkvRowsMax": 9, "qkvRowsDense": True,
                                               "rowTiles": ["qkv", "ffn"]}),
                                       ("attn", {"attnRowsZ": "all", "attnSplit": 2, "rowTiles": "all", "fuseTouch": True})])
def test_tile_policies_give_the_same_bits(micro_paths, fuse, more):
    """Row-parallel 1-row tiles (every chunk row of a dispatch of <= rowTilesMax rows in its own workgroup), the
    attention + O projection split over attnSplit workgroups per head, and the fused head's input summed once by
    residual.wgsl (headSum: then the head is a plain matmul_sg, or with headStage matmul_sg PRO without partials), and the qkv prologue matmul's row pairs per subgroup
    and workgroup size (fuseQkvPairs, fuseMatmulWg: how many weight rows share one staging of x), and the FFN's and
    the qkv matmul's own workgroup size / row pairs for dispatches of more than one row (fuseWgRows,
    fuseMatmulWgRows, fuseQkvPairsRows; the qkv's only for dispatches of qkvRowsMin .. qkvRowsMax rows), and the fused kernels' early loads of their weights (fuseTouch: loads only),
    and the attention's grid with rows in z (attnRowsZ 'all': indexing only)
    compute each row with the same code in the same order: every forward's logits equal the default policy's bit for bit (and so stay
    batch invariant)."""
    from exactspec.formats import describe

    path = micro_paths["Q4_1"]
    d = describe(path)
    vocab = d["config"]["vocab_size"]
    toks = [int(t) for t in np.random.default_rng(6).integers(0, vocab, 16)]
    ops, _ = invariance_ops(toks, toks[:4])
    base = {"fuse": fuse, "fuseSlice": 32} if fuse else {"fuse": False}
    info_a, a = run_engine(path, d, ops, emulate_sg=True, engine_opts=base)
    info_b, b = run_engine(path, d, ops, emulate_sg=True, engine_opts={**base, **more})
    k = info_b["adapter"]["kernels"]
    # (on a GPU host EXACTSPEC_ENGINE_OPTS may set options for every engine of a run: they win over the test's own)
    eff = {**more, **json.loads(os.environ.get("EXACTSPEC_ENGINE_OPTS") or "{}")}
    assert bool(k["row_tiles"]) == ("rowTiles" in eff)
    assert k["attn_split"] == eff.get("attnSplit", 1) and k["head_sum"] == eff.get("headSum", False)
    assert k["head_stage"] == eff.get("headStage", False) and k["tile8_rows"] == eff.get("tile8Rows", 5)
    assert k["attn_rows_z"] == eff.get("attnRowsZ", False)
    if k["fuse"]:
        assert k["fuse"]["fuseQkvPairs"] == eff.get("fuseQkvPairs", 1)
        assert k["fuse"]["fuseQkvAttn"] == eff.get("fuseQkvAttn", False)
        touch = eff.get("fuseTouch", False)
        assert k["fuse"]["fuseTouch"] == (TOUCH_ALL if touch is True else touch or [])
        for key, one in (("fuseWgRows", "fuseWg"), ("fuseMatmulWgRows", "fuseMatmulWg"), ("fuseQkvPairsRows", "fuseQkvPairs")):
            assert k["fuse"][key] == eff.get(key, k["fuse"][one])   # dispatches of more rows: their own variant
        assert k["fuse"]["lightDown"] == eff.get("lightDown", False)
        assert (k["fuse"]["qkvRowsMin"], k["fuse"]["qkvRowsMax"]) == (eff.get("qkvRowsMin", 2), eff.get("qkvRowsMax"))
        assert k["fuse"]["qkvRowsDense"] == eff.get("qkvRowsDense", False)
    assert len(a) == len(b) and all(np.array_equal(x.view(np.uint32), y.view(np.uint32)) for x, y in zip(a, b))


# ---- the attention's keys in blocks (engine option attnBlock): other arithmetic past the first block, still invariant

@pytest.mark.parametrize("more", [{}, {"attnSplit": 3, "rowTiles": "all", "headSum": True},
                                  {"fuseTouch": True, "fuseWgRows": 32, "attnWg": 32}, {"maxRows": 5, "attnSplit": 2, "attnRowsZ": "all"}],
                         ids=["default", "split3_rows_headsum", "touch_wg32", "chunks5_split2_rowsz"])
def test_attention_key_blocks(micro_paths, more):
    """attnBlock 16 on the micro model (head_dim 16, seq_len 256: 16 blocks, grid z = blocks x attnSplit), 40
    positions (3 blocks), on four engine variants (the last cuts every pass into chunks of at most 5 rows):
    (a) batch invariance (one-shot prefill, one row at a time, verify blocks, prefill chunks, truncate) and parity with
    the numpy reference, as every engine; (b) rows before position 16 (one block) bitwise
    equal to the same engine without blocks, and rows past it not (their attention is the blocks' weighed sum, so
    the option did run there); (c) a chunk of rows all before position 16 ran the layers without blocks, one that
    reaches it the blocks' (stats far_chunks), so (a) mixes the two kernels' rows; (d) the blocks' layer list holds
    the other list's ops themselves but for the attention + O projection and the FFN of each layer (model.js farOps)."""
    from exactspec.formats import describe

    path = micro_paths["Q4_1"]
    base = {"fuse": True, "fuseSlice": 32, **more}
    full_b, _, info = check_engine(path, n=40, emulate_sg=True, engine_opts={**base, "attnBlock": 16}, ks=(1, 4, 8), chunks=(3, 7))
    assert info["adapter"]["kernels"]["attn_block"] == 16
    n_layers = describe(path)["config"]["n_layers"]
    lay = info["layers"]
    assert lay["far"] == lay["ops"] and lay["shared"] == lay["ops"] - 2 * n_layers and lay["block_kernels"], lay
    fwd = [r for r in info["results"] if r["op"] == "forward"]
    assert [r["far_chunks"] for r in fwd[1:41]] == [0] * 16 + [1] * 24   # one row at a time, positions 0 .. 39
    assert fwd[0]["far_chunks"] >= 1 and fwd[0]["far_chunks"] <= fwd[0]["chunks"]
    chunk3 = fwd[41 + sum(len(range(2, 40, k + 1)) + 1 for k in (1, 4, 8)):][:14]   # chunks of 3 at 0, 3, .., 39
    assert [r["far_chunks"] for r in chunk3] == [int(s + 3 > 16) for s in range(0, 40, 3)]
    full_a, _, info_a = check_engine(path, n=40, emulate_sg=True, engine_opts=base, ks=(1,), chunks=(7,))
    assert info_a["adapter"]["kernels"]["attn_block"] == 0
    assert info_a["layers"] == {"ops": lay["ops"], "far": None, "shared": None, "block_kernels": False}
    assert np.array_equal(full_a[:16].view(np.uint32), full_b[:16].view(np.uint32))
    later = (full_a[16:].view(np.uint32) != full_b[16:].view(np.uint32)).any(axis=1)
    assert later.sum() >= 20, f"only {int(later.sum())} of 24 rows past the first block differ"


def test_smollm2_attention_key_blocks():
    """SmolLM2-135M (9 heads over 3 kv heads, head_dim 64) fused with attnBlock 16 over 24 positions (2 blocks; its
    seq_len cut to 512, 32 blocks of partials): batch invariance and parity with the reference, as without blocks (on
    36 positions, run once by hand: max |diff| 1.4e-4 either way, top-1 equal, rows past 15 within 4.3e-5 of the
    engine without blocks). Its first 4 layers of 30 (every layer runs the same kernels; the whole model took ~6 of
    the suite's minutes on llvmpipe, 4 layers about 1: the full depth runs fused in test_smollm2_fused_invariance_parity
    and on the GPU hosts)."""
    import copy

    from exactspec.formats import describe

    d = copy.deepcopy(describe(CHAMPION))
    d["config"]["seq_len"] = 512
    _, diff, info = check_engine(CHAMPION, n=24, seed=7, emulate_sg=True, engine_opts={"fuse": True, "attnBlock": 16},
                                 ks=(4,), chunks=(5,), description=d, n_layers=4)
    assert info["adapter"]["kernels"]["attn_block"] == 16
    print(f"[SmolLM2 Q4_1 (4 layers), fused, key blocks of 16] max |diff| vs reference over 24 positions: {diff:.3g}")


def test_attention_key_blocks_auto(micro_paths):
    """attnBlock 'auto' (the default on the fused engine with real subgroups): blocks of 512 on a fused model (a pass
    reaching position 512 runs them; the micro model with its capacity raised to 1,024), 0 without a refusal on an
    engine that cannot take them (fuse 'attn'), for a model of no more than 512 positions (the blocks' kernels are
    then not even compiled), and for a model whose blocks' partials would not fit a storage binding, where a number
    given is refused (options.js modelAttnBlock; at load: the test below)."""
    import copy
    import subprocess

    from exactspec.formats import describe

    path = micro_paths["Q4_1"]
    d = copy.deepcopy(describe(path))
    d["config"]["seq_len"] = 1024
    toks = [(7 + 3 * i) % d["config"]["vocab_size"] for i in range(521)]
    ops = [{"op": "forward", "tokens": toks[:520], "start_pos": 0, "n_out": 1},
           {"op": "forward", "tokens": toks[520:521], "start_pos": 520}]
    info, _ = run_engine(path, d, ops, emulate_sg=True, engine_opts={"fuse": True, "attnBlock": "auto"})
    assert info["adapter"]["kernels"]["attn_block"] == 512
    first, one = info["results"]
    assert "error" not in first and 1 <= first["far_chunks"] < first["chunks"] and one["far_chunks"] == 1
    assert info["layers"]["block_kernels"] and info["layers"]["far"] == info["layers"]["ops"]
    short = [{"op": "forward", "tokens": toks[:40], "start_pos": 0, "n_out": 1}]
    info, _ = run_engine(path, describe(path), short, emulate_sg=True, engine_opts={"fuse": True, "attnBlock": "auto"})
    assert describe(path)["config"]["seq_len"] <= 512 and info["adapter"]["kernels"]["attn_block"] == 512
    assert "error" not in info["results"][0] and info["results"][0]["far_chunks"] == 0
    assert info["layers"]["far"] is None and not info["layers"]["block_kernels"], info["layers"]
    info, _ = run_engine(path, d, ops[:1], emulate_sg=True, engine_opts={"fuse": "attn", "attnBlock": "auto"})
    assert info["adapter"]["kernels"]["attn_block"] == 0 and "error" not in info["results"][0]
    js = """import { modelAttnBlock } from './app/gpu/options.js';
const cfg = { n_heads: 9, dim: 576, seq_len: 8192 };   // 16 blocks of 512, 64 rows: 21,233,664 bytes of partials
const plan = { attnBlock: 512, attnBlockAuto: true, fuse: true, fuseQkvAttn: false, maxRows: 64 };
let refused = null;
try { modelAttnBlock({ ...plan, attnBlockAuto: false }, cfg, 21233663); } catch (e) { refused = e.message; }
console.log(JSON.stringify([modelAttnBlock(plan, cfg, 21233664), modelAttnBlock(plan, cfg, 21233663), refused,
  modelAttnBlock({ ...plan, fuseQkvAttn: true }, cfg, 2 ** 31), modelAttnBlock({ ...plan, fuse: 'attn' }, cfg, 2 ** 31),
  modelAttnBlock(plan, { ...cfg, seq_len: 512 }, 2 ** 31)]));"""
    r = subprocess.run(["node", "--input-type=module", "-e", js], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got[:2] == [512, 0] and got[3:] == [0, 0, 0], got
    assert got[2] == ("attnBlock 512: the attention's partials of 16 key blocks (seq_len 8192, 64 rows) take 21233664 "
                      "bytes, more than the storage binding limit 21233663; use a larger attnBlock or a smaller seq_len")


def test_attention_key_blocks_rejected(micro_paths):
    """The key blocks' kernels compile at the first model that runs them: where the implementation rejects them (here
    the attention's BLOCKS variant served broken), 'auto' loads the model without blocks (its answers the engine's
    without them, bitwise) and a number given refuses the load, naming the option."""
    import copy

    from exactspec.formats import describe

    path = micro_paths["Q4_1"]
    d = copy.deepcopy(describe(path))
    d["config"]["seq_len"] = 1024
    toks = [(5 + 7 * i) % d["config"]["vocab_size"] for i in range(530)]
    ops = [{"op": "forward", "tokens": toks[:520], "start_pos": 0, "n_out": 3},
           {"op": "forward", "tokens": toks[520:530], "start_pos": 520, "n_out": 10}]
    opts = {"fuse": True, "attnBlock": "auto"}
    info, outs = run_engine(path, d, ops, emulate_sg=True, engine_opts=opts, break_shader="attention:BLOCKS")
    assert [r.get("error") for r in info["results"]] == [None, None]
    assert [r["far_chunks"] for r in info["results"]] == [0, 0]
    assert info["layers"]["far"] is None and not info["layers"]["block_kernels"], info["layers"]
    info0, outs0 = run_engine(path, d, ops, emulate_sg=True, engine_opts={"fuse": True, "attnBlock": 0})
    assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(outs, outs0)) and len(outs) == 2
    with pytest.raises(RuntimeError, match="attnBlock 512: the key blocks' kernels are unavailable"):
        run_engine(path, d, ops, emulate_sg=True, engine_opts={"fuse": True, "attnBlock": 512}, break_shader="attention:BLOCKS")


def test_attention_key_blocks_past_the_binding_limit():
    """SmolLM2 at its full seq_len (8,192) in blocks of 16, chunks of 512 rows: 512 blocks of partials would take
    5.4 GB, more than a storage binding holds over Vulkan (a 32-bit range) and on llvmpipe (at the default 64 rows,
    680 MB, which an H100's binding holds: bench/h200/results/2026-12-07e call 4); the load is refused, naming the
    option and what to change."""
    from exactspec.formats import describe

    with pytest.raises(RuntimeError, match="attnBlock 16: the attention's partials of 512 key blocks .* more than the "
                                           "storage binding limit .*; use a larger attnBlock or a smaller seq_len"):
        run_engine(CHAMPION, describe(CHAMPION), [], emulate_sg=True,
                   engine_opts={"fuse": True, "attnBlock": 16, "maxRows": 512})


MIXED_ENGINES = {"fused": {"fuse": True, "fuseSlice": 32, "fuseTouch": True},
                 "qkv_attn": {"fuse": True, "fuseSlice": 32, "fuseQkvAttn": True, "attnSplit": 2, "fuseTouch": True},
                 "attn": {"fuse": "attn"}, "plain": {"fuse": False}}


@pytest.mark.parametrize("types", [("F16", "Q4_1", "Q8_0", "Q4_0"), ("Q8_0", "F32", "Q4_1", "F16")],
                         ids=lambda t: "-".join(t))
@pytest.mark.parametrize("engine", list(MIXED_ENGINES))
def test_mixed_weight_types_and_odd_shapes(tmp_path, types, engine):
    """Every weight group in its own type (W_qkv, W_o, gate/up, down), head_dim 48 (a Q4 / Q8_0 block holds two heads'
    columns) and 5 FFN slices of 32: batch invariance and parity on every engine variant (fused with early loads,
    fuseQkvAttn, fuse 'attn', plain). fuseQkvAttn once took W_o's unit range by W_qkv's type: every one-row pass of
    ("F16", "Q4_1", ...) differed from the one-shot prefill."""
    from exactspec.micro import micro_config, write_micro_gguf

    cfg = micro_config(dim=96, hidden_dim=160, n_heads=2, n_kv_heads=1, head_dim=48)
    groups = {("attn_q", "attn_k", "attn_v"): types[0], ("attn_output",): types[1], ("ffn_gate", "ffn_up"): types[2],
              ("ffn_down",): types[3]}
    wtypes = {f"blk.{i}.{n}.weight": ty for i in range(cfg.n_layers) for names, ty in groups.items() for n in names}
    path = tmp_path / "micro-mixed.gguf"
    write_micro_gguf(path, cfg, seed=5, types=wtypes)
    check_engine(path, n=12, emulate_sg=True, engine_opts=MIXED_ENGINES[engine], ks=(1, 4), chunks=(3,))


def test_tile_policy_refusals(micro_paths):
    from exactspec.formats import describe

    host = set(json.loads(os.environ.get("EXACTSPEC_ENGINE_OPTS") or "{}"))   # options a GPU host's run sets for every engine

    path = micro_paths["Q4_1"]
    d = describe(path)
    for kw, msg in [({"engine_opts": {"rowTiles": ["qkv"], "subgroups": False}}, "rowTiles needs the subgroup matmul"),
                    ({"emulate_sg": True, "engine_opts": {"rowTiles": ["attention"]}}, "rowTiles .* must be 'all' or"),
                    ({"emulate_sg": True, "engine_opts": {"attnSplit": 0}}, "attnSplit 0 must be"),
                    ({"emulate_sg": True, "engine_opts": {"attnRowsZ": "chains"}}, "attnRowsZ .chains. must be true, false or 'all'"),
                    ({"emulate_sg": True, "engine_opts": {"tile8Rows": 4}}, "tile8Rows 4 must be an integer >= 5"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "fuseQkvPairs": 0}}, "fuseQkvPairs 0 must be in 1..64"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "fuseQkvAttn": "yes"}}, "fuseQkvAttn .* must be true or false"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "lightDown": 1}}, "lightDown 1 must be true or false"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "qkvRowsMin": 1}}, "qkvRowsMin 1 must be an integer >= 2"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "qkvRowsDense": 1}}, "qkvRowsDense 1 must be true or false"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "qkvRowsMin": 4, "qkvRowsMax": 3}},
                     "qkvRowsMax 3 must be null or an integer >= qkvRowsMin .4."),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "fuseTouch": ["ffn"]}}, "fuseTouch .* must be true, false or a list of qkv"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": "attn", "fuseQkvAttn": True}}, "fuseQkvAttn needs fuse true"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "headStage": True}}, "headStage needs fuse true and headSum"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "fuseQkvAttn": True, "fuseQkvAttnWg": 64, "attnWg": 128}},
                     "fuseQkvAttnWg 64 must be at least attnWg 128"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "attnBlock": 24}}, "attnBlock 24 must be 'auto', 0 .off. or a power of two >= 16"),
                    ({"engine_opts": {"contSplits": -1}}, "contSplits -1 must be an integer >= 0"),
                    ({"engine_opts": {"contSplitsMaxPasses": 0}}, "contSplitsMaxPasses 0 must be an integer >= 1"),
                    ({"engine_opts": {"preKeep": -1}}, "preKeep -1 must be an integer >= 0"),
                    ({"engine_opts": {"preFirst": 1}}, "preFirst 1 must be true or false"),
                    ({"engine_opts": {"preDefer": "yes"}}, "preDefer .yes. must be true or false"),
                    ({"engine_opts": {"chainStepDirect": "yes"}}, "chainStepDirect .yes. must be true or false"),
                    ({"engine_opts": {"contSplitsFresh": 1.5}}, "contSplitsFresh 1.5 must be an integer >= 0"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "attnBlock": 8}}, "attnBlock 8 must be 'auto', 0"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": "attn", "attnBlock": 16}}, "attnBlock needs fuse true without fuseQkvAttn"),
                    ({"emulate_sg": True, "engine_opts": {"fuse": True, "fuseQkvAttn": True, "attnBlock": 16}},
                     "attnBlock needs fuse true without fuseQkvAttn")]:
        if set(kw.get("engine_opts", {})) & host:
            continue   # the host's EXACTSPEC_ENGINE_OPTS wins over this case's option: nothing to refuse there
        with pytest.raises(RuntimeError, match=msg):
            run_engine(path, d, [], **kw)


@pytest.mark.parametrize("kw", [{}, {"emulate_sg": True, "engine_opts": {"fuse": True}},
                                {"emulate_sg": True, "engine_opts": {"fuse": True, "headSum": True}},
                                {"emulate_sg": True, "engine_opts": {"fuse": "attn"}, "max_rows": 3}],
                         ids=["plain", "fused", "fused_head_sum", "fused_attn_chunks3"])
def test_features_kept_by_position(micro_paths, kw):
    """loadModel(..., {features: true}): the final hidden state (residual after the last layer, before the output
    norm) of every position the model computes, kept by absolute position: within 1e-3 of the reference's, the same
    bits whether positions came in one prefill or one at a time, and truncate + a new branch overwrite them."""
    from exactspec.formats import describe
    from exactspec.reference import ReferenceModel

    path = micro_paths["Q8_0"]
    d = describe(path)
    dim = d["config"]["dim"]
    toks = [int(t) for t in np.random.default_rng(8).integers(0, d["config"]["vocab_size"], 11)]
    ops = [{"op": "forward", "tokens": toks, "start_pos": 0, "n_out": 1},
           {"op": "read_features", "start_pos": 0, "n": 11}, {"op": "truncate", "n": 0}]
    ops += [{"op": "forward", "tokens": [t], "start_pos": i} for i, t in enumerate(toks)]
    ops += [{"op": "read_features", "start_pos": 0, "n": 11}, {"op": "truncate", "n": 4},
            {"op": "forward", "tokens": toks[:2], "start_pos": 4}, {"op": "read_features", "start_pos": 3, "n": 3},
            {"op": "read_features", "start_pos": 5, "n": 2}]
    info, _ = run_engine(path, d, ops, features=True, **kw)
    res = [r for r in info["results"] if r["op"] == "read_features"]
    assert all("error" not in r for r in res[:3]) and "not all in 0..5" in res[3].get("error", ""), res   # 6 >= length
    prefill, single = (np.asarray(r["features"], np.float32).reshape(-1, dim) for r in res[:2])
    assert np.array_equal(prefill.view(np.uint32), single.view(np.uint32))
    _, feats = ReferenceModel.from_file(path).forward(toks, 0, features=True)    # (11, dim)
    assert float(np.abs(feats - prefill).max()) <= 1e-3 * max(1.0, float(np.abs(feats).max()))
    branch = np.asarray(res[2]["features"], np.float32).reshape(-1, dim)          # positions 3, 4, 5
    _, fb = ReferenceModel.from_file(path).forward(toks[:4] + toks[:2], 0, features=True)
    assert np.array_equal(branch[0].view(np.uint32), prefill[3].view(np.uint32))
    assert float(np.abs(fb[4:] - branch[1:]).max()) <= 1e-3 * max(1.0, float(np.abs(fb).max()))
