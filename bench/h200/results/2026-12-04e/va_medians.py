"""Medians over three runs of the n-gram drafter's speedup (bench product's table, same process as the champion
alone), V (the device goes on after a verify) against N (it waits for the decode loop), per stratum and setting.
    python bench/h200/results/2026-12-04e/va_medians.py 4   (calls 4-5: verify_ahead, b10543c)
    python bench/h200/results/2026-12-04e/va_medians.py 6   (call 6: verify's `then`, the commit after it)
Unpacks the call's .tgz files to /tmp/va_medians first."""
import statistics as st
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
T = Path("/tmp/va_medians")


def parse(f):
    out = {}
    for line in open(f):
        p = line.split()
        if len(p) > 10 and p[1] == "ngram":
            out[(p[0], p[4])] = float(p[9])       # (stratum, adapt) -> speedup median of the file's runs
    return out


def files(call):
    T.mkdir(exist_ok=True)
    if call == "4":
        subprocess.run(["tar", "xzf", str(HERE / "call5_va_runs2_3.tgz"), "-C", str(T)], check=True)
        return {1: str(HERE / "call4_%s.txt"), 2: str(T / "r2_%s.txt"), 3: str(T / "va3/%s.txt")}
    subprocess.run(["tar", "xzf", str(HERE / "call6_verify_then.tgz"), "-C", str(T)], check=True)
    return {i: str(T / f"vt{i}/%s.txt") for i in (1, 2, 3)}


call = sys.argv[1] if len(sys.argv) > 1 else "6"
fs = files(call)
for name, tag in (("64 tokens", "va"), ("256 tokens", "va_long")):
    print("==", name, "(adapt off: forced; on: only while it pays)")
    rows = {}
    for i, pat in fs.items():
        for side in "VN":
            for key, sp in parse(pat % f"{tag}_{side}").items():
                rows.setdefault(key, {}).setdefault(side, []).append(sp)
    for key, d in rows.items():
        print(f"{key[0]:18s} {key[1]:4s} V {st.median(d['V']):.2f} {d['V']}  N {st.median(d['N']):.2f} {d['N']}")
