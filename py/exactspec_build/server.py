"""The page's static HTTP server: /, /app/, /static/, /shaders/, the default models and /manifest.json."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from .common import MODELS, ROOT, STATIC, log, sha256_file
from .fetch import CHAMPION, PYODIDE_VERSION
from .wheel import build_exactspec_wheel


def default_models() -> list[dict]:
    """The models the page imports into OPFS on a first visit: the champion, and the committed draft when present."""
    out = []
    champ = MODELS / CHAMPION["dest"]
    if champ.exists():
        out.append({"name": champ.stem, "path": champ, "size": CHAMPION["size"], "sha256": CHAMPION["sha256"],
                    "role": "champion"})
    import json
    pinned = {}  # draft file -> (draft sha256, champion sha256) from its provenance manifest
    foreign = set()  # drafts whose manifest names a bridge (another vocabulary): listed after the champion's own
    for mf in sorted(MODELS.glob("*.manifest.json")):
        try:
            m = json.loads(mf.read_text())
            if str(m.get("schema", "")).startswith("exactspec.head-manifest/"):
                continue                       # a draft head's manifest (head-*.gguf is not a default model)
            d = m.get("draft", {})
            pinned[d["file"]] = (d["sha256"], m["champion"]["sha256"])
            if d.get("bridge"):
                foreign.add(d["file"])
        except (ValueError, KeyError, AttributeError, TypeError):
            log(f"warning: {mf.name} is not a readable draft manifest; ignored")
    # the first draft listed is the one the page loads by default: one with the champion's vocabulary
    for p in sorted(MODELS.glob("draft-*.gguf"), key=lambda p: (p.name in foreign, p.name)):
        got = sha256_file(p)
        entry = {"name": p.stem, "path": p, "size": p.stat().st_size, "sha256": got, "role": "draft"}
        if p.name in pinned:
            want, champion_sha = pinned[p.name]
            if want != got:
                log(f"warning: {p.name} has sha256 {got}, its manifest says {want}: not served as a default")
                continue
            # the page shows a draft as verified only for the champion its manifest names
            entry["provenance"] = {"draft_sha256": got, "champion_sha256": champion_sha}
        out.append(entry)
    return out


MIME_TYPES = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".json": "application/json",
    ".map": "application/json", ".wasm": "application/wasm", ".whl": "application/zip", ".zip": "application/zip",
    ".gguf": "application/octet-stream", ".safetensors": "application/octet-stream", ".wgsl": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon", ".txt": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
}
CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; style-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'none'; frame-ancestors 'none'")
IMMUTABLE = "public, max-age=31536000, immutable"


def bench_panel_json() -> bytes:
    """/bench/panel.json: the preregistered bench matrix's page subset (bench/matrix/spec.json, subset 'panel') with its
    workload prompts, for the page's "Benchmark this machine" panel (app/bench_panel.js). Refuses (an error
    document) a workload whose sha256 is not the one the spec names."""
    import json
    from exactspec.benchmatrix import load_spec, select_items
    spec, sha = load_spec(ROOT / "bench" / "matrix" / "spec.json")
    wl = ROOT / spec["workload"]["path"]
    got = sha256_file(wl)
    if got != spec["workload"]["sha256"]:
        return json.dumps({"error": f"the workload's sha256 {got} is not the spec's {spec['workload']['sha256']}"}).encode()
    items = [json.loads(x) for x in wl.read_text(encoding="utf-8").splitlines() if x.strip()]
    sub = spec["subsets"]["panel"]
    chosen = [{k: it[k] for k in ("id", "stratum", "messages", "max_new_tokens")} for it in select_items(items, sub)]
    return json.dumps({"spec": {"name": spec["name"], "version": spec["version"], "sha256": sha, "subset": "panel",
                                "definition": sub, "procedure": spec.get("procedure")},
                       "workload": {"sha256": got}, "items": chosen}).encode()


def make_server(port: int = 0, models: list[dict] | None = None, host: str = "127.0.0.1"):
    """A threading HTTP server for the page. Serves / (app/index.html), /app/, /static/, /shaders/, the models
    (/models/NAME.gguf) and /manifest.json (runtime and wheel paths, default models with size and sha256).
    Returns the server; call serve_forever() (or run it in a thread) and shutdown()."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import unquote, urlsplit

    wheel = build_exactspec_wheel()
    models = default_models() if models is None else models
    by_file = {}
    listed = []
    for m in models:
        path = Path(m["path"])
        fname = m["name"] + path.suffix
        by_file[fname] = path
        listed.append({k: v for k, v in m.items() if k != "path"} | {"url": f"/models/{fname}", "file": fname})
    manifest = json.dumps({
        "pyodide": f"/static/pyodide/{PYODIDE_VERSION}/",
        "wheel": "/" + wheel.relative_to(ROOT).as_posix(),
        "wheel_sha256": sha256_file(wheel),
        "models": listed,
    }).encode()
    roots = {"app": ROOT / "app", "static": STATIC, "shaders": ROOT / "shaders"}
    try:
        panel = bench_panel_json()
    except (OSError, ValueError, KeyError) as e:   # the page still works; its benchmark panel says why it cannot
        panel = json.dumps({"error": f"the bench matrix spec cannot be read: {e}"}).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "exactspec"
        sys_version = ""

        def log_message(self, fmt, *a):  # quiet: tests and people read the URL line only
            if os.environ.get("EXACTSPEC_HTTP_LOG"):
                super().log_message(fmt, *a)

        def _resolve(self, path: str):
            """(file path | bytes, cache-control) or None."""
            if path in ("/", "/index.html"):
                return ROOT / "app" / "index.html", "no-cache"
            if path == "/manifest.json":
                return manifest, "no-cache"
            if path == "/bench/panel.json":
                return panel, "no-cache"
            parts = [p for p in path.split("/") if p]
            if any(p in ("..", ".") or p.startswith(".") or "\\" in p for p in parts) or len(parts) < 2:
                return None
            if parts[0] == "models" and len(parts) == 2:
                f = by_file.get(parts[1])
                return (f, "no-store") if f else None
            base = roots.get(parts[0])
            if base is None:
                return None
            f = base.joinpath(*parts[1:])
            # no symlink may lead out of the folder it sits in, except the build's runtime folder itself (a git
            # worktree links static/pyodide to the main checkout's)
            anchor = STATIC / "pyodide" if parts[:2] == ["static", "pyodide"] else base
            try:
                f.resolve().relative_to(anchor.resolve())
            except ValueError:
                return None
            if not f.is_file():
                return None
            immutable = path.startswith(f"/static/pyodide/{PYODIDE_VERSION}/") or path.startswith("/static/wheels/")
            return f, (IMMUTABLE if immutable else "no-cache")

        def _send(self, head_only: bool):
            path = unquote(urlsplit(self.path).path)
            hit = self._resolve(path)
            if hit is None:
                body = b"not found\n"
                self.send_response(404)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self._common("no-store")
                self.end_headers()
                if not head_only:
                    self.wfile.write(body)
                return
            target, cache = hit
            if isinstance(target, bytes):
                ctype, size = "application/json", len(target)
                etag = '"' + hashlib.sha256(target).hexdigest()[:16] + '"'
            else:
                ctype = MIME_TYPES.get(target.suffix.lower(), "application/octet-stream")
                st = target.stat()
                size = st.st_size
                etag = f'"{st.st_mtime_ns:x}-{size:x}"'
            if cache != "no-store" and self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self._common(cache)
                self.end_headers()
                return
            self.send_response(200)
            if cache != "no-store":
                self.send_header("ETag", etag)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(size))
            self._common(cache)
            self.end_headers()
            if head_only:
                return
            try:
                if isinstance(target, bytes):
                    self.wfile.write(target)
                else:
                    with open(target, "rb") as f:
                        shutil.copyfileobj(f, self.wfile, 1 << 20)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _common(self, cache: str):
            self.send_header("Cache-Control", cache)
            self.send_header("Content-Security-Policy", CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Cross-Origin-Resource-Policy", "same-origin")
            # cross-origin isolated: SharedArrayBuffer, so the CPU fallback's kernel runs on threads (app/cpu_pool.js)
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")

        def do_GET(self):
            self._send(False)

        def do_HEAD(self):
            self._send(True)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    return Server((host, port), Handler)

