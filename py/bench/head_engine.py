"""The draft head on the WebGPU engine next to its champion: one head pass vs one champion pass, the on-device round,
the head's LM head variants (a vocabulary subset by an indexed LM head, or the full LM head + a mask), and its GPU
memory (weights, KV, scratch; and the champion's kept features it needs).

    python build.py bench head_engine [--backend opengl|vulkan] [--champion GGUF] [--head GGUF ...] [--random]
        [--variants indexed,masked] [--reps 5] [--ks 1,4] [--seq-len 2048] [--prompt-tokens 40] [--timestamps]
        [--chain-rounds 4]
        [--json OUT] [--node PATH] [--make-random OUT.gguf]

--random (default when no --head is given): SmolLM2-shaped random heads made for the champion (its sha256), Q8_0:
a 16,384-id subset with a 1,024-position window (the trained head's shape, py/exactspec_train/head_run.py) and the
full vocabulary. Runs bench/gpu/head_bench.mjs under Node + Dawn (`--backend opengl`: llvmpipe here; `vulkan`: a GPU
host, VK_DRIVER_FILES naming its ICD). Engine variants by environment as bench/gpu/bench.mjs takes them (FUSE=...).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"


def random_heads(champion: Path, out: Path) -> list[tuple[str, Path]]:
    import numpy as np
    from exactspec.drafters.head import HeadConfig, random_head_weights, write_head_gguf
    from exactspec.formats.gguf import GGUFFile
    from exactspec_train.data import sha256_file
    cfg = GGUFFile(champion).config()
    sha = sha256_file(champion)
    subset = min(16384, cfg.vocab_size)
    hc = HeadConfig.for_champion(cfg, champion_sha256=sha, window=min(1024, cfg.seq_len))
    w = random_head_weights(hc, 7)
    ids = np.sort(np.random.default_rng(3).choice(cfg.vocab_size, subset, replace=False))
    a, b = out / "head-subset.gguf", out / "head-full.gguf"
    write_head_gguf(a, hc, w, tensor_type="Q8_0", vocab_ids=ids)
    write_head_gguf(b, HeadConfig.for_champion(cfg, champion_sha256=sha), w, tensor_type="Q8_0")
    return [("subset16384_w1024", a), ("full_vocab", b)]


def main(argv=None) -> int:
    from exactspec.formats import describe
    ap = argparse.ArgumentParser(prog="python build.py bench head_engine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="opengl")
    ap.add_argument("--champion", default=str(CHAMPION))
    ap.add_argument("--head", action="append", default=[])
    ap.add_argument("--random", action="store_true")
    ap.add_argument("--variants", default="indexed,masked", help="LM head of a subset head: indexed, masked")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ks", default="1,4")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--prompt-tokens", type=int, default=40)
    ap.add_argument("--timestamps", action="store_true", help="GPU time per kind of dispatch (timestamp-query)")
    ap.add_argument("--engine-opts", default=None, help="createEngine options as JSON")
    ap.add_argument("--chain-rounds", type=int, default=4, help="rounds of the timed specChain (and its loop)")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--node", default="node", help="node binary")
    ap.add_argument("--make-random", metavar="GGUF", help="only write a random head of the trained one's shape "
                    "(16,384-id subset, 1,024-position window, Q8_0) for the champion, then exit")
    a = ap.parse_args(argv)
    champion = Path(a.champion)
    if not champion.is_file():
        raise SystemExit(f"error: {champion} does not exist (python build.py setup)")
    if a.make_random:
        import shutil
        with tempfile.TemporaryDirectory() as td:
            shutil.copyfile(random_heads(champion, Path(td))[0][1], a.make_random)
        return 0
    with tempfile.TemporaryDirectory() as td:
        heads = [(Path(h).stem, Path(h)) for h in a.head]
        if a.random or not heads:
            heads += random_heads(champion, Path(td))
        specs = []
        for name, path in heads:
            d = describe(path)
            subset = d["metadata"].get("exactspec.head.vocab_subset", 0)
            for v in (a.variants.split(",") if subset else ["full"]):
                opts = {} if v == "full" else {"headVocab": v}
                specs.append({"name": f"{name}:{v}", "model": str(path), "description": d, "opts": opts})
        ids = [int(x) for x in __import__("numpy").random.default_rng(0).integers(100, 20000, a.prompt_tokens)]
        spec = {"backend": a.backend, "champion": {"model": str(champion), "description": describe(champion),
                                                   "seq_len": a.seq_len},
                "heads": specs, "prompt": ids, "reps": a.reps, "ks": [int(k) for k in a.ks.split(",")],
                "timestamps": a.timestamps, "engine_opts": json.loads(a.engine_opts) if a.engine_opts else {},
                "chain_rounds": a.chain_rounds}
        sp = Path(td) / "spec.json"
        sp.write_text(json.dumps(spec))
        env = dict(os.environ)
        if a.backend == "opengl":
            env.setdefault("XDG_RUNTIME_DIR", "/tmp")
            env.setdefault("EGL_PLATFORM", "surfaceless")
        r = subprocess.run([a.node, str(ROOT / "bench" / "gpu" / "head_bench.mjs"), str(sp)], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-6000:], file=sys.stderr)
            return 1
        res = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    c = res["champion"]
    ad = res["adapter"]
    print(f"adapter: {ad.get('description') or ad.get('device') or ad.get('architecture')} "
          f"(kernels {ad.get('kernels', {}).get('matmul')}, fuse {bool(ad.get('kernels', {}).get('fuse'))})")
    g = lambda t: f" (GPU {t['gpu_ms']:.3f})" if t.get("gpu_ms") is not None else ""   # noqa: E731
    if c.get("ahead_loop"):
        print(f"champion alone, decodeAhead runs of 4 back to back with continuations: "
              f"{c['ahead_loop']['ms_per_token']:.3f} ms a token")
    print(f"champion pass: {c['forward']['ms']:.3f} ms{g(c['forward'])}, {c['dispatches']} dispatches; verify "
          + ", ".join(f"k={k}: {v['ms']:.3f} ms" for k, v in c["verify"].items()))
    for name, h in res["heads"].items():
        m = h["memory"]
        print(f"head {name}: pass {h['forward']['ms']:.3f} ms{g(h['forward'])} = {h['head_over_champion']:.3f} of a "
              f"champion pass, {h['dispatches']} dispatches; round " + ", ".join(
                  f"k={k}: {v['ms']:.3f} ms{g(v)}" for k, v in h["round"].items())
              + f"; memory {m['total'] / 1e6:.2f} MB (weights {m['weights'] / 1e6:.2f}, KV {m['kv'] / 1e6:.2f}, "
              f"scratch {m['scratch'] / 1e6:.2f}) + the champion's features {m['champion_features'] / 1e6:.2f} MB")
        for k, v in (h.get("chain") or {}).items():
            loop = (h.get("chain_loop") or {}).get(k)
            print(f"   specChain k={k}: {v['rounds']} rounds {v['ms']:.3f} ms{g(v)} = {v['ms'] / v['rounds']:.3f} ms a round"
                  + (f" (GPU {v['gpu_ms'] / v['rounds']:.3f})" if v.get("gpu_ms") is not None else "")
                  + f", {v['dispatches']} dispatches, encode+submit {v['encode_ms']:.3f} ms (submit {v['submit_ms']:.3f}, "
                  f"pre-encoded {v['pre_encoded']})"
                  + (f"; back to back with continuations: {loop['ms_per_round']:.3f} ms a round, "
                     f"{loop['ms_per_token']:.3f} ms a token ({loop['tokens']} tokens)" if loop else ""))
        if h.get("profile_us"):
            print("   GPU us per kind: " + ", ".join(f"{k} {v:.1f}" for k, v in h["profile_us"].items()))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
