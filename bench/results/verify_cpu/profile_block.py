"""Where a verify block's time goes on the CPU fallback: SmolLM2 on the numpy reference ("simd" kernel) after a
96-token prefix, forwards of 1 and 5 rows alternating (REPS each), every kernel call timed by kind, in Pyodide with
the page's kernel threads (app/cpu_pool.js, Node worker threads) and in CPython with matvec.c's threads. Prints the
median ms per forward of each kind, and the multiply-adds per second of each product kind in the 5-row forward.

    python bench/results/verify_cpu/profile_block.py [THREADS=2] [REPS=7]   (after python build.py setup)
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "py"))
MODEL = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"

SRC = r'''
import json, sys, time
import numpy as np
from exactspec.formats import load_model_file
from exactspec.reference import ReferenceModel

def profile(model_path, threads, reps):
    config, weights = load_model_file(model_path)
    if sys.platform == "emscripten":
        import exactspec_host
        from exactspec.simd import Pool
        m = ReferenceModel.from_weights(config, weights, max_len=512, pool=Pool(exactspec_host.pool))
    else:
        m = ReferenceModel.from_weights(config, weights, max_len=512, threads=threads)
    del weights
    acc = {}
    names = {}
    for li, L in enumerate(m.layers):
        for key in ("wqkv", "wo", "w13", "w2"):
            names[id(L[key])] = key
    orig = m._matvec_at
    def mv(mm, x, n, out):
        t = time.perf_counter(); orig(mm, x, n, out)
        k = names[id(mm)]; acc[k] = acc.get(k, 0.0) + time.perf_counter() - t
    m._matvec_at = mv
    sm = m._simd
    def wrap(obj, name, key):
        f = getattr(obj, name)
        def g(*a, **kw):
            t = time.perf_counter(); r = f(*a, **kw); acc[key] = acc.get(key, 0.0) + time.perf_counter() - t; return r
        setattr(obj, name, g)
    for nm in ("rmsnorm_at", "rope_at", "kv_store_at", "attend_at", "silu_mul_at"):
        wrap(sm, nm, nm[:-3])
    wrap(m, "_matvec", "lm_head")
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, config.vocab_size, 96).tolist()
    block = rng.integers(0, config.vocab_size, 9).tolist()
    m.forward(prefix, 0, n_out=1)
    runs = {1: [], 5: []}
    for _ in range(reps + 1):
        for n in (1, 5):
            acc.clear()
            t = time.perf_counter()
            m.forward(block[:n], 96, n_out=n)
            tot = time.perf_counter() - t
            m.truncate(96)
            d = {k: v * 1e3 for k, v in acc.items()}
            d["total"] = tot * 1e3
            d["rest"] = d["total"] - sum(v for k, v in d.items() if k != "total")
            runs[n].append(d)
    med = {}
    for n, rs in runs.items():
        rs = rs[1:]
        med[n] = {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]}
    c = config
    macs = {"wqkv": c.dim * (c.n_heads + 2 * c.n_kv_heads) * c.head_dim, "wo": c.dim * c.n_heads * c.head_dim,
            "w13": 2 * c.dim * c.hidden_dim, "w2": c.dim * c.hidden_dim}
    rate = {k: 5 * c.n_layers * v / (med[5][k] * 1e-3) / 1e9 for k, v in macs.items()}
    rate["lm_head"] = 5 * c.vocab_size * c.dim / (med[5]["lm_head"] * 1e-3) / 1e9
    out = {"runtime": "pyodide" if sys.platform == "emscripten" else "cpython", "threads": m.threads, "reps": reps,
           "ms_1row": med[1], "ms_5rows": med[5], "gmacs_5rows": rate}
    print("RESULT " + json.dumps(out))
'''


def show(r):
    keys = sorted(r["ms_1row"], key=lambda k: -r["ms_5rows"][k])
    print(f"{r['runtime']}, {r['threads']} threads, median of {r['reps']}: ms per forward (1 row / 5 rows), "
          "G multiply-adds/s in the 5-row forward")
    for k in keys:
        g = r["gmacs_5rows"].get(k)
        print(f"  {k:10s} {r['ms_1row'][k]:6.1f} / {r['ms_5rows'][k]:6.1f}" + (f"   {g:5.1f} GMAC/s" if g else ""))


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    ns = {}
    exec(SRC, ns)
    import io, contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ns["profile"](str(MODEL), threads, reps)
    res = [json.loads(buf.getvalue().split("RESULT ", 1)[1])]
    from bench._pyodide import host_path, run_python
    code = SRC + f"\nprofile({host_path(str(MODEL))!r}, {threads}, {reps})\n"
    proc = run_python(code, timeout=1800, threads=threads)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        return 1
    res.append(json.loads(line[len("RESULT "):]))
    for r in res:
        show(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
