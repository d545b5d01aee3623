"""What a verify block costs on the CPU fallback: the numpy reference on SmolLM2-135M in CPython AND in Pyodide (the
browser worker's runtime, npm `pyodide` under Node), in one run. Prints one JSON object per runtime and a table.

    python build.py bench verify_cpu [--reps 5] [--decode-tokens 24] [--no-pyodide] [--before REV] [--threads N]

Per runtime and scheme, after a 96-token prefix: T_single (one token), T_verify(k) / T_single for k = 1..8 (k+1 rows,
the ratio taken within each repetition), T(64 rows) / 64 (prefill), each as median [min-max] over --reps
repetitions, in wall-clock AND process CPU time (the machine is shared: CPU time excludes waiting for a core); and
tokens/s of plain greedy decoding through the product's decode loop (exactspec.decode.generate, speculation off).
Schemes: "new" is exactspec.reference as it is (kernel "auto": "gemv" in CPython, "dot" in Pyodide); "before" is
py/exactspec/reference.py at commit --before (default: the last commit with the row-at-a-time reference), loaded from
git, same weights; with --threads N > 1, in Pyodide also "pool": the same model with the page's kernel threads
(app/cpu_pool.js, N threads, Node worker threads here), and in CPython "threads": the same model with matvec.c's N
threads (the CLI's default: the machine's cores, at most 4). Measurements of the schemes are interleaved (rep by rep, k
by k).
Then the decode loop's per-round Python work for k = 4 on the champion's rows (scaled_logits, coupled noise, verify;
see _round_overhead) with the old and the new exactspec.sampling, in the same runtimes.
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


BEFORE_FILES = ("reference", "sampling")      # the modules whose previous versions are measured beside the new


def _load_before(before_dir: str, name: str):
    """exactspec.<name> as it was at --before (its file in before_dir), importable beside the current one."""
    import types
    mod = types.ModuleType(f"exactspec._{name}_before")
    mod.__package__ = "exactspec"
    sys.modules[mod.__name__] = mod                    # dataclasses look their module up there
    with open(os.path.join(before_dir, name + ".py"), encoding="utf-8") as f:
        exec(compile(f.read(), f"{name}.py@before", "exec"), mod.__dict__)
    return mod


def _stats(xs):
    xs = sorted(xs)
    return {"median": round(xs[len(xs) // 2], 4), "min": round(xs[0], 4), "max": round(xs[-1], 4)}


async def measure(model_path: str, before_dir: str | None, reps: int, decode_tokens: int, threads: int = 1) -> dict:
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
    if threads > 1 and sys.platform == "emscripten":
        import exactspec_host            # bench._pyodide.run_python(threads=N): app/cpu_pool.js
        from exactspec.simd import Pool
        models["pool"] = ReferenceModel.from_weights(config, weights, max_len=512, pool=Pool(exactspec_host.pool))
    elif threads > 1:                    # CPython: matvec.c's own threads
        models["threads"] = ReferenceModel.from_weights(config, weights, max_len=512, threads=threads)
    if before_dir:
        models["before"] = _load_before(before_dir, "reference").ReferenceModel.from_weights(config, weights,
                                                                                             max_len=512)
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
        r = {"kernel": getattr(m, "kernel", "rows"), "threads": int(getattr(m, "threads", 1))}
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
    out["round_overhead"] = _round_overhead(models["new"], before_dir, reps, (wall, cpu))
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


ROUND_K = 4
ROUND_MODES = {                     # name: (temperature, top_k, top_p)
    "greedy": (0.0, 0, 1.0),
    "coupled T0.7": (0.7, 0, 1.0),
    "coupled T0.7 top-k40 top-p0.9": (0.7, 40, 0.9),
    "coupled T0.7 top-p0.9": (0.7, 0, 0.9),
    "coupled T0.3": (0.3, 0, 1.0),
}


def _round_overhead(model, before_dir, reps, clocks) -> dict:
    """The decode loop's Python work in one speculative round of k = 4 (exactspec.decode: scaled_logits per champion
    row, the coupled noise of each position, verify), on the champion's real rows, per sampling mode:
    "before" and "new" run what the loop runs today with the old and the new exactspec.sampling; "new+pick" runs
    what it would with the pick computed by Rng.gumbel_argmax per row (the decode.py change proposed to the lead),
    which gives the same tokens. Median [min-max] ms over 5 x reps rounds, wall and CPU."""
    import numpy as np
    from exactspec import sampling, verify

    wall, cpu = clocks
    rows = model.forward(list(range(1000, 1000 + ROUND_K + 1)), PREFIX)        # (k+1, vocab) real champion rows
    model.truncate(PREFIX)
    vocab = rows.shape[1]
    schemes = {"new": sampling}
    if before_dir:
        schemes = {"before": _load_before(before_dir, "sampling"), **schemes}
    rngs = {s: mod.Rng(1) for s, mod in schemes.items()}
    rngs["new+pick"] = sampling.Rng(1)
    out = {}
    for mode, (temp, top_k, top_p) in ROUND_MODES.items():
        times = {s: {"wall": [], "cpu": []} for s in rngs}
        picks = {}
        for r in range(5 * reps):
            t0 = PREFIX + 1 + r * (ROUND_K + 1)              # each round draws the noise of new positions
            for s, rng in rngs.items():
                mod = schemes.get(s, sampling)
                p = mod.SamplingParams(temp, top_k, top_p)
                a, b = wall(), cpu()
                z = np.stack([mod.scaled_logits(row, p) for row in rows])           # (k+1, vocab)
                if p.greedy:
                    verify.greedy(z, [-1] * ROUND_K)
                elif s == "new+pick":
                    toks = [rng.gumbel_argmax(z[i], t0 + i) for i in range(ROUND_K + 1)]
                else:
                    noise = np.stack([rng.gumbel(t0 + i, vocab) for i in range(ROUND_K + 1)])   # (k+1, vocab)
                    verify.coupled(z, [-1] * ROUND_K, noise)
                times[s]["wall"].append((wall() - a) * 1e3)
                times[s]["cpu"].append((cpu() - b) * 1e3)
                # the champion's token of every row (what verify compares proposals with), untimed
                if p.greedy:
                    toks = np.argmax(z, axis=1).tolist()
                elif s != "new+pick":
                    toks = np.argmax(z + noise, axis=1).tolist()
                picks.setdefault(r, set()).add(tuple(int(x) for x in toks))
        same = all(len(v) == 1 for v in picks.values())
        out[mode] = {"same_tokens": same, **{s: {c: _stats(v) for c, v in t.items()} for s, t in times.items()}}
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
    lines.append(f"  decode-loop Python work per round of k = {ROUND_K} (ms, CPU time; a champion pass above):")
    for mode, r in res["round_overhead"].items():
        cells = "  ".join(f"{s} {v['cpu']['median']:.2f} [{v['cpu']['min']:.2f}-{v['cpu']['max']:.2f}]"
                          for s, v in r.items() if s != "same_tokens")
        lines.append(f"    {mode:32s} {cells}  same tokens: {r['same_tokens']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=24)
    ap.add_argument("--before", default=BEFORE,
                    help="git revision of the old reference and sampling ('' to skip them)")
    ap.add_argument("--no-pyodide", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="> 1: also the kernel on N threads ('pool' in Pyodide, 'threads' in CPython)")
    args = ap.parse_args(argv)
    if not Path(args.model).exists():
        print(f"model file missing: {args.model} (python build.py setup)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        before = None
        if args.before:
            try:
                for name in BEFORE_FILES:
                    src = subprocess.run(["git", "show", f"{args.before}:py/exactspec/{name}.py"], cwd=ROOT,
                                         capture_output=True, text=True, check=True).stdout
                    (Path(tmp) / f"{name}.py").write_text(src, encoding="utf-8")
                before = tmp
            except (OSError, subprocess.CalledProcessError) as e:
                print(f"no 'before' scheme: cannot read py/exactspec at {args.before} from git ({e})",
                      file=sys.stderr)
        import asyncio
        results = [asyncio.run(measure(args.model, before, args.reps, args.decode_tokens, args.threads))]
        if not args.no_pyodide:
            from bench._pyodide import host_path, run_python, unavailable
            if unavailable():
                print(f"Pyodide skipped: {unavailable()}", file=sys.stderr)
            else:
                code = ("from bench.verify_cpu import measure\n"
                        f"await measure({host_path(args.model)!r}, {host_path(before) if before else None!r}, "
                        f"{args.reps}, {args.decode_tokens}, {args.threads})\n")
                proc = run_python(code, timeout=3600, threads=args.threads)
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
