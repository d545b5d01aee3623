"""Draft training for ExactSpec (CPython only; never imported by the browser core).

Modules:
- `model`: a small torch Llama (HF rotate-half RoPE, GQA, tied embeddings) that loads GGUF weights through
  `exactspec.formats` and exports back to GGUF; used as the teacher (the champion) and as the draft.
- `data`: training sources (licensed, offline packages), the prompt set for the champion's own answers, and the
  contamination check against the preregistered workload (`tests/data/workload.jsonl`).
- `distill`: the seeded training loop (KL to the teacher's full next-token distribution, or plain next-token loss).
- `teacher`: batched KV-cached generation of the champion's answers.
- `export`: draft -> GGUF (F16/Q8_0) + provenance manifest.

torch is optional for the package as a whole (extra `train`); only `model`, `distill` and `teacher` import it.
"""
