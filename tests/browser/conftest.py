"""Fixtures for the browser tests: one server per test session, one headless Chromium per test module.

The server is build.py's own (`make_server`), serving the page, the Pyodide runtime, the exactspec wheel built from
the working tree, and test models: a micro chat model (the default champion here, so a first visit imports it), a
micro draft and SmolLM2 (served, not imported by default). Each test gets a fresh browser context (its own OPFS).
Chromium: $EXACTSPEC_CHROMIUM, else /usr/bin/chromium, else Playwright's own build.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "py"))

playwright_sync = pytest.importorskip("playwright.sync_api")

import build  # noqa: E402

CHROMIUM_ARGS = ["--no-sandbox", "--enable-unsafe-webgpu", "--disable-background-networking",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]
BOOT_TIMEOUT_MS = 180_000


def chromium_path() -> str | None:
    env = os.environ.get("EXACTSPEC_CHROMIUM")
    if env:
        return env
    if os.path.exists("/usr/bin/chromium"):
        return "/usr/bin/chromium"
    return None   # Playwright's own


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser" in str(item.fspath).replace(os.sep, "/") and item.fspath.basename.startswith("test_page"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def test_models(tmp_path_factory):
    """GGUF files: micro chat champion (seed 1), micro draft (seed 7, same tokenizer), a draft head for micro-chat,
    user model (seed 2, Q8_0),
    a truncated copy of the user model, SmolLM2 (when build.py setup placed it)."""
    from exactspec.micro import micro_config, write_micro_gguf
    d = tmp_path_factory.mktemp("models")
    cfg = micro_config()
    out = {}
    out["micro-chat"] = d / "micro-chat.gguf"
    write_micro_gguf(out["micro-chat"], cfg, seed=1)
    out["micro-draft"] = d / "micro-draft.gguf"
    write_micro_gguf(out["micro-draft"], micro_config(n_layers=1), seed=7)
    from exactspec.drafters.head import HeadConfig, random_head_weights, write_head_gguf
    hc = HeadConfig.for_champion(cfg, champion_sha256=sha256(out["micro-chat"]))
    out["micro-head"] = d / "micro-head.gguf"                 # a draft head made for micro-chat (random weights)
    write_head_gguf(out["micro-head"], hc, random_head_weights(hc, 5), tensor_type="F32")
    out["micro-spm-draft"] = d / "micro-spm-draft.gguf"          # another vocabulary: SentencePiece-style, 420
    write_micro_gguf(out["micro-spm-draft"], micro_config(n_layers=1, vocab_size=420), seed=8, with_tokenizer="spm")
    out["user-model"] = d / "user-model.gguf"
    write_micro_gguf(out["user-model"], cfg, seed=2, tensor_type="Q8_0")
    data = out["user-model"].read_bytes()
    out["broken-model"] = d / "broken-model.gguf"
    out["broken-model"].write_bytes(data[: len(data) * 2 // 3])
    out["hf-model"] = write_micro_hf(d / "hf-model", seed=3)
    champ = build.MODELS / build.CHAMPION["dest"]
    if champ.exists():
        out["smollm2"] = champ
    return out


@pytest.fixture(scope="session")
def server(test_models):
    build.setup_pyodide()
    models = [
        {"name": "micro-chat", "path": test_models["micro-chat"], "size": test_models["micro-chat"].stat().st_size,
         "sha256": sha256(test_models["micro-chat"]), "role": "champion"},
        {"name": "micro-draft", "path": test_models["micro-draft"], "size": test_models["micro-draft"].stat().st_size,
         "sha256": sha256(test_models["micro-draft"]), "role": "draft", "default": False,
         # a provenance manifest naming micro-chat as its champion (as build.py lists the shipped draft's)
         "provenance": {"draft_sha256": sha256(test_models["micro-draft"]),
                        "champion_sha256": sha256(test_models["micro-chat"])}},
        {"name": "micro-head", "path": test_models["micro-head"], "size": test_models["micro-head"].stat().st_size,
         "sha256": sha256(test_models["micro-head"]), "role": "draft", "default": False},
        {"name": "micro-spm-draft", "path": test_models["micro-spm-draft"], "role": "draft", "default": False,
         "size": test_models["micro-spm-draft"].stat().st_size, "sha256": sha256(test_models["micro-spm-draft"])},
    ]
    if "smollm2" in test_models:
        models.append({"name": "smollm2", "path": test_models["smollm2"], "size": build.CHAMPION["size"],
                       "sha256": build.CHAMPION["sha256"], "role": "champion", "default": False})
    srv = build.make_server(0, models)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    host, port = srv.server_address[:2]
    yield f"http://{host}:{port}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def browser():
    # module scope, not session: Playwright's sync API keeps an asyncio loop running in this thread while it lives,
    # which would break every later test that calls asyncio.run() (and the GPU tests' own Playwright).
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        kw = {"headless": True, "args": CHROMIUM_ARGS}
        exe = chromium_path()
        if exe:
            kw["executable_path"] = exe
        b = p.chromium.launch(**kw)
        yield b
        b.close()


LLAMA2_TOKENIZER = ROOT / "node_modules" / "@lenml" / "tokenizer-llama2" / "models"


def write_safetensors(path: Path, tensors: dict) -> None:
    """Minimal safetensors writer (F32): 8-byte header length, JSON header, raw little-endian data."""
    import json
    import numpy as np
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_micro_hf(folder: Path, seed: int) -> Path:
    """A Hugging Face folder: micro llama weights (vocab 32000) in safetensors + the llama-2 tokenizer (npm)."""
    import json
    from exactspec.formats.safetensors import _HF_GLOBAL, _HF_TO_GGUF
    from exactspec.micro import micro_config, micro_weights
    folder.mkdir(parents=True, exist_ok=True)
    cfg = micro_config(vocab_size=32000)
    g2h = {v: k for k, v in _HF_GLOBAL.items()}
    layer = {v: k for k, v in _HF_TO_GGUF.items()}
    tensors = {}
    for name, w in micro_weights(cfg, seed).items():
        if name in g2h:
            tensors[g2h[name]] = w
        else:
            _, i, rest = name.split(".", 2)
            tensors[f"model.layers.{i}.{layer[rest]}"] = w
    write_safetensors(folder / "model.safetensors", tensors)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.dim,
        "intermediate_size": cfg.hidden_dim, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.seq_len, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": True}))
    shutil.copyfile(LLAMA2_TOKENIZER / "tokenizer.json", folder / "tokenizer.json")
    shutil.copyfile(LLAMA2_TOKENIZER / "tokenizer_config.json", folder / "tokenizer_config.json")
    return folder


class PageSession:
    """A fresh context (own OPFS) and page, recording every request (page and worker) and console errors."""

    def __init__(self, browser, base: str):
        self.base = base
        self.context = browser.new_context()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.context.on("request", lambda r: self.requests.append(r.url))
        self.page = self.context.new_page()
        self.page.set_default_timeout(BOOT_TIMEOUT_MS)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, query: str = "?cpu=1") -> dict:
        """Open the page and wait until exactspec.ready() resolves; returns its result."""
        self.response = self.page.goto(self.base + "/" + query)
        return self.ready()

    def ready(self) -> dict:
        """exactspec.ready()'s result, once the page has drawn everything it draws at start-up (status, settings,
        models list: app/main.js sets body[data-ready] last), so that no click lands while the layout still moves."""
        r = self.page.evaluate("exactspec.ready()")
        self.page.wait_for_selector("body[data-ready]", state="attached")
        return r

    def reload(self) -> dict:
        self.response = self.page.reload()
        return self.ready()

    def js(self, expr: str, arg=None):
        return self.page.evaluate(expr, arg)

    def generate(self, **params) -> dict:
        return self.page.evaluate("(p) => exactspec.generate(p)", params)

    def model_requests(self) -> list[str]:
        return [u for u in self.requests if "/models/" in u]

    def close(self):
        self.context.close()


@pytest.fixture
def session(browser, server):
    s = PageSession(browser, server)
    yield s
    s.close()


def cli_generate(model: Path, prompt: str, chat: bool = True, max_new_tokens: int = 16, **kw) -> dict:
    """The CPython oracle: `python -m exactspec generate ... --json`."""
    import json
    import subprocess
    cmd = [sys.executable, "-m", "exactspec", "generate", "--model", str(model), "--prompt", prompt,
           "--max-new-tokens", str(max_new_tokens), "--json"]
    if chat:
        cmd.append("--chat")
    for k, v in kw.items():
        cmd += [f"--{k.replace('_', '-')}"] + ([] if v is None else [str(v)])    # None: a flag (no_adaptive=None)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.fixture(scope="session")
def cli():
    return cli_generate


@pytest.fixture(scope="session")
def models_dir(test_models):
    return test_models


def copy_to(tmp: Path, src: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copyfile(src, dst)
    return dst
