"""The WGSL kernels the engine compiles are today's: token for token, and bit for bit in their results (issue 9).

Why this is pinned: bitwise batch invariance needs every row to run the same instruction sequence, and the H200
speed (README, "WebGPU engine") was tuned on these exact kernels. Since the shared routines moved to shaders/lib/
and every kernel file is expanded by app/gpu/wgsl.js before it is compiled, two checks hold that nothing changed:

1. Text (`test_expanded_text_is_pinned`): for each kernel file and variant the engine compiles (kernels.js
   `kernelFiles`: matmul, matmul_sg, matmul_sg + PRO, attention, attention + O_PROJ, ffn_sg, embed, pick, residual),
   the expansion's WGSL tokens (comments and whitespace dropped) hash to the sha256 pinned in
   tests/data/wgsl_golden.json. The pins were taken from the kernel files of revision 30c877a (before the split:
   matmul_sg + PRO was matmul_sg_pro.wgsl, attention + O_PROJ was attn_o.wgsl; the JSON names each one's file), so
   today's expansion IS that text: the same program for every override constant the engine specialises it with
   (WTYPE per weight type, TILE 1/4/8, KSPLIT, MODE, NORM, LANES, PAIRS, NPART, OUT/FEATURES, ...), hence the same
   compiled code and the same speed. Hashes rather than the old files keep the test free of git history; where the
   history is there, a mismatch prints the token diff against the pinned revision's file. A deliberate kernel change
   re-pins with `python tests/gpu/test_wgsl_golden.py --update` (and is measured on the H200 again): on 2026-12-04
   the latency changes of attention.wgsl (HD4, two key groups a trip) and ffn_sg.wgsl (two down rows a trip)
   re-pinned every kernel at e2a88be, the revision before them, so the results tests below now compare with
   e2a88be's files (themselves bitwise equal to 30c877a's).
2. Results (`test_results_bitwise_equal_to_pinned_revision`): the engine under Dawn (llvmpipe here) runs the same
   forwards (9, 3 and 1 rows: tiles 8, 4, 1), batched steps (greedy and coupled picks) and kept features, once with
   shaders/ and once with the pinned revision's files (git archive), and every logits row, pick and feature must be
   bitwise equal. Every weight type (F32, F16, BF16, Q4_0, Q4_1, Q8_0) runs the CPU path (matmul.wgsl, LANES = 1,
   attention, embed, pick, residual), the GPU lanes path (matmul.wgsl, LANES = 32, tiles 1/4/8) and fuse true
   (one-lane subgroups emulated: matmul_sg, matmul_sg PRO for qkv and the head, attention O_PROJ, ffn_sg, residual
   with partials); matmul_sg with KSPLIT 2 and fuse 'attn' (PRO for gate/up) run on two types each. Skipped, saying
   so, where the clone has no history.

The draft head's kernels (kernels.js `headKernelFiles`: head_in, head_out, head_logits, vocab_mask, attention +
WINDOW) are pinned the same way, from revision 10dc6b9 (their pins name it: before they took the shared fragments):
the first four expand to that revision's files token for token; attention + WINDOW replaced head_attention.wgsl,
a copy of attention.wgsl with the head's window, and reads the same keys through other index arithmetic (the
window's first key moved into koff and voff), so its pin is of today's expansion (`tokens_of: "expansion"`) and
`test_head_results_bitwise_equal_to_pinned_revision` runs a windowed head (its vocabulary subset by head_logits on
every weight type of the champion's embedding, 1 and 8 lanes; the masked LM head with vocab_mask; the fused
champion) with shaders/ and with that revision's files: every logits row bitwise equal.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dawn_harness import ENV, probe, run_engine
from test_gpu_engine import micro_paths, write_bf16_pair  # noqa: F401 (micro_paths: a fixture used here)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "wgsl_golden.json"
EXPAND = ROOT / "tests" / "gpu" / "expand.mjs"

TOKEN = re.compile(r"0[xX][0-9a-fA-F]*\.?[0-9a-fA-F]*(?:[pP][+-]?\d+)?[fhiu]?|\d+\.?\d*(?:[eE][+-]?\d+)?[fhiu]?"
                   r"|\.\d+(?:[eE][+-]?\d+)?[fh]?|[A-Za-z_]\w*|->|>>=|<<=|>>|<<|&&|\|\||[-+*/%&|^<>=!]=|\+\+|--|\S")


def wgsl_tokens(src: str) -> list[str]:
    """WGSL's tokens, comments (line and nested block) and whitespace dropped."""
    out, i, depth = [], 0, 0
    while i < len(src):
        two = src[i:i + 2]
        if depth == 0 and two == "//":
            j = src.find("\n", i)
            i = len(src) if j < 0 else j
            out.append(" ")
        elif two == "/*":
            depth, i = depth + 1, i + 2
        elif depth and two == "*/":
            depth, i = depth - 1, i + 2
            out.append(" ")
        else:
            if depth == 0:
                out.append(src[i])
            i += 1
    return TOKEN.findall("".join(out))


