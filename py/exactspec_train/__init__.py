"""Draft training for ExactSpec (CPython only; never imported by the browser core).

Modules:
- `model`: a small torch Llama (HF rotate-half RoPE, GQA, tied embeddings) that loads GGUF weights through
  `exactspec.formats` and exports back to GGUF; used as the teacher (the champion) and as the draft.
- `data`: training sources (licensed, offline packages), the prompt set for the champion's own answers, and the
  contamination check against the preregistered workload (`tests/data/workload.jsonl`).
- `distill`: the seeded training loop (KL to the teacher's full next-token distribution, or plain next-token loss).
- `teacher`: batched KV-cached generation of the champion's answers.
- `export`: draft -> GGUF (F16/Q8_0) + provenance manifest.
- `head`, `head_run`, `make_head_manifest`: the draft head on the champion's features (exactspec.drafters.head):
  training (EAGLE-3 training-time test, FR-Spec vocabulary subset, AdaSPEC-style token filtering), the one-call GPU
  job (answers -> variants in parallel -> eval + GGUF export; bench/h200/train_head.sh) and its manifest.
- `accept`: the decode loop's rounds replayed over simulated acceptance (standalone drafts and head chains).

torch is optional for the package as a whole (extra `train`); only `model`, `distill` and `teacher` import it.
"""
