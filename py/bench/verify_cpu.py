"""What a verify block costs on the CPU fallback: the numpy reference on SmolLM2-135M in CPython AND in Pyodide (the
browser worker's runtime, npm `pyodide` under Node), in one run. Prints one JSON object per runtime and a table.

    python build.py bench verify_cpu [--reps 5] [--decode-tokens 24] [--no-pyodide] [--before REV]

Per runtime and scheme, after a 96-token prefix: T_single (one token), T_verify(k) / T_single for k = 1..8 (k+1 rows,
the ratio taken within each repetition), T(64 rows) / 64 (prefill), each as median [min-max] over --reps
repetitions, in wall-clock AND process CPU time (the machine is shared: CPU time excludes waiting for a core); and
tokens/s of plain greedy decoding through the product's decode loop (exactspec.decode.generate, speculation off).
Schemes: "new" is exactspec.reference as it is (kernel "auto": "gemv" in CPython, "dot" in Pyodide); "before" is
py/exactspec/reference.py at commit --before (default: the last commit with the row-at-a-time reference), loaded from
git, same weights. Measurements of the schemes are interleaved (rep by rep, k by k).
Runs with OPENBLAS_NUM_THREADS=1 unless set (see py/bench/reference.py).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "py") not in sys.path:
    sys.path.insert(0, str(ROOT / "py"))

MODEL = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
BEFORE = "1bf15db"      # the last commit whose reference multiplied each row by whole matrices
PREFIX = 96
KS = tuple(range(1, 9))
PREFILL_ROWS = 64


def _clocks():
    """(wall, cpu) clocks in seconds; in Pyodide the CPU clock is Node's process.cpuUsage()."""
    if sys.platform == "emscripten":
        import js  # noqa: F401  (a benchmark, not the core: only runs under Pyodide)

        def cpu():
            u = js.process.cpuUsage()
            return (u.user + u.system) / 1e6
        return time.perf_counter, cpu
    return time.perf_counter, time.process_time


def _load_before(source_path: str):
    """The reference module as it was at --before, importable beside the current one."""
    import types
    mod = types.ModuleType("exactspec._reference_before")
    mod.__package__ = "exactspec"
    with open(source_path, encoding="utf-8") as f:
        exec(compile(f.read(), "reference.py@before", "exec"), mod.__dict__)
    return mod


