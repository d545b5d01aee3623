"""The whole GPU job in one go: champion answers -> distilled draft + plain-loss draft -> GGUF files.

    python -m exactspec_train.run_device --champion GGUF --data DIR --workload tests/data/workload.jsonl --out DIR

Inputs come from `exactspec_train.prep`. Outputs (each well under 16 MiB): draft_kd.gguf, draft_ce.gguf,
gen.npz (the champion's answers: ids uint16 + offsets), run.json (config, seeds, losses, held-out agreement).
Runs on CUDA when available (bf16 autocast, tf32), else on the CPU (only for smoke tests with --tiny).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from exactspec.backend import ModelConfig
from . import data as D
from .distill import eval_agreement, train
from .export import export_gguf
from .model import TorchLlama, pca_embedding
from .teacher import generate_all

DRAFT = dict(dim=192, hidden_dim=576, n_layers=4, n_heads=3, n_kv_heads=3, head_dim=64)


def draft_config(champion: ModelConfig, **over) -> ModelConfig:
    d = dict(DRAFT, **over)
    return replace(champion, rope_dim=d["head_dim"], **d)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--champion", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-new", type=int, default=192)
    ap.add_argument("--gen-time", type=float, default=100.0)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--kd-time", type=float, default=210.0)
    ap.add_argument("--ce-time", type=float, default=150.0)
    ap.add_argument("--gen-weight", type=float, default=0.65, help="share of batch rows from the champion's answers")
    ap.add_argument("--tiny", action="store_true", help="smoke test: few prompts, few steps, short rows")
    ap.add_argument("--max-prompts", type=int, default=0)
    ap.add_argument("--gen-max-prompts", type=int, default=None,
                    help="deterministic stand-in for --gen-time: stop after the batch reaching this many prompts")
    ap.add_argument("--gen-order", choices=("sorted", "shuffled"), default="shuffled",
                    help="batch order of the champion's answers (the shipped draft's run: sorted)")
    ap.add_argument("--samples", type=int, default=1,
                    help="answers per prompt; copies after the first are sampled (T 0.7 or 1.0), never greedy")
    ap.add_argument("--max-batch", type=int, default=384, help="prompts per generation batch at most")
    ap.add_argument("--token-budget", type=int, default=160_000, help="prompts x (prompt+answer length) per batch")
    ap.add_argument("--hidden-dim", type=int, default=DRAFT["hidden_dim"], help="the draft's FFN width")
    ap.add_argument("--n-layers", type=int, default=DRAFT["n_layers"], help="the draft's layer count")
    ap.add_argument("--modes", default="kd,ce", help="which drafts to train: kd, ce or both")
    ap.add_argument("--gen-from", default=None,
                    help="gen.npz of an earlier run with the same prompts and flags: reuse its answers")
    ap.add_argument("--gen-continue", action="store_true",
                    help="with --gen-from: also answer the prompts that run left unanswered (within --gen-time)")
    ap.add_argument("--prompt-weight", type=float, default=1.0,
                    help="loss weight of prompt tokens in the champion-answer rows (answer tokens: 1)")
    ap.add_argument("--init-from", default=None, help="start the distilled draft from this draft GGUF (same dims)")
    ap.add_argument("--init-ce-from", default=None, help="start the plain-loss draft from this draft GGUF")
    ap.add_argument("--kd-stop-step", type=int, default=None,
                    help="deterministic stand-in for --kd-time: stop KD after this many steps (schedule of --steps)")
    a = ap.parse_args(argv)

    t_start = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = D.run_log(out, t_start)

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    log(f"device {dev} torch {torch.__version__} {torch.cuda.get_device_name(0) if dev.type == 'cuda' else ''}")

    from exactspec.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(a.champion)
    eos = tok.id_of("<|im_end|>")
    nl = tok.encode("\n")[0]
    eot = tok.id_of("<|endoftext|>")
    widx = D.WorkloadIndex.from_file(a.workload)
    data = Path(a.data)
    prep = json.loads((data / "prep.json").read_text())
    seq_len = prep["seq_len"] if not a.tiny else 256
    champion_sha = D.sha256_file(a.champion)
    if champion_sha != prep["champion_sha256"]:
        raise SystemExit(f"champion sha256 {champion_sha} differs from the one the data was prepared with")

    teacher = TorchLlama.from_gguf(a.champion)
    champ_emb = teacher.w("token_embd.weight").detach().numpy().copy()     # (vocab, 576)
    teacher = teacher.to(device=dev, dtype=torch.bfloat16).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    log(f"teacher loaded: {teacher.config}")

    # 1. the champion's own answers
    ids = np.load(data / "prompt_ids.npy")
    off = np.load(data / "prompt_off.npy")
    prompts = [ids[off[i]:off[i + 1]].astype(np.int64).tolist() for i in range(len(off) - 1)]
    if a.max_prompts:
        prompts = prompts[:a.max_prompts]
    rng = np.random.default_rng(a.seed)
    temps = rng.choice([0.0, 0.7, 1.0], size=len(prompts), p=[0.5, 0.35, 0.15]).tolist()
    n_base = len(prompts)
    for _ in range(1, a.samples):                  # extra answers to the same prompts: sampled, so they differ
        temps += rng.choice([0.7, 1.0], size=n_base, p=[0.7, 0.3]).tolist()
    prompts = prompts * a.samples
    def generate(idx, seed, max_prompts=None):     # the champion answers prompts[idx] (None: not reached)
        return generate_all(teacher, [prompts[i] for i in idx], [temps[i] for i in idx], a.max_new, eos, seed, dev,
                            token_budget=a.token_budget if dev.type == "cuda" else 4096, max_batch=a.max_batch,
                            time_limit_s=a.gen_time, log=log, max_prompts=max_prompts, order=a.gen_order)

    if a.gen_from:
        g = np.load(a.gen_from)
        if len(g["off"]) != len(prompts) + 1 or not np.array_equal(g["temps"], np.asarray(temps, dtype=np.float32)):
            raise SystemExit(f"{a.gen_from} was generated for other prompts or flags (--samples, --seed)")
        gi, go, gdone = g["ids"], g["off"], g["done"] if "done" in g else np.ones(len(prompts), bool)
        answers = [gi[go[i]:go[i + 1]].astype(np.int64).tolist() if gdone[i] else None for i in range(len(prompts))]
        log(f"answers reused from {a.gen_from}: {sum(x is not None for x in answers)} of {len(prompts)}")
        if a.gen_continue:
            todo = [i for i, x in enumerate(answers) if x is None]
            for i, x in zip(todo, generate(todo, a.seed + 1)):
                answers[i] = x
    else:
        answers = generate(range(len(prompts)), a.seed, a.gen_max_prompts)
    n_done = sum(x is not None for x in answers)
    texts = [tok.decode(x) if x is not None else "" for x in answers]
    gen_seqs, gen_w, dropped = [], [], 0
    for p, x, t in zip(prompts, answers, texts):
        if x is None:
            continue
        if widx.hits(t):          # refuse an answer that happens to contain a workload prompt
            dropped += 1
            continue
        gen_seqs.append(p + x + ([nl] if x and x[-1] == eos else []))
        gen_w.append([a.prompt_weight] * len(p) + [1.0] * (len(gen_seqs[-1]) - len(p)))
    widx.check([tok.decode(s) for s in gen_seqs[:50]], "generated training text")
    log(f"answers: {n_done} generated, {dropped} refused for workload overlap, "
        f"{sum(len(x) for x in answers if x)} answer tokens")
    flat = np.asarray([t for x in answers if x is not None for t in x], dtype=np.uint16)
    aoff = np.cumsum([0] + [len(x) if x is not None else 0 for x in answers]).astype(np.int64)
    np.savez_compressed(out / "gen.npz", ids=flat, off=aoff, temps=np.asarray(temps, dtype=np.float32),
                        done=np.asarray([x is not None for x in answers]))

    gen_rows, gen_tw = D.pack_rows(gen_seqs, seq_len, eot, a.seed, weights=gen_w)   # (n, seq_len) uint16, float32
    corpus = np.load(data / "corpus.npy")                                  # (m, 2048) uint16
    if corpus.shape[1] != seq_len:
        corpus = corpus[:, :seq_len]
    n_eval_g = max(1, len(gen_rows) // 50)
    n_eval_c = max(1, len(corpus) // 100)
    eval_rows = np.concatenate([gen_rows[:n_eval_g], corpus[:n_eval_c]])
    sources = [(gen_rows[n_eval_g:], a.gen_weight, gen_tw[n_eval_g:]), (corpus[n_eval_c:], 1.0 - a.gen_weight)]
    sources = [src for src in sources if len(src[0])]
    log(f"rows: gen {len(gen_rows)} corpus {len(corpus)} eval {len(eval_rows)} seq_len {seq_len}")

    # 2. the drafts
    cfg = draft_config(teacher.config, hidden_dim=a.hidden_dim, n_layers=a.n_layers)
    init_seed = a.seed + 7
    emb0 = None                                  # (vocab, dim) PCA init of the embedding, made when first needed
    steps = a.steps if not a.tiny else 6
    init_files = {mode: {"file": Path(f).name, "sha256": D.sha256_file(f)}      # drafts a stage starts from
                  for mode, f in (("kd", a.init_from), ("ce", a.init_ce_from)) if f}
    record = {"argv": sys.argv[1:] if argv is None else list(argv), "gen_order": a.gen_order, "seed": a.seed, "init_seed": init_seed, "draft_config": cfg.to_json(), "max_new": a.max_new,
              "temps_choice": {"0.0": 0.5, "0.7": 0.35, "1.0": 0.15}, "seq_len": seq_len,
              "gen_weight": a.gen_weight, "prompt_weight": a.prompt_weight,
              "init_from": init_files.get("kd"), "init_ce_from": init_files.get("ce"),
              "gen_from": a.gen_from, "gen_continue": a.gen_continue, "n_prompts": n_base, "samples": a.samples, "n_answers": n_done,
              "answers_refused_for_workload": dropped, "gen_rows": int(len(gen_rows)),
              "corpus_rows": int(len(corpus)), "eval_rows": int(len(eval_rows)), "runs": {}}
    kd_steps_done = None
    modes = [m for m in a.modes.split(",") if m]
    if not modes or set(modes) - {"kd", "ce"}:
        raise SystemExit(f"--modes takes kd, ce or kd,ce, not {a.modes!r}")
    if (out / "run.json").exists():               # a second call (e.g. --modes ce) adds to the first one's record
        record["runs"] = json.loads((out / "run.json").read_text()).get("runs", {})
        kd_steps_done = record["runs"].get("kd", {}).get("steps_done")
    for mode in modes:
        init = a.init_from if mode == "kd" else a.init_ce_from
        if init:                                  # a later stage: start from the earlier stage's draft
            student = TorchLlama.from_gguf(init)
            if student.config.to_json() != cfg.to_json():
                raise SystemExit(f"initial draft {init}: config {student.config} differs from {cfg}")
            log(f"{mode}: initialised from {init} ({init_files[mode]['sha256']})")
        else:
            if emb0 is None:
                emb0 = pca_embedding(champ_emb, cfg.dim)
            student = TorchLlama(cfg)
            student.init_random(init_seed)
            with torch.no_grad():
                student.w("token_embd.weight").copy_(torch.from_numpy(emb0))
                # logits = norm(h) . e_v have std ~ |e_v| at init: scale the final norm so they start near std 1
                student.w("output_norm.weight").fill_(1.0 / float(np.linalg.norm(emb0, axis=1).mean()))
        student = student.to(dev)
        n_steps = steps if mode == "kd" else (kd_steps_done or steps)
        rec = train(student, sources, mode=mode, steps=n_steps, batch=a.batch if not a.tiny else 2, lr=a.lr,
                    seed=a.seed + 100, device=dev, teacher=teacher if mode == "kd" else None,
                    time_limit_s=a.kd_time if mode == "kd" else a.ce_time, log=log,
                    warmup=50 if not a.tiny else 2, stop_at=a.kd_stop_step if mode == "kd" else None)
        rec["argv"] = record["argv"]
        if mode == "kd":
            kd_steps_done = rec["steps_done"]
        student.eval()
        rec["eval"] = eval_agreement(student, teacher, eval_rows[:64], dev)
        log(f"{mode}: eval {rec['eval']}")
        path = out / f"draft_{mode}.gguf"
        export_gguf(path, cfg, student.to_numpy(), a.champion, name=f"exactspec-draft-smollm2-{mode}",
                    extra_metadata={"exactspec.champion_sha256": champion_sha,
                                    "exactspec.training": "knowledge distillation (forward KL, full distribution)"
                                    if mode == "kd" else "plain next-token cross-entropy"})
        rec["gguf_sha256"] = D.sha256_file(path)
        rec["gguf_bytes"] = path.stat().st_size
        record["runs"][mode] = rec
        (out / "run.json").write_text(json.dumps(record, indent=1))
        log(f"{mode}: wrote {path} ({rec['gguf_bytes']} bytes)")
        del student
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    record["total_s"] = round(time.time() - t_start, 1)
    (out / "run.json").write_text(json.dumps(record, indent=1))
    log("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
