"""The constraint engine's time per emitted token in JSON mode on a device that runs ahead, in the order bench product
answers (per prompt: the champion alone, then the n-gram at k = 2, then at k = 4), from a fresh session: the first
configuration to reach a grammar state pays for it (its masks, forced runs, the bytes its frames accept), later
ones find it cached. SmolLM2 on the numpy reference, wrapped as a device that verifies with argmax ids and runs
ahead (as the WebGPU engine does: decode.py's json_ids path), the 12 strict-JSON-extraction prompts with their frozen
schemas (max_new_tokens as the workload gives it), 2 passes over them; the session keeps 4 schemas' constraints, so
each pass starts cold for each prompt. Prints the constraint's ms per token (the answers' `mask_ms` stat) and the
host's (each answer's time outside the model's forwards: the decode loop, the drafters, the constraint; what a GPU
does not hide, since JSON mode's rounds hint no continuation) per configuration, and a digest of every answer's
text.

    python bench/results/json_mode/constraint_host.py [--tree DIR] [--pyodide] [--prompts N]

--tree: the exactspec tree to import (default this checkout; e.g. a `git worktree` of an older revision, to compare);
--pyodide: run the same in Pyodide 0.27.7 under Node (py/bench/_pyodide.py; `python build.py setup`), the page's
Python.
"""
import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

BODY = r'''
import asyncio, hashlib, json, sys, time
sys.path.insert(0, TREE + "/py")
from exactspec.backend import RunsAhead, verify_by_forwards
from exactspec.reference import ReferenceModel
from exactspec.session import Session


class Device(RunsAhead):
    def verify(self, tokens, start_pos, pick, rows=False):
        return verify_by_forwards(self.inner, tokens, start_pos, pick, rows, picker=self.picker)

    def offers(self, method):
        return method in ("decode_ahead", "verify")


FWD = [0.0]                # seconds inside the model's forwards (the device's work) during the answers
_forward = ReferenceModel.forward


def _timed_forward(self, *a, **k):
    t = time.perf_counter()
    try:
        return _forward(self, *a, **k)
    finally:
        FWD[0] += time.perf_counter() - t


ReferenceModel.forward = _timed_forward
rows = [json.loads(x) for x in open(ROOT + "/tests/data/workload.jsonl") if x.strip()]
rows = [r for r in rows if r["stratum"] == "json_extraction"][:NPROMPTS]
schemas = json.load(open(ROOT + "/tests/data/json_schemas.json"))["workload"]
champ = ROOT + "/static/models/smollm2-135m-instruct-q4_1.gguf"
s = Session()
s.load("champion", champ, role="champion", backend=Device(ReferenceModel.from_file(champ, max_len=1024), ahead_max=4),
       backend_name="webgpu")
confs = [("alone", {"speculation": False}), ("ngram k=2", {"drafter": "ngram", "k": 2, "adaptive": False}),
         ("ngram k=4", {"drafter": "ngram", "k": 4, "adaptive": False})]
tot = {n: [0, 0.0, 0.0] for n, _ in confs}     # tokens, constraint ms, host ms (the answer's time outside forwards)
texts = []


async def one(row, conf):
    for m in s.models.values():
        m.cache.truncate(0)
    req = {"chat": row["messages"], "max_new_tokens": row["max_new_tokens"], "temperature": 0.0, **conf,
           "response_format": {"type": "json_schema", "schema": schemas[row["id"]]}}
    ids = s.prompt_ids(req)
    r = s.models[s.champion].cache.forward(ids[:-1], 0, 1)
    if asyncio.iscoroutine(r):
        await r
    FWD[0] = 0.0
    out = await s.generate(req)
    out["forward_ms"] = FWD[0] * 1000.0
    return out


async def main():
    for _ in range(2):
        for row in rows:
            for name, conf in confs:
                out = await one(row, conf)
                tot[name][0] += out["stats"]["new_tokens"]
                tot[name][1] += out["stats"].get("mask_ms") or 0.0
                tot[name][2] += out["stats"]["elapsed_ms"] - out["forward_ms"]
                texts.append(out["text"])
    print("constraint: " + "; ".join(f"{n}: {v[1] / max(1, v[0]):.3f} ms a token ({v[1]:.0f} ms over {v[0]} tokens)"
                                     for n, v in tot.items()))
    print("host (the answers' time outside the model's forwards): "
          + "; ".join(f"{n}: {v[2] / max(1, v[0]):.3f} ms a token" for n, v in tot.items()))
    print("answers (sha256 of every text):", hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16])
'''

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=str(ROOT))
    ap.add_argument("--pyodide", action="store_true")
    ap.add_argument("--prompts", type=int, default=12)
    a = ap.parse_args()
    tree = str(Path(a.tree).resolve())
    print(f"# {'Pyodide 0.27.7 under Node' if a.pyodide else 'CPython ' + sys.version.split()[0]}, exactspec from {tree}")
    if not a.pyodide:
        g = {"TREE": tree, "ROOT": str(ROOT), "NPROMPTS": a.prompts}
        exec(BODY, g)
        asyncio.run(g["main"]())
        return
    sys.path.insert(0, str(ROOT / "py"))
    from bench._pyodide import host_path, run_python   # the tree's py/ goes first on Pyodide's sys.path (BODY)
    src = f"TREE = {host_path(tree)!r}\nROOT = {host_path(ROOT)!r}\nNPROMPTS = {a.prompts}\n{BODY}\nawait main()\n"
    r = run_python(src, timeout=1800)
    print(r.stdout.rstrip())
    if r.returncode:
        sys.exit(r.stderr[-2000:])


if __name__ == "__main__":
    main()