def _stats(xs):
    xs = sorted(xs)
    return {"median": round(xs[len(xs) // 2], 4), "min": round(xs[0], 4), "max": round(xs[-1], 4)}


async def measure(model_path: str, before_path: str | None, reps: int, decode_tokens: int) -> dict:
    """Run every measurement in this runtime; returns the figures (also printed as one JSON line). Async: Pyodide's
    event loop cannot block (the decode loop is awaited, as in the worker)."""
    import numpy as np
    from exactspec.decode import GenerateConfig, generate_async
    from exactspec.formats import load_model_file
    from exactspec.reference import ReferenceModel

    wall, cpu = _clocks()
    t0 = wall()
    config, weights = load_model_file(model_path)
    models = {"new": ReferenceModel.from_weights(config, weights, max_len=512)}
    if before_path:
        models["before"] = _load_before(before_path).ReferenceModel.from_weights(config, weights, max_len=512)
    del weights
    load_s = wall() - t0
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, config.vocab_size, PREFIX).tolist()
    block = rng.integers(0, config.vocab_size, PREFILL_ROWS).tolist()
    for m in models.values():
        m.forward(prefix, 0, n_out=1)

    def timed(m, n):
        a, b = wall(), cpu()
        m.forward(block[:n], PREFIX, n_out=n)
        w, c = wall() - a, cpu() - b
        m.truncate(PREFIX)
        return w, c

    raw = {s: {"wall": {}, "cpu": {}} for s in models}
    sizes = (1,) + tuple(k + 1 for k in KS) + (PREFILL_ROWS,)
    for rep in range(reps):
        for n in sizes:
            for s, m in models.items():
                w, c = timed(m, n)
                raw[s]["wall"].setdefault(n, []).append(w)
                raw[s]["cpu"].setdefault(n, []).append(c)
    out = {"runtime": "pyodide" if sys.platform == "emscripten" else "cpython", "python": sys.version.split()[0],
           "numpy": np.__version__, "load_s": round(load_s, 1), "prefix": PREFIX, "reps": reps, "schemes": {}}
    for s, m in models.items():
        r = {"kernel": getattr(m, "kernel", "rows")}
        for clock in ("wall", "cpu"):
            t = raw[s][clock]
            single = t[1]
            r[clock] = {
                "T_single_ms": _stats([x * 1e3 for x in single]),
                "T_verify_over_T_single": {str(k): _stats([v / s1 for v, s1 in zip(t[k + 1], single)]) for k in KS},
                f"T_{PREFILL_ROWS}rows_over_{PREFILL_ROWS}_ms": _stats([x * 1e3 / PREFILL_ROWS
                                                                       for x in t[PREFILL_ROWS]]),
            }
        out["schemes"][s] = r
    # plain greedy decoding through the product's loop (speculation off), schemes interleaved
    cfg = GenerateConfig(max_new_tokens=decode_tokens, drafter="none", k=0, adaptive=False, temperature=0.0)
    tps = {s: [] for s in models}
    for rep in range(max(1, reps // 2)):
        for s, m in models.items():
            m.truncate(0)
            st = (await generate_async(m, prefix + [1], cfg, eos_ids=[], clock=wall)).stats
            # tokens after the first over the time after the first (the prefill is not decoding)
            tps[s].append((st["new_tokens"] - 1) / ((st["elapsed_ms"] - st["ttft_ms"]) / 1e3))
    for s in models:
        out["schemes"][s]["plain_decode_tokens_per_s_wall"] = _stats(tps[s])
    print("RESULT " + json.dumps(out), flush=True)
    return out


def _table(res: dict) -> str:
    lines = [f"{res['runtime']} (Python {res['python']}, numpy {res['numpy']}), after a {res['prefix']}-token prefix, "
             f"median [min-max] of {res['reps']} reps"]
    for s, r in res["schemes"].items():
        for clock in ("wall", "cpu"):
            c = r[clock]
            ts = c["T_single_ms"]
            ratios = "  ".join(f"k{k} {v['median']:.2f} [{v['min']:.2f}-{v['max']:.2f}]"
                               for k, v in c["T_verify_over_T_single"].items())
            pf = next(v for key, v in c.items() if key.startswith("T_") and key.endswith("_ms") and "rows" in key)
            lines.append(f"  {s:6s} {r['kernel']:4s} {clock:4s} T_single {ts['median']:.1f} ms [{ts['min']:.1f}-"
                         f"{ts['max']:.1f}]  T_verify(k)/T_single: {ratios}  prefill {pf['median']:.2f} ms/row")
        d = r["plain_decode_tokens_per_s_wall"]
        lines.append(f"  {s:6s} plain decode {d['median']:.1f} tok/s [{d['min']:.1f}-{d['max']:.1f}] (wall)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=24)
    ap.add_argument("--before", default=BEFORE, help="git revision of the old reference ('' to skip it)")
    ap.add_argument("--no-pyodide", action="store_true")
    args = ap.parse_args(argv)
    if not Path(args.model).exists():
        print(f"model file missing: {args.model} (python build.py setup)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        before = None
        if args.before:
            try:
                src = subprocess.run(["git", "show", f"{args.before}:py/exactspec/reference.py"], cwd=ROOT,
                                     capture_output=True, text=True, check=True).stdout
                before = str(Path(tmp) / "reference_before.py")
                Path(before).write_text(src, encoding="utf-8")
            except (OSError, subprocess.CalledProcessError) as e:
                print(f"no 'before' scheme: cannot read the reference at {args.before} from git ({e})",
                      file=sys.stderr)
        import asyncio
        results = [asyncio.run(measure(args.model, before, args.reps, args.decode_tokens))]
        if not args.no_pyodide:
            from bench._pyodide import host_path, run_python, unavailable
            if unavailable():
                print(f"Pyodide skipped: {unavailable()}", file=sys.stderr)
            else:
                code = ("from bench.verify_cpu import measure\n"
                        f"await measure({host_path(args.model)!r}, {host_path(before) if before else None!r}, "
                        f"{args.reps}, {args.decode_tokens})\n")
                proc = run_python(code, timeout=3600)
                line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
                if line is None:
                    err = proc.stderr[proc.stderr.rfind("PYODIDE ERROR"):][-3000:]
                    print(f"Pyodide run failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{err}", file=sys.stderr)
                    return 1
                print(line, flush=True)
                results.append(json.loads(line[len("RESULT "):]))
    print()
    for r in results:
        print(_table(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
