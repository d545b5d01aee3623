"""Run Python source in Pyodide 0.27.7 under Node: the browser worker's runtime (WebAssembly CPython 3.12, numpy 2.0.2
built without a BLAS) without a browser. The core comes from npm `pyodide` (node_modules/pyodide), numpy's wheel from
static/pyodide/0.27.7 (laid out by `python build.py setup`). The host's file system is mounted at /host and the
repository's py/ folder is on sys.path, so `import exactspec` imports this checkout.

Used by py/bench/verify_cpu.py and tests/test_reference.py.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "node_modules" / "pyodide" / "pyodide.mjs"
WHEELS = ROOT / "static" / "pyodide" / "0.27.7"

_RUNNER = r"""
import { loadPyodide } from %(core)s;
import fs from 'fs';
const py = await loadPyodide({ stdout: (s) => console.log(s), stderr: (s) => console.error(s) });
await py.loadPackage([%(numpy)s], { messageCallback: () => {} });
py.FS.mkdir('/host');
py.FS.mount(py.FS.filesystems.NODEFS, { root: '/' }, '/host');
py.runPython("import sys; sys.path.insert(0, '/host' + " + JSON.stringify(%(py)s) + ")");
// threads > 1: app/cpu_pool.js, importable from Python as `exactspec_host.pool` (None when it could not start)
if (%(threads)s > 1) {
  const { CpuPool } = await import(%(pool)s);
  const pool = await CpuPool.create({ threads: %(threads)s, heap: () => py._module.HEAPU8 });
  if (!pool) { console.error('PYODIDE ERROR no CPU pool: ' + CpuPool.why); process.exit(1); }
  py.registerJsModule('exactspec_host', { pool });
}
try {
  await py.runPythonAsync(fs.readFileSync(%(src)s, 'utf8'));
} catch (e) {
  console.error('PYODIDE ERROR ' + (e.message || e));
  process.exit(1);
}
process.exit(0);
"""


def unavailable() -> str | None:
    """Why Pyodide cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not CORE.exists():
        return f"{CORE} missing (npm install)"
    if not list(WHEELS.glob("numpy-*.whl")):
        return f"no numpy wheel in {WHEELS} (python build.py setup)"
    return None


def host_path(path: str | os.PathLike) -> str:
    """The path under which Pyodide sees a host file (links resolved on the host: NODEFS does not follow them)."""
    return "/host" + str(Path(path).resolve())


def run_python(source: str, timeout: float = 600, threads: int = 1) -> subprocess.CompletedProcess:
    """Run `source` in a fresh Pyodide; returns the finished process (stdout: what the source printed; on a Python
    error, stderr's last line starting 'PYODIDE ERROR' carries its traceback). threads > 1: the CPU kernel's thread
    pool (app/cpu_pool.js) is started and importable as `exactspec_host.pool` (exactspec.simd.Pool(it))."""
    why = unavailable()
    if why:
        raise RuntimeError(f"cannot run Pyodide: {why}")
    import json
    numpy_wheel = sorted(WHEELS.glob("numpy-*.whl"))[-1]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "main.py"
        src.write_text(source, encoding="utf-8")
        runner = Path(tmp) / "run.mjs"
        runner.write_text(_RUNNER % {"core": json.dumps(CORE.as_uri()), "numpy": json.dumps(str(numpy_wheel)),
                                     "py": json.dumps(str(ROOT / "py")), "src": json.dumps(str(src)),
                                     "threads": int(threads), "pool": json.dumps((ROOT / "app" / "cpu_pool.js").as_uri())},
                          encoding="utf-8")
        return subprocess.run(["node", str(runner)], capture_output=True, text=True, timeout=timeout, cwd=tmp)
