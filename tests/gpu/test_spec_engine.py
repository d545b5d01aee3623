"""Greedy speculation end to end on the WebGPU engine (Node + Dawn): champion and draft both on the engine,
the speculative tokens equal plain decoding's (bench/gpu/spec_bench.mjs, the harness of `bench gpu_spec`)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dawn_harness import BACKEND, ENV, ROOT, probe

sys.path.insert(0, str(ROOT / "py"))
from bench.gpu_spec import run_spec  # noqa: E402

_why = probe()


@pytest.mark.skipif(_why is not None, reason=f"Dawn engine cannot run here: {_why}")
def test_speculation_on_engine_equals_plain(tmp_path: Path):
    from exactspec.micro import micro_config, write_micro_gguf
    champ, draft = tmp_path / "champ.gguf", tmp_path / "draft.gguf"
    write_micro_gguf(champ, micro_config(), seed=1, tensor_type="Q4_1")
    write_micro_gguf(draft, micro_config(n_layers=1), seed=7, tensor_type="Q8_0")
    prompt = [1, 20, 30, 40, 50]
    out = run_spec(champ, draft, prompt, 16, [1, 3, 5], BACKEND, env=ENV)
    assert len(out["plain"]["tokens"]) == 16
    for k, s in out["spec"].items():
        assert s["identical"], f"k={k}: speculation changed the tokens"
        assert s["draft_passes"] > 0 and s["target_passes"] <= 16
    # the champion drafting for itself: every proposal accepted, tau = k + 1 while whole rounds fit
    self_out = run_spec(champ, champ, prompt, 16, [3], BACKEND, env=ENV)
    s = self_out["spec"]["3"]
    assert s["identical"] and s["target_passes"] == 4 and s["tau"] == pytest.approx(4.0)


@pytest.mark.skipif(_why is not None, reason=f"Dawn engine cannot run here: {_why}")
def test_speculation_on_fused_engine_equals_plain(tmp_path: Path):
    """The same with the fused engine (fuse true, one-lane subgroups emulated): speculation keeps the tokens, and
    they are plain decoding's on the unfused subgroup engine too (the models' top-1 does not move)."""
    from exactspec.micro import micro_config, write_micro_gguf
    champ, draft = tmp_path / "champ.gguf", tmp_path / "draft.gguf"
    write_micro_gguf(champ, micro_config(), seed=1, tensor_type="Q4_1")
    write_micro_gguf(draft, micro_config(n_layers=1), seed=7, tensor_type="Q8_0")
    prompt = [1, 20, 30, 40, 50]
    env = {**ENV, "EMULATE_SG": "1"}
    fused = run_spec(champ, draft, prompt, 12, [2, 4], BACKEND, env=env, engine_opts={"fuse": True, "fuseSlice": 32})
    assert fused["adapter"]["kernels"]["fuse"]["fuse"] is True
    for k, s in fused["spec"].items():
        assert s["identical"], f"k={k}: speculation on the fused engine changed the tokens"
    plain = run_spec(champ, draft, prompt, 12, [1], BACKEND, env=env)
    assert plain["adapter"]["kernels"]["fuse"] is False
    assert plain["plain"]["tokens"] == fused["plain"]["tokens"]
