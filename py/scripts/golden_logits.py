"""Golden logits for SmolLM2-135M-Instruct (Q4_1 GGUF) from an INDEPENDENT implementation.

Oracle chosen: Hugging Face transformers (LlamaForCausalLM) loading the GGUF on CPU torch, float32, eager
attention. transformers dequantises the GGUF weights itself (through PyPI gguf) and un-permutes Q/K itself, then
runs float32 activations end to end, exactly the arithmetic our numpy reference claims (float32 weights from the
same Q4_1 blocks, float32 activations). The only expected differences are summation order (~1e-5).
We did NOT use llama.cpp (llama-cpp-python): its CPU path quantises activations to 8 bits before Q4 matmuls,
which moves logits by ~1e-1 and would need a much looser bound.

Output (committed, small): tests/data/golden_smollm2.json with, per prompt, the token ids (prompt tokens +
greedy continuation chosen by the oracle) and for EVERY position the top-20 ids and their float32 logits.
tests/test_golden.py checks exactspec.reference against it without torch or transformers.

Run (needs `pip install torch==2.13.0 transformers`; never fetch other torch builds):
    python py/scripts/golden_logits.py [--model static/models/smollm2-135m-instruct-q4_1.gguf]
        [--out tests/data/golden_smollm2.json] [--positions 80] [--top 20]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # the GGUF is local; never reach a model hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PROMPTS = [
    {"kind": "chat", "messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]},
    {"kind": "chat", "messages": [{"role": "system", "content": "You are a concise assistant."},
                                  {"role": "user", "content": "Write a short poem about the sea."}]},
    {"kind": "text", "text": "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village,"},
    {"kind": "text", "text": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"},
]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="static/models/smollm2-135m-instruct-q4_1.gguf")
    ap.add_argument("--out", default="tests/data/golden_smollm2.json")
    ap.add_argument("--positions", type=int, default=80, help="total positions per prompt (prompt + greedy)")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args(argv)

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    folder, fname = os.path.split(os.path.abspath(args.model))
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    assert next(model.parameters()).dtype == torch.float32
    print(f"loaded in {time.time() - t0:.1f}s: {type(model).__name__}", file=sys.stderr)

    out = {"model": os.path.basename(args.model), "model_sha256": sha256(args.model),
           "oracle": f"transformers {transformers.__version__}, torch {torch.__version__}, CPU float32, eager "
                     "attention, GGUF dequantised by transformers", "top": args.top, "prompts": []}
    for p in PROMPTS:
        if p["kind"] == "chat":
            text = tok.apply_chat_template(p["messages"], tokenize=False, add_generation_prompt=True)
        else:
            text = p["text"]
        ids = tok(text, add_special_tokens=False)["input_ids"]
        n_prompt = len(ids)
        if n_prompt >= args.positions:
            raise SystemExit(f"prompt longer than --positions: {n_prompt}")
        # greedy continuation by the oracle itself (one full forward per step: simple and independent of caching)
        while len(ids) < args.positions:
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
        logits = model(torch.tensor([ids])).logits[0].float()          # (positions, vocab)
        top = torch.topk(logits, args.top, dim=-1)
        out["prompts"].append({
            "text": text, "n_prompt": n_prompt, "token_ids": ids,
            "top_ids": top.indices.tolist(),                            # (positions, top)
            "top_logits": [[float(f"{v:.6g}") for v in row] for row in top.values.tolist()],   # (positions, top)
            "continuation": tok.decode(ids[n_prompt:]),
        })
        print(f"prompt {len(out['prompts'])}: {n_prompt} prompt tokens -> {tok.decode(ids[n_prompt:])!r}",
              file=sys.stderr)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
