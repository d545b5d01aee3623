"""The exactspec wheel for the browser: the runtime package py/exactspec as is (its Python, the CPU fallback's
WebAssembly kernel matvec.wasm), content-addressed."""
from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path

from .common import ROOT, WHEELS, log


def _wheel_files() -> list[tuple[str, bytes]]:
    pkg = ROOT / "py" / "exactspec"
    out = []
    for p in sorted([*pkg.rglob("*.py"), *pkg.rglob("*.wasm")]):
        if "__pycache__" in p.parts:
            continue
        out.append((p.relative_to(ROOT / "py").as_posix(), p.read_bytes()))
    return out


def build_exactspec_wheel() -> Path:
    """Build the pure-Python exactspec wheel for the browser into static/wheels/<sha16>/ (content-addressed,
    deterministic, offline: a wheel is a zip with a dist-info; no build backend needed: the runtime package as is).
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



def write_rules() -> Path:
    """static/rules.js: the settings' names, defaults and limits for the page, from py/exactspec/settings.py (the one
    definition; the page never spells them itself)."""
    from exactspec.settings import rules_js
    dest = ROOT / "static" / "rules.js"
    text = rules_js()
    if not dest.exists() or dest.read_text() != text:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        tmp.write_text(text)
        os.replace(tmp, dest)
        log(f"settings rules written: {dest.relative_to(ROOT)}")
    return dest
