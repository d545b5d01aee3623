"""Measure the page the way a person meets it (prints figures; not a test):
cold boot (fresh profile: runtime + SmolLM2 import to OPFS + load), warm boot (reload: OPFS only), the import
time of SmolLM2, and the CPU fallback's decode speed.

    python tests/browser/measure_page.py [--tokens 32] [--backend cpu|default]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "py"))

import build  # noqa: E402
from conftest import CHROMIUM_ARGS, chromium_path  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--backend", choices=["cpu", "default"], default="cpu")
    ap.add_argument("--threads", type=int, default=None,
                    help="the CPU kernel's threads (the page's ?threads=; default: the page's own choice)")
    a = ap.parse_args()
    build.setup_pyodide()
    srv = build.make_server(0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    query = ["cpu=1"] if a.backend == "cpu" else []
    if a.threads is not None:
        query.append(f"threads={a.threads}")
    url = f"http://127.0.0.1:{srv.server_address[1]}/" + ("?" + "&".join(query) if query else "")
    from playwright.sync_api import sync_playwright
    out = {}
    with tempfile.TemporaryDirectory() as prof, sync_playwright() as p:
        kw = {"headless": True, "args": CHROMIUM_ARGS}
        if chromium_path():
            kw["executable_path"] = chromium_path()
        ctx = p.chromium.launch_persistent_context(prof, **kw)
        page = ctx.new_page()
        page.set_default_timeout(600_000)
        for label in ("cold", "warm"):
            t0 = time.time()
            page.goto(url)
            r = page.evaluate("exactspec.ready()")
            out[f"boot_{label}_s"] = round(time.time() - t0, 2)
            out[f"stages_{label}_ms"] = {s["stage"]: s["ms"] for s in r["stages"]}
            out["backend"] = r["backend"]
            out["cpu_threads"] = next((s.get("threads") for s in r["stages"] if s["stage"] == "cpu"), None)
        # import time of the champion alone: download + streaming sha256 + OPFS write + GGUF validation
        champ = [m for m in r["models"] if m["role"] == "champion"][0]
        t0 = time.time()
        page.evaluate("(m) => exactspec.importModel({url: '/models/' + m.name + '.gguf', name: 'import-timing', "
                      "sha256: m.sha256})", champ)
        out["import_smollm2_s"] = round(time.time() - t0, 2)
        page.evaluate("exactspec.deleteModel('import-timing')")
        # first token: a fresh prompt (full prefill); decode: a second run of the same prompt (its prefix is reused
        # from the KV cache), tokens after the first over the time after the first
        prompt = "Write a long story about a lighthouse keeper."
        g = {"prompt": prompt, "chat": True, "temperature": 0, "drafter": "none"}
        short = page.evaluate("(p) => exactspec.generate(p)", {**g, "max_new_tokens": 2})
        out["ttft_cold_prefill_ms"] = round(short["stats"]["ttft_ms"])
        long = page.evaluate("(p) => exactspec.generate(p)", {**g, "max_new_tokens": a.tokens})
        n = len(long["token_ids"]) - 1
        dt = (long["stats"]["elapsed_ms"] - long["stats"]["ttft_ms"]) / 1000
        out["decode_tokens_per_s"] = round(n / dt, 2) if dt > 0 else None
        out["prompt_tokens"] = long["prompt_tokens"]
        out["tokens_per_s_overall"] = round(long["stats"]["tokens_per_s"], 2)
        if r["active"]["draft"]:
            md = page.evaluate("(p) => exactspec.generate(p)", {**g, "max_new_tokens": a.tokens, "drafter": "model",
                                                                 "k": 4})
            assert md["token_ids"] == long["token_ids"], "draft-model speculation changed the greedy answer"
            out["draft_model"] = r["active"]["draft"]
            out["draft_tau"] = round(md["stats"]["tau"], 3)
            out["draft_acceptance_by_position"] = [round(x, 2) for x in md["stats"]["acceptance_by_position"]]
            out["draft_tokens_per_s_overall"] = round(md["stats"]["tokens_per_s"], 2)
            ad = page.evaluate("(p) => exactspec.generate(p)", {**g, "max_new_tokens": a.tokens, "drafter": "model",
                                                                 "k": 4, "adaptive": True})
            assert ad["token_ids"] == long["token_ids"], "adaptive speculation changed the greedy answer"
            out["draft_adaptive_tokens_per_s_overall"] = round(ad["stats"]["tokens_per_s"], 2)
            out["draft_adaptive_rounds_off"] = ad["stats"].get("spec_disabled_rounds")
        ng = page.evaluate("(p) => exactspec.generate(p)", {**g, "max_new_tokens": a.tokens, "drafter": "ngram",
                                                             "k": 4})
        assert ng["token_ids"] == long["token_ids"], "n-gram speculation changed the greedy answer"
        out["ngram_tau"] = round(ng["stats"]["tau"], 3)
        out["ngram_tokens_per_s_overall"] = round(ng["stats"]["tokens_per_s"], 2)
        ctx.close()
    srv.shutdown()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
