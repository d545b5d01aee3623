"""Prepare the draft's training inputs on the CPU (no torch): tokenised corpora and teacher prompts.

    python -m exactspec_train.prep --src DIR --champion GGUF --workload tests/data/workload.jsonl --out DIR

DIR (--src) holds the unpacked packages: chitchat_dataset/dataset.json (PyPI chitchat-dataset 0.9.0),
deb/usr/share/games/fortunes/ (Debian fortunes, fortunes-min), deb/usr/share/info/python3.11.info.gz
(Debian python3.11-doc); --pkgdir holds the package files themselves, whose sha256 is checked against
`data.SOURCES`. Writes to --out:
  corpus.npy       (n_rows, seq_len) uint16   packed raw-corpus rows (workload-contaminated docs dropped)
  prompts.json     list of message lists (the champion answers them on the GPU)
  prompt_ids.npy   (total,) uint16  concatenated ChatML prompt ids; prompt_off.npy (n+1,) int64 offsets
  prep.json        counts, sources with sha256, seeds
"""
from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

import numpy as np

from . import data as D


def pick_build(key: str, s: dict, pkgdir) -> dict:
    """The source record of the build of `key` found in pkgdir: the pinned file, else one of its `alternatives`
    (each with its own sha256); its sha256 checked. SystemExit naming the files when none is there or it differs."""
    builds = [s] + [dict(s, **alt) for alt in s.get("alternatives", ())]
    have = [b for b in builds if (Path(pkgdir) / b["file"]).exists()]
    if not have:
        raise SystemExit(f"{key}: none of {', '.join(b['file'] for b in builds)} is in {pkgdir}")
    b = have[0]
    p = Path(pkgdir) / b["file"]
    got = D.sha256_file(p)
    if got != b["sha256"]:
        raise SystemExit(f"{p}: sha256 {got} != pinned {b['sha256']}")
    return {k: v for k, v in b.items() if k != "alternatives"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--pkgdir", required=True)
    ap.add_argument("--champion", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=D.PREP_SEED_DEFAULT)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--n-prompts", type=int, default=6144)
    ap.add_argument("--n-long", type=int, default=256)
    ap.add_argument("--doc-fraction", type=float, default=0.5, help="share of python-doc paragraphs kept")
    ap.add_argument("--copy-share", type=float, default=0.0,
                    help="share of teacher prompts whose answers copy or repeat (data._COPY_TASKS; 0: as before)")
    ap.add_argument("--structured-share", type=float, default=0.0,
                    help="share of the other teacher prompts of workload-like kinds (data.structured_task; 0: as "
                         "before)")
    a = ap.parse_args(argv)

    from exactspec.tokenizer import Tokenizer
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sources = []
    for key, s in D.SOURCES.items():
        sources.append(pick_build(key, s, a.pkgdir))
    widx = D.WorkloadIndex.from_file(a.workload)
    tok = Tokenizer.from_gguf(a.champion)
    eot = tok.id_of("<|endoftext|>")
    src = Path(a.src)

    chats = D.load_chitchat(src / "chitchat_dataset" / "dataset.json")
    quotes = D.load_fortunes(src / "deb" / "usr" / "share" / "games" / "fortunes")
    docs = D.load_python_info(src / "deb" / "usr" / "share" / "info" / "python3.11.info.gz")
    rng = random.Random(a.seed)
    docs = [d for d in docs if rng.random() < a.doc_fraction]

    # raw corpus texts: chitchat as ChatML conversations, fortunes and manual paragraphs as plain text
    chat_texts = []
    for conv in chats:
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(conv)]
        chat_texts.append(D.render_chatml(msgs, add_generation_prompt=False))
    stats = {}
    clean = {}
    for name, texts in (("chitchat", chat_texts), ("fortunes", quotes), ("python-doc", docs)):
        keep, dropped = widx.filter_clean(texts)
        clean[name] = keep
        stats[name] = {"docs": len(keep), "dropped_for_workload_overlap": dropped}
    widx.check([t for v in clean.values() for t in v], "raw corpus text")          # belt and braces

    seqs = []
    for name, texts in clean.items():
        n_tok = 0
        for t in texts:
            ids = tok.encode(t)
            n_tok += len(ids)
            seqs.append(ids)
        stats[name]["tokens"] = n_tok
    corpus = D.pack_rows(seqs, a.seq_len, eot, a.seed)                         # (n_rows, seq_len) uint16
    np.save(out / "corpus.npy", corpus)

    # the prompts the champion answers (its own outputs are the main distillation text)
    prompts = D.teacher_prompts(a.seed + 1, a.n_prompts, [c for c in chats], clean["fortunes"], clean["python-doc"],
                                n_long=a.n_long, copy_share=a.copy_share, structured_share=a.structured_share)
    widx.check([m["content"] for msgs in prompts for m in msgs], "teacher prompt")
    ids = [tok.encode(D.render_chatml(msgs)) for msgs in prompts]
    off = np.zeros(len(ids) + 1, dtype=np.int64)                               # (n+1,)
    off[1:] = np.cumsum([len(x) for x in ids])
    np.save(out / "prompt_ids.npy", np.asarray([t for x in ids for t in x], dtype=np.uint16))
    np.save(out / "prompt_off.npy", off)
    with open(out / "prompts.json", "w", encoding="utf-8") as f:
        json.dump(prompts, f, ensure_ascii=False)
    info = {"seed": a.seed, "seq_len": a.seq_len, "corpus_rows": int(corpus.shape[0]), "stats": stats,
            "n_prompts": len(prompts), "n_long_prompts": a.n_long, "copy_share": a.copy_share,
            "structured_share": a.structured_share,
            "prompt_tokens": int(off[-1]),
            "max_prompt_tokens": int(np.diff(off).max()), "sources": sources,
            "workload_sha256": D.sha256_file(a.workload), "champion_sha256": D.sha256_file(a.champion),
            "corpus_sha256": D.sha256_file(out / "corpus.npy"), "prompts_sha256": D.sha256_file(out / "prompts.json")}
    with open(out / "prep.json", "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k != "sources"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
