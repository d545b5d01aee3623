"""The page's worker core under Node (bench/product/node_host.mjs: Pyodide, the Python decode loop, bridge.py,
app/gpu/engine.js on Dawn, or the CPU fallback), the host of `bench product`: its answers equal the CLI's
(`python -m exactspec generate --json`, the CPython oracle) with speculation off and on (n-gram and draft model),
greedy and coupled-sampled; the champion drafting for itself accepts every proposal; the fused engine (one-lane
subgroups emulated on llvmpipe) gives the same answers."""
from __future__ import annotations

import io
import json
import shutil
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from dawn_harness import BACKEND, ENV, ROOT, probe

sys.path.insert(0, str(ROOT / "py"))
from bench.product import NodeHost  # noqa: E402


def _pyodide_missing() -> str | None:
    npm = ROOT / "node_modules" / "pyodide"
    if not (npm / "pyodide.asm.wasm").exists():
        return "npm pyodide is not installed (run `python build.py setup`)"
    version = json.loads((npm / "package.json").read_text())["version"]
    if not list((ROOT / "static" / "pyodide" / version).glob("numpy-*.whl")):
        return f"static/pyodide/{version}/ has no numpy wheel (run `python build.py setup`)"
    return None


_why_py = _pyodide_missing()
_why = probe() or _why_py
pytestmark = pytest.mark.skipif(_why_py is not None, reason=f"no Pyodide runtime here: {_why_py}")
needs_dawn = pytest.mark.skipif(_why is not None, reason=f"Dawn engine cannot run here: {_why}")
PROMPTS = ["Tell me about the sea.", "Repeat after me: red, green, blue, red, green, blue, red, green"]
SAMPLED = {"temperature": 0.9, "top_p": 0.95, "seed": 7}
N = 16


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from exactspec.micro import micro_config, write_micro_gguf
    d = tmp_path_factory.mktemp("node_host")
    champ, draft = d / "micro-chat.gguf", d / "micro-draft.gguf"
    write_micro_gguf(champ, micro_config(), seed=1, tensor_type="Q4_1")
    write_micro_gguf(draft, micro_config(n_layers=1), seed=7, tensor_type="Q8_0")
    return champ, draft


def cli(model: Path, prompt: str, **kw) -> dict:
    """The CLI's answer (exactspec.__main__, in this process)."""
    from exactspec.__main__ import main
    argv = ["generate", "--model", str(model), "--prompt", prompt, "--chat", "--json", "--max-new-tokens", str(N),
            "--drafter", "none"]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}"] + ([] if v is None else [str(v)])   # None: a flag
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def same_answer(got: dict, want: dict) -> bool:
    """Same tokens, and the same text where no special token is in it (the CLI prints specials, the page not)."""
    from exactspec.micro import SPECIAL_TOKENS
    plain = not set(want["token_ids"]) & set(range(len(SPECIAL_TOKENS)))
    return got["token_ids"] == want["token_ids"] and (got["text"] == want["text"] or not plain)


def check_host(host: NodeHost, champ: Path) -> None:
    for prompt in PROMPTS:
        for sampling in ({"temperature": 0}, SAMPLED):
            want = cli(champ, prompt, **sampling)
            base = {"prompt": prompt, "chat": True, "max_new_tokens": N, **sampling}
            alone = host.generate({**base, "drafter": "none"})
            assert same_answer(alone, want), (prompt, sampling)
            assert alone["stats"]["draft_passes"] == 0 and alone["stats"]["submissions"] >= 1
            for spec in ({"drafter": "ngram", "k": 3}, {"drafter": "model", "k": 2}, {"drafter": "model", "k": 4}):
                got = host.generate({**base, **spec, "adaptive": False})
                assert same_answer(got, want), (prompt, sampling, spec)
                if spec["drafter"] == "model":
                    assert got["stats"]["draft_passes"] > 0


@pytest.mark.parametrize("backend", [pytest.param(BACKEND, marks=needs_dawn), "cpu"])
def test_node_host_answers_equal_cli_with_and_without_speculation(models, backend):
    champ, draft = models
    host = NodeHost(backend, champ, draft, env=ENV)
    try:
        assert host.info["backend"] == ("cpu" if backend == "cpu" else "webgpu")
        loaded = {x["role"]: x["backend"] for s in host.info["stages"] if s["stage"] == "weights" for x in s["loaded"]}
        assert loaded == {"champion": host.info["backend"], "draft": host.info["backend"]}
        check_host(host, champ)
        # the pass timings of bench product come through the same models
        t = host.timings({"prompt": PROMPTS[0], "ks": [1, 3], "reps": 2, "drafters": ["ngram", "model"]})
        assert set(t["verify_ms"]) == {"1", "2", "3"} and t["forward_ms"]["median"] > 0
        assert set(t["draft_ms"]) == {"ngram", "model"} and t["position"] > 0
        assert t["chain_ms"] == {}          # (llvmpipe and the CPU fallback: no chains; on GPUs the test below)
        # after timing, answers still equal the oracle (the caches were rolled back to the prompt)
        check_host(host, champ)
    finally:
        host.close()


