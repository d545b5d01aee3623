"""Run app/gpu/engine.js inside headless Chromium (WebGPU on SwiftShader) from Python.

Serves the repository's app/ and shaders/ plus one model file on 127.0.0.1 (nothing else), opens a blank page and
evaluates an async script that imports the engine with `navigator.gpu`. Used by tests/gpu/test_browser_gpu.py and
py/bench/gpu_swiftshader.py. Chromium is Debian's /usr/bin/chromium driven by Playwright (never `playwright install`).
"""
from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("EXACTSPEC_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--enable-unsafe-webgpu", "--disable-background-networking",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]
TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".wgsl": "text/plain", ".json": "application/json",
         ".html": "text/html"}


def probe() -> str | None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "python playwright is not installed"
    if not (shutil.which(CHROMIUM) or os.path.exists(CHROMIUM)):
        return f"chromium not found at {CHROMIUM}"
    return None


def _handler(model: Path, description: dict, extra: dict):
    desc = json.dumps(description).encode()

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, body: bytes, ctype: str):
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/":
                return self._send(b"<!doctype html><title>engine test</title>", "text/html")
            if path == "/desc.json":
                return self._send(desc, "application/json")
            if path == "/model.bin":
                return self._send(model.read_bytes(), "application/octet-stream")
            if path in extra:   # more files: a Path (bytes) or a JSON-able value
                v = extra[path]
                if isinstance(v, Path):
                    return self._send(v.read_bytes(), "application/octet-stream")
                return self._send(json.dumps(v).encode(), "application/json")
            rel = path.lstrip("/")
            f = (ROOT / rel).resolve()
            if (rel.startswith("app/gpu/") or rel.startswith("shaders/")) and f.is_file() and ROOT in f.parents:
                return self._send(f.read_bytes(), TYPES.get(f.suffix, "application/octet-stream"))
            self.send_response(404)
            self.end_headers()

    return H


@contextlib.contextmanager
def engine_page(model: Path, description: dict, extra: dict | None = None):
    """Yields a Playwright page at http://127.0.0.1:PORT/ where `/app/gpu/engine.js`, `/desc.json` and
    `/model.bin` are served (and `extra`: {url path: Path of a file | JSON-able value})."""
    from playwright.sync_api import sync_playwright

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(Path(model), description, extra or {}))
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{srv.server_address[1]}/")
                yield page
            finally:
                browser.close()
    finally:
        srv.shutdown()
        srv.server_close()


# Page-side prelude: load the engine, the description and the model bytes.
PRELUDE = """
const { createEngine } = await import('/app/gpu/engine.js');
if (!navigator.gpu) return { no_webgpu: 'navigator.gpu is undefined' };
const desc = await (await fetch('/desc.json')).json();
const file = await (await fetch('/model.bin')).arrayBuffer();
const readSlice = async (o, n) => file.slice(o, o + n);
let engine;
try { engine = await createEngine(navigator.gpu, {}); }
catch (e) { return { no_webgpu: String(e.message || e) }; }
"""