def token_sha(src: str) -> str:
    return hashlib.sha256(" ".join(wgsl_tokens(src)).encode()).hexdigest()


def node_json(*args: str) -> list:
    r = subprocess.run(["node", str(EXPAND), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def expand(variants: list, folder: Path | None = None) -> list[dict]:
    return node_json("--json", json.dumps(variants), *([str(folder)] if folder else []))


def golden() -> dict:
    return json.loads(GOLDEN.read_text())


def variant_id(v) -> str:
    return v["file"] + "".join(f"+{k}" for k in sorted(v["defines"]))


def pin_revision(pin: dict) -> str:
    """The revision a pin was taken from (its own, else the file's)."""
    return pin.get("revision", golden()["revision"])


def git_show(rev: str, path: str) -> str | None:
    try:
        r = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


# ---- 1. text ---------------------------------------------------------------------------------------------------

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


@needs_node
def test_every_engine_variant_is_pinned_and_every_fragment_used():
    """The pins cover every (file, defines) the engine compiles, and every shaders/lib/ fragment is part of one."""
    pins = {variant_id(v) for v in golden()["kernels"]}
    used = node_json("--kernels")
    ids = {variant_id({"file": f, "defines": d}) for f, d in used}
    assert ids <= pins, f"kernel variants without a pin (re-pin: python tests/gpu/test_wgsl_golden.py --update): {sorted(ids - pins)}"
    origins = set()
    for r in expand(used):
        assert "error" not in r, r
        origins |= {o.split(":")[0] for o in r["origin"]}
    frags = {f"lib/{p.name}" for p in (ROOT / "shaders" / "lib").glob("*.wgsl")}
    assert frags <= origins, f"fragments no kernel includes: {sorted(frags - origins)}"


@needs_node
def test_every_kernel_file_expands():
    """Every kernel file (shaders/*.wgsl, any new one too) expands with its default variant: directives well formed."""
    files = sorted(p.stem for p in (ROOT / "shaders").glob("*.wgsl"))
    for r in expand([[f, {}] for f in files]):
        assert "error" not in r, r
        assert "// #" not in r["text"] and "${" not in r["text"], r["name"]


@needs_node
@pytest.mark.parametrize("pin", golden()["kernels"], ids=variant_id)
def test_expanded_text_is_pinned(pin):
    (r,) = expand([[pin["file"], pin["defines"]]])
    assert "error" not in r, r
    toks = wgsl_tokens(r["text"])
    if hashlib.sha256(" ".join(toks).encode()).hexdigest() == pin["sha256"]:
        return
    rev = pin_revision(pin)
    was = git_show(rev, pin["was"])
    detail = "(no git history here to show the difference)"
    if was is not None:   # (tokens_of "expansion": the pinned text is not `was`'s, so the diff shows more than the change)
        diff = difflib.unified_diff(wgsl_tokens(was), toks, pin["was"] + "@" + rev, "expanded", n=6, lineterm="")
        detail = " ".join(list(diff)[:200])
    pytest.fail(f"{variant_id(pin)}: the expanded tokens are not the pinned kernel's ({len(toks)} vs {pin['tokens']} "
                f"tokens): {detail}")


# ---- the expander's directives ---------------------------------------------------------------------------------

def test_expander_directives(tmp_path):
    """#include with arguments, #param defaults and refusals, #let lists, #if/#else on defines, #for with
    ${} terms, and the origin of every output line."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "frag.wgsl").write_text(
        "// #param FN = f\n// #param N\n// #let NAMES = a b c\nfn ${FN}() {\n// #for I in 1..N-1\n"
        "  let ${NAMES[I]}${I} = ${I}u + ${N+2}u;\n// #end\n}\n")
    (tmp_path / "k.wgsl").write_text(
        "// #if PRO\nconst P = 1;\n// #else\nconst P = 0;\n// #endif\n// #if MODE == 2\nconst M = 2;\n// #endif\n"
        "// #include frag N=3\n// #include frag FN=g N=2\n")
    (tmp_path / "bad_param.wgsl").write_text("// #include frag\n")
    (tmp_path / "bad_name.wgsl").write_text("let x = ${Y};\n")
    (tmp_path / "bad_if.wgsl").write_text("// #if A\n")
    (tmp_path / "bad_dir.wgsl").write_text("// #define A 1\n")
    res = expand([["k", {"PRO": True, "MODE": 2}], ["k", {}], ["bad_param", {}], ["bad_name", {}], ["bad_if", {}],
                  ["bad_dir", {}]], tmp_path)
    assert res[0]["text"].split() == "const P = 1; const M = 2; fn f() { let b1 = 1u + 5u; } fn g() { }".split()
    lines = res[0]["text"].split("\n")
    assert res[0]["origin"][0] == "k.wgsl:2" and res[0]["origin"][lines.index("  let b1 = 1u + 5u;")] == "lib/frag.wgsl:6"
    assert "const P = 0;" in res[1]["text"] and "const M" not in res[1]["text"]
    assert "needs N" in res[2]["error"] and "bad_param.wgsl:1" in res[2]["error"]
    assert "Y is not set" in res[3]["error"]
    assert "never closed" in res[4]["error"]
    assert "unknown directive #define" in res[5]["error"]


# ---- 2. results ------------------------------------------------------------------------------------------------

_why = probe()
VARIANTS = {"cpu": {}, "lanes32": {"lanes": 32}, "sg_ksplit2": {"emulate_sg": True, "ksplit": 2},
            "fused": {"emulate_sg": True, "engine_opts": {"fuse": True, "fuseSlice": 32}},
            "fused_attn": {"emulate_sg": True, "engine_opts": {"fuse": "attn"}}}
TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0"]
# every weight type through every kernel that decodes weights (cpu: matmul LANES 1, embed; lanes32: matmul's tree path;
# fused: matmul_sg, PRO, attention O_PROJ, ffn_sg gate/up and down); the paths that do not depend on the weight type
# (KSPLIT's workgroup sums, PRO's gate/up epilogue) on two types each
CASES = [(ty, v) for ty in TYPES for v in ("cpu", "lanes32", "fused")] + [
    ("Q4_1", "sg_ksplit2"), ("Q8_0", "sg_ksplit2"), ("Q4_1", "fused_attn"), ("BF16", "fused_attn")]


@pytest.fixture(scope="module")
def pinned_shaders(tmp_path_factory):
    """{revision: that revision's shaders/ as a folder the expander reads} for every revision a pin names. Where a
    variant's text was a file of its own then (revision 30c877a: matmul_sg + PRO was matmul_sg_pro.wgsl, attention +
    O_PROJ was attn_o.wgsl; 10dc6b9: attention + WINDOW was head_attention.wgsl), the file the engine now asks for
    holds both under #if DEFINE."""
    g = golden()
    out = {}
    for rev in sorted({pin_revision(p) for p in g["kernels"]}):
        d = tmp_path_factory.mktemp(f"pinned_{rev}")
        try:
            arch = subprocess.run(["git", "archive", rev, "shaders"], cwd=ROOT, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            arch = None
            print(e)
        if arch is None or arch.returncode != 0:
            pytest.skip(f"no git history of revision {rev} in this clone: results not compared")
        subprocess.run(["tar", "-x", "-C", str(d)], input=arch.stdout, check=True)
        d = d / "shaders"
        for f in (ROOT / "shaders").glob("*.wgsl"):      # kernels newer than the revision (chain.wgsl): today's
            if not (d / f.name).exists():
                shutil.copy(f, d / f.name)
        for pin in (p for p in g["kernels"] if pin_revision(p) == rev):
            was = d / Path(pin["was"]).relative_to("shaders")
            if was.name == f"{pin['file']}.wgsl":
                continue
            (define,) = pin["defines"]
            if pin.get("tokens_of") != "expansion":
                assert token_sha(was.read_text()) == pin["sha256"], f"{pin['was']}@{rev} is not the pinned text"
            plain = d / f"{pin['file']}.wgsl"
            plain.write_text(f"// #if {define}\n{was.read_text()}\n// #else\n{plain.read_text()}\n// #endif\n")
        out[rev] = d
    return out


@pytest.fixture(scope="module")
def typed_models(micro_paths, tmp_path_factory):
    """A micro model of every weight type: test_gpu_engine's, and BF16 written from the F32 one as it does."""
    from exactspec.formats import describe

    out = {ty: (p, describe(p)) for ty, p in micro_paths.items()}
    td = tmp_path_factory.mktemp("bf16")
    out["BF16"] = (td / "bf16.gguf", write_bf16_pair(micro_paths["F32"], td / "ref.gguf", td / "bf16.gguf"))
    return out


@pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")
@pytest.mark.parametrize("ty,variant", CASES)
def test_results_bitwise_equal_to_pinned_revision(pinned_shaders, typed_models, ty, variant):
    path, d = typed_models[ty]
    vocab = d["config"]["vocab_size"]
    toks = [int(t) for t in np.random.default_rng(11).integers(0, vocab, 13)]
    ops = [{"op": "forward", "tokens": toks[:9], "start_pos": 0}, {"op": "forward", "tokens": toks[9:12], "start_pos": 9},
           {"op": "forward", "tokens": toks[12:], "start_pos": 12},
           {"op": "decode_ahead", "token": toks[0], "start_pos": 13, "n": 3, "pick": {"temperature": 0, "seed": 0}, "rows": True},
           {"op": "decode_ahead", "token": toks[1], "start_pos": 16, "n": 2, "pick": {"temperature": 0.8, "seed": 5}, "rows": True},
           {"op": "read_features", "start_pos": 0, "n": 18}]
    a_info, a = run_engine(path, d, ops, features=True, **VARIANTS[variant])
    b_info, b = run_engine(path, d, ops, features=True, shader_dir=pinned_shaders[golden()["revision"]],
                           **VARIANTS[variant])
    for r in a_info["results"]:
        assert "error" not in r, r
    assert len(a) == len(b) == 5
    for i, (x, y) in enumerate(zip(a, b)):
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"output {i} ({ops[i]['op']}) differs"
    for ra, rb in zip(a_info["results"], b_info["results"]):
        assert ra.get("ids") == rb.get("ids") and ra.get("features") == rb.get("features"), ra["op"]
        assert ra.get("dispatches") == rb.get("dispatches")


@pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")
@pytest.mark.parametrize("variant,attn_wg", [("cpu", 64), ("fused", 64), ("fused", 256), ("fused_split3", 256),
                                            ("fused_dim128_wg48", 64)])
def test_long_positions_bitwise_equal_to_pinned_revision(pinned_shaders, tmp_path_factory, variant, attn_wg):
    """Attention far past the short positions above: up to 560 keys, so every path of attention.wgsl's value loop
    (two groups of four keys a trip, one group, the tail) runs with S = 16 and S = 64 key slices (workgroups of 64
    and 256, head_dim 16), prefill chunks, batched steps and the O projection split over 3 workgroups; and ffn_sg's
    down projection with two rows a trip where both exist and where the second is past dim (dim 128, workgroups of
    48): every row bitwise equal to the pinned revision's kernels."""
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    path = tmp_path_factory.mktemp("long") / "long.gguf"
    cfg = dict(dim=128, hidden_dim=256) if "dim128" in variant else {}
    write_micro_gguf(path, micro_config(seq_len=640, **cfg), seed=4, tensor_type="Q4_1")
    d = describe(path)
    toks = [int(t) for t in np.random.default_rng(12).integers(0, d["config"]["vocab_size"], 560)]
    ops = [{"op": "forward", "tokens": toks[:300], "start_pos": 0, "n_out": 4},
           {"op": "forward", "tokens": toks[300:501], "start_pos": 300, "n_out": 8},
           {"op": "decode_ahead", "token": toks[501], "start_pos": 501, "n": 5, "pick": {"temperature": 0, "seed": 0}, "rows": True},
           {"op": "forward", "tokens": toks[506:560], "start_pos": 506}]
    kw = {**VARIANTS[variant.split("_")[0]]}
    kw["engine_opts"] = {**kw.get("engine_opts", {}), "attnWg": attn_wg, **({"attnSplit": 3} if "split3" in variant else {}),
                         **({"fuseWg": 48} if "wg48" in variant else {})}
    a_info, a = run_engine(path, d, ops, **kw)
    b_info, b = run_engine(path, d, ops, shader_dir=pinned_shaders[golden()["revision"]], **kw)
    assert all("error" not in r for r in a_info["results"]), a_info["results"]
    assert len(a) == len(b) == 4
    for i, (x, y) in enumerate(zip(a, b)):
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"output {i} ({ops[i]['op']}) differs"
    assert a_info["results"][2]["ids"] == b_info["results"][2]["ids"]


# the draft head's kernels: a windowed head with a vocabulary subset on a champion of each weight type (head_logits reads
# the champion's embedding as stored: every WTYPE, one lane and eight), the masked LM head (vocab_mask), the fused
# champion; the head's rows over the window's edge (13 positions, window 5), past the champion, one by one
HEAD_VARIANTS = {"head_in", "head_out", "head_logits", "vocab_mask", "attention+WINDOW"}   # kernels.js headKernelFiles
HEAD_CASES = [(ty, "cpu", {}) for ty in TYPES] + [
    ("Q8_0", "lanes32", {"headLanes": 8}), ("Q4_1", "lanes32", {"headLanes": 8}),
    ("F16", "cpu", {"headVocab": "masked"}), ("Q4_0", "fused", {})]


@pytest.fixture(scope="module")
def head_file(tmp_path_factory):
    """A head for the typed micro models (one config): window 5, every third token id, Q8_0."""
    from exactspec.drafters.head import HeadConfig, random_head_weights, write_head_gguf
    from exactspec.formats import describe
    from exactspec.micro import micro_config

    cfg = micro_config()
    hc = HeadConfig.for_champion(cfg, window=5)
    p = tmp_path_factory.mktemp("head") / "head.gguf"
    write_head_gguf(p, hc, random_head_weights(hc, 4, feature_scale=2.0), tensor_type="Q8_0",
                    vocab_ids=np.arange(1, cfg.vocab_size, 3))
    return p, describe(p)


@pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")
@pytest.mark.parametrize("ty,variant,opts", HEAD_CASES,
                         ids=[f"{t}-{v}" + "".join(f"-{x}" for x in o.values()) for t, v, o in HEAD_CASES])
def test_head_results_bitwise_equal_to_pinned_revision(pinned_shaders, typed_models, head_file, ty, variant, opts):
    (rev,) = {pin_revision(p) for p in golden()["kernels"] if variant_id(p) in HEAD_VARIANTS}
    path, d = typed_models[ty]
    vocab = d["config"]["vocab_size"]
    T = [int(t) for t in np.random.default_rng(13).integers(0, vocab, 16)]
    C, P = T[:13], T[13:]
    ops = [{"op": "forward", "tokens": C, "start_pos": 0, "n_out": 1},
           {"op": "forward", "tokens": C[:9], "start_pos": 0, "n_out": 9, "on": "head"},
           {"op": "forward", "tokens": C[9:], "start_pos": 9, "n_out": 4, "on": "head"},
           {"op": "forward", "tokens": P, "start_pos": 13, "n_out": 3, "on": "head"},
           {"op": "truncate", "n": 13, "on": "head"},
           *[{"op": "forward", "tokens": [t], "start_pos": 13 + i, "n_out": 1, "on": "head"} for i, t in enumerate(P)]]
    head = (*head_file, opts)
    a_info, a = run_engine(path, d, ops, head=head, **VARIANTS[variant])
    b_info, b = run_engine(path, d, ops, head=head, shader_dir=pinned_shaders[rev], **VARIANTS[variant])
    for r in a_info["results"] + b_info["results"]:
        assert "error" not in r, r
    assert len(a) == len(b) == 7
    for i, (x, y) in enumerate(zip(a, b)):
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"output {i} differs"
    assert np.isinf(a[1][:, 0]).all() and np.isfinite(a[1][:, 1]).all()   # the subset: -inf outside it
    assert [r.get("dispatches") for r in a_info["results"]] == [r.get("dispatches") for r in b_info["results"]]


# ---- re-pinning --------------------------------------------------------------------------------------------------

def update() -> None:
    """Pin the current expansions (after a deliberate kernel change; measure it on the H200 again)."""
    used = node_json("--kernels")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    kernels = []
    for r in expand(used):
        toks = wgsl_tokens(r["text"])
        kernels.append({"file": r["name"], "defines": r["defines"], "was": f"shaders/{r['name']}.wgsl",
                        "tokens": len(toks), "sha256": hashlib.sha256(" ".join(toks).encode()).hexdigest()})
    GOLDEN.write_text(json.dumps({"revision": rev, "note": "re-pinned from the expansions of this revision",
                                  "kernels": kernels}, indent=1) + "\n")
    print(f"pinned {len(kernels)} kernel variants in {GOLDEN}")


if __name__ == "__main__" and "--update" in sys.argv:
    update()