@needs_dawn
def test_node_host_times_the_ngram_chains_and_answers_the_same(models):
    """With the n-gram's chains offered as on GPUs (chainRounds 4; a CPU adapter's default is none): bench product's
    timings price a chain round at each k as the decode loop runs them (timing's chain_ms), and afterwards the
    engine's caches and chain state are back at the prompt: greedy answers made with chains equal the CLI's."""
    champ, draft = models
    host = NodeHost(BACKEND, champ, draft, env={**ENV, "EXACTSPEC_ENGINE_OPTS": '{"chainRounds": 4}'})
    try:
        t = host.timings({"prompt": PROMPTS[0], "ks": [1, 3], "reps": 2, "drafters": ["ngram"]})
        assert sorted(t["chain_ms"]) == ["1", "3"], t
        assert all(c["ms_per_round"]["median"] > 0 and c["rounds"] >= 4 and 0 <= c["proposals_per_round"] <= int(k)
                   for k, c in t["chain_ms"].items())
        want = cli(champ, PROMPTS[0], temperature=0)
        got = host.generate({"prompt": PROMPTS[0], "chat": True, "max_new_tokens": N, "temperature": 0,
                             "drafter": "ngram", "k": 3, "adaptive": False})
        assert same_answer(got, want) and got["stats"]["chain_rounds"] > 0, got["stats"]
    finally:
        host.close()


@needs_dawn
def test_node_host_self_draft_and_fused_engine(models, tmp_path):
    """The champion drafting for itself on the engine: every proposal accepted, tau = k + 1 while whole rounds fit;
    and the fused engine (EMULATE_SG=1: its kernels with one-lane subgroups on llvmpipe) answers as the CLI does."""
    champ, _ = models
    twin = tmp_path / "twin.gguf"
    shutil.copyfile(champ, twin)
    host = NodeHost(BACKEND, champ, twin, env=ENV)
    try:
        out = host.generate({"prompt": PROMPTS[0], "chat": True, "max_new_tokens": N, "temperature": 0,
                             "drafter": "model", "k": 3, "adaptive": False})
        s = out["stats"]
        assert s["target_passes"] == 4 and s["tau"] == pytest.approx(4.0) and s["acceptance_by_position"] == [1, 1, 1]
        assert out["token_ids"] == cli(champ, PROMPTS[0], temperature=0)["token_ids"]
    finally:
        host.close()
    host = NodeHost(BACKEND, champ, twin, env={**ENV, "EMULATE_SG": "1", "FUSE": "1"})
    try:
        assert host.info["adapter"]["kernels"]["fuse"]["fuse"] is True
        check_host(host, champ)
    finally:
        host.close()


@needs_dawn
def test_node_host_draft_head_on_the_engine(models, tmp_path):
    """A draft head loaded beside the draft model (its own slot) runs on the engine: answers identical to the CLI's
    champion alone, with the same passes and acceptances as the CLI's numpy head (greedy and coupled), and the
    pass timings report T_draft and the on-device round for the head."""
    from exactspec.drafters.head import HeadConfig, random_head_weights, write_head_gguf
    from exactspec.micro import micro_config
    from exactspec_train.data import sha256_file
    champ, draft = models
    head = tmp_path / "micro-head.gguf"
    hc = HeadConfig.for_champion(micro_config(), champion_sha256=sha256_file(champ), window=8)
    write_head_gguf(head, hc, random_head_weights(hc, 5), tensor_type="Q8_0", vocab_ids=list(range(0, 300, 2)))
    host = NodeHost(BACKEND, champ, draft, env=ENV, head=head)
    try:
        loaded = {x["role"]: x["backend"] for s in host.info["stages"] if s["stage"] == "weights" for x in s["loaded"]}
        assert loaded == {"champion": "webgpu", "draft": "webgpu", "head": "webgpu"}
        assert host.info["active"]["head"] == "micro-head" and host.info["active"]["draft"] == "micro-draft"
        for sampling in ({"temperature": 0}, SAMPLED):
            want = cli(champ, PROMPTS[1], **sampling)
            base = {"prompt": PROMPTS[1], "chat": True, "max_new_tokens": N, **sampling, "adaptive": False}
            for spec in ({"drafter": "head", "k": 3}, {"drafter": "model", "k": 2}, {"drafter": "head", "k": 1}):
                got = host.generate({**base, **spec})
                assert same_answer(got, want), (sampling, spec)
                if spec["drafter"] == "head":
                    ref = cli(champ, PROMPTS[1], **sampling, drafter="head", draft=head, k=spec["k"], no_adaptive=None)
                    for key in ("target_passes", "draft_passes", "accepted", "acceptance_by_position"):
                        assert got["stats"][key] == ref["stats"][key], (sampling, spec, key)
                    assert got["stats"]["submissions"] == got["stats"]["rounds"]   # one submission per round
        t = host.timings({"prompt": PROMPTS[0], "ks": [1, 3], "reps": 2, "drafters": ["model", "head"]})
        assert set(t["draft_ms"]) == {"model", "head"} and set(t["round_ms"]["head"]) == {"1", "3"}
        assert t["draft_ms"]["head"]["median"] > 0
    finally:
        host.close()
