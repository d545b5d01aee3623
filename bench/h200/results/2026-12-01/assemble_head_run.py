"""Assemble head_run.json (the record exactspec_train.make_head_manifest reads) for the H200 run of 2026-12-01, which
the device call's 600 s limit cut off before head_run `all` could write it: from the variants' checkpoint exports
(bench/h200/export_ckpt.py: head_<variant>.json) and the figures its logs printed (train_logs.tar.gz).

    python bench/h200/results/2026-12-01/assemble_head_run.py HEADS_DIR GEN_NPZ > bench/h200/results/2026-12-01/head_run.json

HEADS_DIR holds head_full.gguf/.json (the resumed full variant, 1234 steps) and head_no-multistep.gguf/.json."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "py"))
import numpy as np  # noqa: E402

from exactspec.formats import sha256_file  # noqa: E402

heads, gen = Path(sys.argv[1]), Path(sys.argv[2])
g = np.load(gen)
data = {"train_answers": 9935, "corpus_chunks": 4096, "held_out": 135, "subset_coverage": 0.9935614304761429,
        "gen_sha256": sha256_file(gen)}                       # (as each variant's log printed them)
argv = ["all", "--champion", "/tmp/champ/champ.gguf", "--data", ".devcarry/head/data", "--workload",
        "tests/data/workload.jsonl", "--gen-out", "/tmp/gen/gen.npz", "--gen-budget-s", "150", "--budget-s", "300",
        "--out", "/tmp/head/out", "--ckpt-dir", "/tmp/head/ckpt", "--variants", "full,no-multistep,no-subset,no-filter"]
run = {"argv": argv, "assembled": "head_run all was cut off by the device call's 600 s limit (data and features "
       "took ~150 s per variant process before training, 4 processes in parallel); full and no-multistep were "
       "exported from their last checkpoints (bench/h200/export_ckpt.py; full after a resumed 190 s solo run), "
       "no-subset and no-filter ran out of GPU memory beside the others (CUDA OOM, see train_logs.tar.gz)",
       "answers": {"done": int(g["done"].sum()), "refused": int(g["refused"].sum()), "prompts": len(g["done"]),
                   "answer_tokens": int(len(g["ids"])), "gen_sha256": data["gen_sha256"],
                   "champion_sha256": str(g["champion_sha256"]), "max_new": int(g["max_new"]),
                   "temps": {"0.0": 0.5, "0.7": 0.4, "1.0": 0.1}},
       "variants": {}}
for v in ("full", "no-multistep"):
    rec = json.loads((heads / f"head_{v}.json").read_text())
    path = heads / f"head_{v}.gguf"
    run["variants"][v] = {"variant": v, "hp": rec["hp"], "steps_done": rec["steps"], "seconds": rec["seconds"],
                          "seed": rec["seed"], "data": data, "eval": None, "gguf": path.name,
                          "gguf_sha256": sha256_file(path), "gguf_bytes": path.stat().st_size,
                          "history": rec["history"], "note": rec["note"],
                          "argv": ["train", "--variant", v, "--budget-s", "300"]
                          + (["--resume", "--budget-s", "190"] if v == "full" else [])}
for v in ("no-subset", "no-filter"):
    run["variants"][v] = {"variant": v, "error_tail": "torch.OutOfMemoryError: CUDA out of memory (4 variant "
                          "processes + the foreign draft's trainer + the engine tests on one GPU)"}
print(json.dumps(run, indent=1))
