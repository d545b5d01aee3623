"""The CLI (`python -m exactspec generate`) on micro-model GGUF files with a real byte-level BPE tokenizer."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exactspec.micro import micro_config, write_micro_gguf

ROOT = Path(__file__).resolve().parents[1]


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py"))
    return subprocess.run([sys.executable, "-m", "exactspec", "generate", *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    champ, draft, other = d / "champ.gguf", d / "draft.gguf", d / "other.gguf"
    write_micro_gguf(champ, micro_config(), seed=1, tensor_type="Q8_0")
    write_micro_gguf(draft, micro_config(n_layers=1), seed=2, tensor_type="F16")
    write_micro_gguf(other, micro_config(vocab_size=320), seed=3)
    return champ, draft, other


def test_cli_json_and_speculation_invariance(models):
    champ, draft, _ = models
    outs = []
    for extra in ([], ["--drafter", "ngram", "--k", "3"], ["--drafter", "model", "--draft", str(draft), "--k", "5"]):
        r = cli("--model", str(champ), "--prompt", "hello there", "--chat", "--max-new-tokens", "24",
                "--temperature", "0.8", "--top-p", "0.95", "--seed", "11", "--json", *extra)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert set(out) >= {"text", "token_ids", "stats"}
        for key in ("target_passes", "draft_passes", "tau", "acceptance_by_position", "ttft_ms", "tokens_per_s"):
            assert key in out["stats"]
        outs.append(out)
    r = cli("--model", str(champ), "--prompt", "hello there", "--chat", "--max-new-tokens", "24", "--temperature",
            "0.8", "--top-p", "0.95", "--seed", "11", "--json", "--threads", "3", "--drafter", "ngram", "--k", "3")
    assert r.returncode == 0, r.stderr          # the kernel's threads (tests/test_simd.py: the same bits)
    outs.append(json.loads(r.stdout))
    assert outs[0]["token_ids"] == outs[1]["token_ids"] == outs[2]["token_ids"] == outs[3]["token_ids"]
    assert outs[0]["text"] == outs[2]["text"]
    assert outs[2]["stats"]["draft_passes"] > 0 and outs[0]["stats"]["draft_passes"] == 0


def test_cli_clear_errors(models, tmp_path):
    champ, draft, other = models
    r = cli("--model", str(tmp_path / "missing.gguf"), "--prompt", "x")
    assert r.returncode == 2 and "missing.gguf" in r.stderr
    bad = tmp_path / "trunc.gguf"
    bad.write_bytes(champ.read_bytes()[:5000])
    r = cli("--model", str(bad), "--prompt", "x")
    assert r.returncode == 2 and "error:" in r.stderr and "Traceback" not in r.stderr
    r = cli("--model", str(champ), "--prompt", "x " * 400)
    assert r.returncode == 2 and "context" in r.stderr
    r = cli("--model", str(champ), "--prompt", "x", "--drafter", "model", "--draft", str(other), "--k", "2",
            "--bridge", "remap")
    assert r.returncode == 2 and "remap needs the same token strings" in r.stderr and "Traceback" not in r.stderr
    r = cli("--model", str(champ), "--prompt", "x", "--top-p", "0")
    assert r.returncode == 2 and "top_p" in r.stderr
    r = cli("--model", str(champ), "--prompt", "x", "--threads", "0")
    assert r.returncode == 2 and "--threads 0 must be 1..16" in r.stderr and "Traceback" not in r.stderr


def test_cli_draft_with_another_vocabulary(models, tmp_path):
    """A draft on another tokenizer (a byte-level one with more merges, a SentencePiece-style one) is bridged
    (--bridge, exactspec.vocab): the answer stays the champion's own."""
    champ, _draft, other = models
    spm = tmp_path / "spm.gguf"
    write_micro_gguf(spm, micro_config(vocab_size=420, n_layers=1), seed=4, with_tokenizer="spm")
    args = ("--model", str(champ), "--prompt", "the cat is in the hat", "--chat", "--max-new-tokens", "16", "--json")
    base = json.loads(cli(*args).stdout)["token_ids"]
    for d in (other, spm):
        for bridge in ("auto", "tli", "slem"):
            r = cli(*args, "--drafter", "model", "--draft", str(d), "--k", "3", "--bridge", bridge)
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            assert out["token_ids"] == base and out["stats"]["bridge"] == ("slem" if bridge == "auto" else bridge)
