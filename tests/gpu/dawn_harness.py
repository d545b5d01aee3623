"""Run the WebGPU engine (app/gpu/engine.js) under Node + Dawn (npm `webgpu`) from pytest.

Dawn's OpenGL backend on Mesa's llvmpipe is the adapter here (XDG_RUNTIME_DIR=/tmp EGL_PLATFORM=surfaceless,
featureLevel 'compatibility'); it needs Debian's libegl1 + libegl-mesa0 + libgl1-mesa-dri (llvmpipe) at run time
(libegl-dev's unversioned libEGL.so too, or the symlink shim below).
`probe()` says why the engine cannot run (no node, no webgpu package, no adapter) so tests skip ONLY then.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "gpu" / "driver.mjs"
BACKEND = os.environ.get("EXACTSPEC_DAWN_BACKEND", "opengl")   # 'vulkan' on a GPU host (H200 bench machine)
ENV = {**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "EGL_PLATFORM": "surfaceless"}
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")


def _egl_shim() -> None:
    """Dawn's OpenGL backend dlopens the unversioned "libEGL.so" (Debian ships it in libegl-dev). When only
    libEGL.so.1 (libegl1) is installed, point LD_LIBRARY_PATH at a private folder with that one symlink."""
    if any(os.path.exists(os.path.join(d, "libEGL.so")) for d in LIB_DIRS):
        return
    so1 = next((os.path.join(d, "libEGL.so.1") for d in LIB_DIRS if os.path.exists(os.path.join(d, "libEGL.so.1"))), None)
    if so1 is None:
        return
    shim = Path(tempfile.gettempdir()) / "exactspec-egl-shim"
    shim.mkdir(exist_ok=True)
    link = shim / "libEGL.so"
    if not link.exists():
        try:
            link.symlink_to(so1)
        except FileExistsError:
            pass
    ENV["LD_LIBRARY_PATH"] = f"{shim}:{ENV.get('LD_LIBRARY_PATH', '')}".rstrip(":")


_egl_shim()

PROBE_JS = """
import { create, globals } from 'webgpu';
Object.assign(globalThis, globals);
const gpu = create(['backend=BACKEND']); globalThis.__g = gpu;
const a = await gpu.requestAdapter(BACKEND_OPTS);
console.log(a ? 'ADAPTER ' + (a.info?.device ?? '') : 'NO_ADAPTER');
process.exit(0);
"""


def probe() -> str | None:
    """None when the engine can run here, else the reason it cannot."""
    node = shutil.which("node")
    if not node:
        return "node is not installed"
    if not (ROOT / "node_modules" / "webgpu" / "package.json").exists():
        return "npm package webgpu is not installed (run `python build.py setup`)"
    try:
        js = PROBE_JS.replace("BACKEND_OPTS", "{featureLevel: 'compatibility'}" if BACKEND == "opengl" else "{}")
        r = subprocess.run([node, "--input-type=module", "-e", js.replace("BACKEND", BACKEND)], cwd=ROOT, env=ENV, capture_output=True,
                           text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "Dawn adapter probe timed out"
    if "ADAPTER" in r.stdout and "NO_ADAPTER" not in r.stdout:
        return None
    return f"Dawn ({BACKEND} backend) offers no adapter: rc={r.returncode} {r.stdout.strip()} {r.stderr.strip()[-500:]}"


def run_engine(model: str | os.PathLike, description: dict, ops: list[dict], *, seq_len: int | None = None,
               max_rows: int | None = None, max_binding_bytes: int | None = None, lanes: int | None = None,
               emulate_sg: bool = False, ksplit: int | None = None, engine_opts: dict | None = None,
               break_shader: str | None = None, draft: tuple | None = None, features: bool = False,
               head: tuple | None = None, shader_dir: str | os.PathLike | None = None, trace: bool = False,
               timeout: int = 600):
    """Run ops on a fresh engine; returns (results, outputs) with outputs a list of (rows, vocab) float32 arrays,
    one per op that returned logits rows (forwards; batched steps asked for rows) and succeeded (results[i]['error']
    holds the message of one that failed). draft: (path, description) of a second model (ops with on='draft',
    spec_round). features: the champion keeps its final hidden states (ops read_features). head: (path, description[,
    opts]) of a draft head on the champion (engine.loadHead; ops with on='head', spec_round with draft='head').
    shader_dir: a folder of kernel files to run instead of shaders/ (e.g. another revision's). break_shader: a kernel
    file served broken ('FILE'), or only its variants with a define ('FILE:DEFINE'). trace: the engine's timeline
    (createEngine's `trace` events) comes back as results['trace']."""
    vocab = description["config"]["vocab_size"]
    with tempfile.TemporaryDirectory() as td:
        spec = {"model": str(model), "description": description, "ops": ops, "seq_len": seq_len,
                "max_rows": max_rows, "max_binding_bytes": max_binding_bytes, "lanes": lanes, "backend": BACKEND,
                "emulate_sg": emulate_sg, "ksplit": ksplit, "engine_opts": engine_opts or {},
                "break_shader": break_shader, "features": features,
                "shader_dir": str(shader_dir) if shader_dir else None, "trace": trace}
        if draft is not None:
            spec["draft"] = {"model": str(draft[0]), "description": draft[1]}
        if head is not None:
            spec["head"] = {"model": str(head[0]), "description": head[1], "opts": head[2] if len(head) > 2 else {}}
        sp = Path(td) / "spec.json"
        op = Path(td) / "out.bin"
        sp.write_text(json.dumps(spec))
        r = subprocess.run(["node", str(DRIVER), str(sp), str(op)], cwd=ROOT, env=ENV, capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"engine driver failed (rc={r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1]
        info = json.loads(line)
        flat = np.fromfile(op, dtype=np.float32)
    outs = []
    off = 0
    for res in info["results"]:
        if "error" not in res and res.get("rows"):
            n = res["rows"] * vocab
            outs.append(flat[off:off + n].reshape(res["rows"], vocab))
            off += n
    assert off == flat.size
    return info, outs
