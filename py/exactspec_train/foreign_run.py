"""Train the foreign draft (Llama-2 vocabulary) on the GPU within a time budget: text-level distillation on the
champion's own answers (in the draft's view, exactspec_train.foreign) plus the raw corpora.

    python -m exactspec_train.foreign_run --budget-s 300 --gen /tmp/gen/gen.npz --data .devcarry/vocab/data \
        --out /tmp/foreign/out [--champion /tmp/champ/champ.gguf]

Runs beside another job on the same GPU (the draft head's, which writes the champion's answers to gen.npz): training
starts at once on the corpora; a helper process waits for gen.npz (up to --gen-wait-s after the start), turns the
answers and their prompts into the draft's view and hands the rows over; from then on `--gen-weight` of each batch
comes from them. Without gen.npz in time it trains on the corpora alone (run.json says so). The learning rate follows
the wall clock (warm-up, cosine to 10% at the end of the budget), so any budget gives a finished schedule.

gen.npz (exactspec_train.head_run gen, or run_device's): ids (uint16) + off: the answers; prompt_ids + prompt_off:
their prompts (else --data's prompt_ids.npy / prompt_off.npy, paired by index); done, refused (optional).

Writes to --out: draft_llama2.gguf (Q8_0 matrices, F32 norms, the draft's tokenizer in its metadata), run.json
(config, seeds, data counts, losses, held-out loss / top-1 agreement on the champion's answers, sha256), log.txt.
Runs on CUDA when available (bf16 autocast), else on the CPU in float32 (smoke tests: --tiny; a fine-tune with
--init-from).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import data as D


def _wait_and_convert(gen_path, deadline, data_dir, out_dir, workload, prompt_weight, seq_len, seed, workers):
    """Helper process: wait for gen.npz until `deadline` (time.time()), convert, write gen_rows.npy / gen_w.npy /
    gen_info.json into out_dir (the info file last: the trainer looks for it)."""
    from .foreign import pack, view_sequences
    from exactspec.tokenizer import Tokenizer
    out = Path(out_dir)
    info = {"status": "absent", "path": str(gen_path)}
    g = None
    while time.time() < deadline:
        if os.path.exists(gen_path):
            try:
                g = dict(np.load(gen_path))
                break
            except Exception as e:                  # still being written
                info["last_error"] = str(e)[:200]
        time.sleep(2.0)
    if g is None:
        (out / "gen_info.json").write_text(json.dumps(info))
        return
    t0 = time.time()
    ctok_path, dtok_path = Path(data_dir) / "champion_tok.gguf", Path(data_dir) / "draft_tok.gguf"
    ctok = Tokenizer.from_gguf(ctok_path)
    dtok = Tokenizer.from_gguf(dtok_path)
    ids, off = g["ids"], g["off"]
    n = len(off) - 1
    done = g["done"] if "done" in g else np.ones(n, bool)
    refused = g["refused"] if "refused" in g else np.zeros(n, bool)
    if "prompt_ids" in g:
        pid, poff = g["prompt_ids"], g["prompt_off"]
        paired = "gen.npz"
    else:
        pid, poff = np.load(Path(data_dir) / "prompt_ids.npy"), np.load(Path(data_dir) / "prompt_off.npy")
        paired = "--data prompts by index" if n % (len(poff) - 1) == 0 else "none"
    n_p = len(poff) - 1
    widx = D.WorkloadIndex.from_file(workload)
    items, dropped = [], 0
    for i in range(n):
        if not done[i] or refused[i]:
            continue
        ans = ids[off[i]:off[i + 1]].astype(np.int64).tolist()
        if widx.hits(ctok.decode(ans)):
            dropped += 1
            continue
        pr = pid[poff[i % n_p]:poff[i % n_p + 1]].astype(np.int64).tolist() if paired != "none" else []
        items.append((pr, ans))
    seqs = view_sequences(items, ctok_path, dtok_path, workers)
    rows, w = pack(seqs, seq_len, dtok.eos_id, seed, prompt_weight)
    np.save(out / "gen_rows.tmp.npy", rows)
    np.save(out / "gen_w.tmp.npy", w)
    os.replace(out / "gen_rows.tmp.npy", out / "gen_rows.npy")
    os.replace(out / "gen_w.tmp.npy", out / "gen_w.npy")
    info = {"status": "ok", "path": str(gen_path), "sha256": D.sha256_file(gen_path), "answers": len(items),
            "answers_available": int(done.sum()), "refused_in_gen": int(refused.sum()),
            "refused_here_for_workload": dropped, "prompts_paired_from": paired,
            "answer_tokens": int(sum(len(a) for _, a in items)), "draft_tokens": int(sum(len(s) for s, _ in seqs)),
            "rows": int(rows.shape[0]), "convert_s": round(time.time() - t0, 1),
            "prompts_sha256": str(g["prompts_sha256"]) if "prompts_sha256" in g else None}
    (out / "gen_info.tmp.json").write_text(json.dumps(info))
    os.replace(out / "gen_info.tmp.json", out / "gen_info.json")


def init_embedding(champion_gguf, ctok, dtok, dim: int, seed: int) -> np.ndarray:
    """(draft vocab, dim): for a draft token whose bytes the champion also has, the PCA of the champion's embedding
    of that token; other tokens random with the same mean row norm."""
    from exactspec.formats.gguf import GGUFFile
    from exactspec.vocab import Intersection
    from .model import pca_embedding
    emb = GGUFFile(champion_gguf).tensor("token_embd.weight")                    # (49152, 576)
    pca = pca_embedding(emb, dim)                                                # (49152, dim)
    inter = Intersection(ctok, dtok, pca.shape[0], dtok.vocab_size)
    norm = float(np.linalg.norm(pca, axis=1).mean())
    rng = np.random.default_rng(seed)
    out = rng.standard_normal((dtok.vocab_size, dim)).astype(np.float32)
    out *= norm / np.linalg.norm(out, axis=1, keepdims=True)
    out[inter.d_ids] = pca[inter.c_ids]
    return out, int(len(inter.d_ids))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-s", type=float, required=True, help="wall clock for everything, export included")
    ap.add_argument("--gen", default="/tmp/gen/gen.npz")
    ap.add_argument("--gen-wait-s", type=float, default=None, help="how long to wait for gen.npz (default: 60%% "
                                                                    "of the budget)")
    ap.add_argument("--data", required=True, help="exactspec_train.foreign_prep's output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--champion", default=None, help="the champion GGUF, for the embedding init (optional)")
    ap.add_argument("--workload", default="tests/data/workload.jsonl")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup-s", type=float, default=10.0)
    ap.add_argument("--max-epochs", type=float, default=8.0,
                    help="stop (and end the schedule) after this many passes over the rows, if before the budget")
    ap.add_argument("--corpus-epochs-first", type=float, default=3.0,
                    help="while gen.npz may still come: at most this many passes over the corpora, then wait idle")
    ap.add_argument("--gen-weight", type=float, default=0.7, help="share of batch rows from the champion's answers")
    ap.add_argument("--prompt-weight", type=float, default=0.2, help="loss weight of prompt tokens")
    ap.add_argument("--workers", type=int, default=0, help="processes converting gen.npz (0: CPUs - 2, at most 8)")
    ap.add_argument("--dim", type=int, default=None)
    ap.add_argument("--n-layers", type=int, default=None)
    ap.add_argument("--hidden-dim", type=int, default=None)
    ap.add_argument("--init-from", default=None, help="start from this exported draft GGUF (same config)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny model, short rows")
    a = ap.parse_args(argv)
    a.argv = sys.argv[1:] if argv is None else list(argv)
    t_start = time.time()
    import torch

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in ("gen_rows.npy", "gen_w.npy", "gen_info.json"):
        (out / f).unlink(missing_ok=True)
    log = D.run_log(out, t_start)

    data = Path(a.data)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(a.seed)
    corpus = np.load(data / "corpus.npy")                                        # (m, L) uint16 draft ids
    seq_len = min(128 if a.tiny else a.seq_len, corpus.shape[1])                 # every source's row length
    batch = 2 if a.tiny else a.batch
    wait_s = a.budget_s * 0.6 if a.gen_wait_s is None else a.gen_wait_s
    import multiprocessing as mp
    workers = a.workers or max(1, min(8, (os.cpu_count() or 2) - 2))
    # (not a daemon: it converts in a pool of its own, and daemonic processes may not have children — that cost
    # the H200 run of 2026-12-01 the champion's answers; it is terminated below whatever happens)
    conv = mp.get_context("spawn").Process(target=_wait_and_convert, daemon=False, args=(
        a.gen, t_start + wait_s, str(data), str(out), a.workload, a.prompt_weight, seq_len, a.seed + 1, workers))
    conv.start()
    try:
        return _train(a, t_start, dev, out, data, corpus, seq_len, batch, conv, log, wait_s)
    finally:
        if conv.is_alive():
            conv.terminate()
        conv.join(5)


def _train(a, t_start, dev, out, data, corpus, seq_len, batch, conv, log, wait_s) -> int:
    import torch
    import torch.nn.functional as F
    from exactspec.tokenizer import Tokenizer
    from .export import export_gguf
    from .foreign import draft_config
    from .model import TorchLlama
    reserve = 8.0 if a.tiny else max(20.0, 0.06 * a.budget_s)           # eval + export
    deadline = t_start + a.budget_s - reserve
    log(f"device {dev} torch {torch.__version__}; waiting up to {wait_s:.0f} s for {a.gen} in a helper process")

    ctok = Tokenizer.from_gguf(data / "champion_tok.gguf")
    dtok = Tokenizer.from_gguf(data / "draft_tok.gguf")
    prep = json.loads((data / "foreign_prep.json").read_text())
    if corpus.shape[1] > seq_len:
        corpus = np.ascontiguousarray(corpus[:, :seq_len])
    n_eval_c = max(1, len(corpus) // 100)
    sources = [[corpus[n_eval_c:], None, 1.0]]                                   # [rows, token weights, weight]
    over = {k: v for k, v in (("dim", a.dim), ("n_layers", a.n_layers), ("hidden_dim", a.hidden_dim)) if v}
    if a.tiny:
        over = dict(dict(dim=64, n_layers=2, hidden_dim=128, n_heads=2, n_kv_heads=2, head_dim=32), **over)
    cfg = draft_config(dtok.vocab_size, **over)
    model = TorchLlama(cfg)
    model.init_random(a.seed)
    init = "N(0, 0.02)"
    if a.init_from:                              # continue an exported draft (e.g. fine-tune it on the answers)
        start = TorchLlama.from_gguf(a.init_from)
        if start.config.to_json() != cfg.to_json():
            raise SystemExit(f"--init-from {a.init_from}: its config {start.config} is not {cfg}")
        model = start
        init = f"from {Path(a.init_from).name} (sha256 {D.sha256_file(a.init_from)})"
    elif a.champion and os.path.exists(a.champion):
        emb, n_shared = init_embedding(a.champion, ctok, dtok, cfg.dim, a.seed)
        with torch.no_grad():
            model.w("token_embd.weight").copy_(torch.from_numpy(emb))
            model.w("output_norm.weight").fill_(1.0 / float(np.linalg.norm(emb, axis=1).mean()))
        init = f"embedding: PCA of the champion's for the {n_shared} draft tokens it shares, random elsewhere"
    model = model.to(dev)
    log(f"draft {cfg}; {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters; init: {init}")
    decay = [p for n, p in model.p.items() if p.ndim >= 2]
    no_decay = [p for n, p in model.p.items() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(a.seed)
    gen_info, gen_eval = None, None
    hist = []
    step = 0
    t_train = time.time()
    step_s = None                                # measured seconds per step (moving average)
    seen = 0.0                                   # rows drawn, in epochs of the rows there were at the time
    frac = 0.0                                   # of the cosine schedule: steps done / steps planned, never back
    idle_s = 0.0
    t_last = time.time()
    while time.time() < deadline and frac < 1.0:
        if gen_info is None and not conv.is_alive() and not (out / "gen_info.json").exists():
            gen_info = {"status": "helper failed", "exit_code": conv.exitcode}
            log(f"gen: the helper converting {a.gen} failed (exit code {conv.exitcode}): corpora only")
        if gen_info is None and (out / "gen_info.json").exists():
            gen_info = json.loads((out / "gen_info.json").read_text())
            if gen_info["status"] == "ok":
                rows, w = np.load(out / "gen_rows.npy"), np.load(out / "gen_w.npy")
                if rows.shape[1] > seq_len:
                    rows, w = rows[:, :seq_len], w[:, :seq_len]
                n_ev = max(1, len(rows) // 50)
                gen_eval = (rows[:n_ev], w[:n_ev])
                if len(rows) > n_ev:
                    sources = [[sources[0][0], None, 1.0 - a.gen_weight], [rows[n_ev:], w[n_ev:], a.gen_weight]]
                gen_info["joined_at_step"] = step
                gen_info["joined_at_s"] = round(time.time() - t_start, 1)
            log(f"gen: {gen_info}")
        rows_total = sum(len(src[0]) for src in sources)
        waiting = gen_info is None and conv.is_alive()
        if waiting and seen >= a.corpus_epochs_first:
            time.sleep(1.0)                      # enough of the corpora alone: leave the GPU to the other job
            idle_s += 1.0
            continue
        # the plan: as many steps as the time left allows, at most max_epochs over the rows there are
        left = (deadline - time.time()) / step_s if step_s else 1e9
        epochs_left = max(0.0, a.max_epochs - seen) * rows_total / batch
        if not waiting and epochs_left <= 0:
            break                                # the epoch cap (the schedule has reached its floor)
        planned = step + max(1.0, min(left, epochs_left if not waiting else 1e9))
        frac = max(frac, step / planned)
        wts = np.array([s[2] for s in sources])
        src = rng.choice(len(sources), size=batch, p=wts / wts.sum())
        pick = [(k, int(rng.integers(len(sources[k][0])))) for k in src]
        x = torch.from_numpy(np.stack([sources[k][0][i] for k, i in pick]).astype(np.int64)).to(dev)   # (B, L)
        tw = np.stack([sources[k][1][i] if sources[k][1] is not None else np.ones(x.shape[1], np.float32)
                       for k, i in pick])                                                               # (B, L)
        wt = torch.from_numpy(tw[:, 1:].reshape(-1)).to(dev)
        warm = min(1.0, (time.time() - t_train - idle_s + 1e-3) / max(a.warmup_s, 1e-3))
        lr = a.lr * min(warm, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = model(x[:, :-1])                                                                   # (B, L-1, V)
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1),
                                 reduction="none")
            loss = (ce * wt).sum() / wt.sum().clamp_min(1e-6)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t_now = time.time()
        if step >= 2:                            # the first steps include warm-up of the kernels
            dt = t_now - t_last
            step_s = dt if step_s is None else 0.95 * step_s + 0.05 * dt
        t_last = t_now
        seen += batch / rows_total
        if step % 100 == 0:
            hist.append({"step": step, "loss": float(loss.detach()), "grad_norm": float(gn), "lr": lr,
                         "s": round(time.time() - t_start, 1), "sources": len(sources)})
            log(f"step {step} loss {float(loss.detach()):.4f} gn {float(gn):.2f} lr {lr:.2e}")
        step += 1
    train_s = time.time() - t_train
    capped = frac >= 1.0 or (seen >= a.max_epochs and time.time() < deadline)
    log(f"trained {step} steps in {train_s:.0f} s ({'epoch cap' if capped else 'time budget'}; idle "
        f"{idle_s:.0f} s waiting for gen.npz; {seen:.1f} epochs)")
    if conv.is_alive():
        conv.terminate()
        log("gen.npz did not arrive (or was still being converted): corpora only")

    @torch.no_grad()
    def evaluate(rows, w):
        tot = agree = n = 0.0
        for s in range(0, len(rows), 4):
            x = torch.from_numpy(rows[s:s + 4].astype(np.int64)).to(dev)
            ww = torch.from_numpy(w[s:s + 4, 1:] > 0.5).to(dev) if w is not None else torch.ones_like(x[:, 1:],
                                                                                                    dtype=torch.bool)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                lg = model(x[:, :-1]).float()
            ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
            m = ww.reshape(-1)
            tot += float(ce[m].sum())
            agree += float((lg.argmax(-1) == x[:, 1:]).reshape(-1)[m].sum())
            n += float(m.sum())
        return {"loss": tot / max(n, 1), "top1": agree / max(n, 1), "tokens": int(n)}

    model.eval()
    ev = {"corpus": evaluate(corpus[:n_eval_c], None)}
    if gen_eval is not None:
        ev["answers"] = evaluate(*gen_eval)
    log(f"eval {ev}")
    path = out / "draft_llama2.gguf"
    export_gguf(path, cfg, model.to_numpy(), None, name="exactspec-draft-llama2-vocab",
                tokenizer_metadata=dtok.gguf_metadata(),
                extra_metadata={"exactspec.champion_sha256": prep["prep"]["champion_sha256"],
                                "exactspec.training": "text-level distillation: next-token cross-entropy on the "
                                                      "champion's answers in the draft's vocabulary, and corpora"})
    record = {"argv": a.argv, "seed": a.seed, "draft_config": cfg.to_json(),
              "init": init, "init_from": a.init_from, "device": str(dev), "torch": torch.__version__, "budget_s": a.budget_s,
              "batch": batch, "seq_len": seq_len, "lr": a.lr, "warmup_s": a.warmup_s, "gen_weight": a.gen_weight,
              "prompt_weight": a.prompt_weight, "steps": step, "train_s": round(train_s, 1), "max_epochs": a.max_epochs, "epochs": round(seen, 2),
              "idle_s": idle_s, "step_s": step_s,
              "tokens_seen": int(step * batch * (seq_len - 1)), "corpus_rows": int(len(corpus)), "gen": gen_info,
              "eval": ev, "history": hist, "prep_sha256": D.sha256_file(data / "foreign_prep.json"),
              "gguf_sha256": D.sha256_file(path), "gguf_bytes": path.stat().st_size,
              "total_s": round(time.time() - t_start, 1)}
    (out / "run.json").write_text(json.dumps(record, indent=1))
    log(f"wrote {path} ({record['gguf_bytes']} bytes) and run.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
