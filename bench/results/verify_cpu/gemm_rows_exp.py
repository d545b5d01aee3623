"""Experiment (2026-12-04, not adopted): the numpy reference with its matrix products as OpenBLAS sgemm on groups of R
rows (R = 2 or 4, the last group zero-padded) instead of one sgemv per row. sgemm with a fixed row count is bitwise
row-invariant here (checked below), so this would keep batch invariance; the question was its cost. Usage, from the
repository root:  OPENBLAS_NUM_THREADS=2 python bench/results/verify_cpu/gemm_rows_exp.py {gemv|gemm2|gemm4}
Output of the three on the 2-core machine: gemm_rows_exp.txt."""
import sys, time, numpy as np
sys.path.insert(0, 'py')
from exactspec.reference import ReferenceModel
M = 'static/models/smollm2-135m-instruct-q4_1.gguf'
kind = sys.argv[1]
bb = int(sys.argv[2]) if len(sys.argv) > 2 else None
m = ReferenceModel.from_file(M, max_len=512, kernel='gemv', block_bytes=bb)
if kind != 'gemv':
    R = int(kind[4:])
    def mv(self, mb, x, out):
        n = x.shape[0]
        pad = (n + R - 1) // R * R
        if pad != n:
            xp = np.zeros((pad, x.shape[1]), np.float32); xp[:n] = x
        else:
            xp = np.ascontiguousarray(x)
        tmp = np.empty((pad, mb.w.shape[0]), np.float32)
        for r0, r1, wb in mb.blocks:
            wt = wb.T
            for j in range(0, pad, R):
                np.matmul(xp[j:j + R], wt, out=tmp[j:j + R, r0:r1])
        out[...] = tmp[:n]
    ReferenceModel._matvec = mv
rng = np.random.default_rng(0)
toks = rng.integers(0, 49152, 110).tolist()
m.forward(toks[:96], 0, 1)
def t(n, reps=5):
    ts = []
    for _ in range(reps):
        m.truncate(96); t0 = time.perf_counter(); m.forward(toks[96:96 + n], 96, n); ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1000
t1 = t(1); t5 = t(5); t9 = t(9)
print(kind, bb, 'T1 %.1f T5 %.1f (%.2f) T9 %.1f (%.2f)' % (t1, t5, t5 / t1, t9, t9 / t1))
# invariance: row 2 of a 5-row forward == single forward of that row after the first two
m.truncate(96); a = m.forward(toks[96:101], 96, 5)
m.truncate(96); m.forward(toks[96:98], 96, 1); b = m.forward(toks[98:99], 98, 1)
print('row invariant', np.array_equal(a[2], b[0]))
