"""Paths, logging, errors and hashing shared by the set-up steps."""
from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
STATIC = ROOT / "static"
MODELS = STATIC / "models"
WHEELS = STATIC / "wheels"


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

