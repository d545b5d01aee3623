"""A CPU sanity check that the real-size head learns from the real champion: fit a few of the champion's greedy
answers (from a head_run gen.npz) and report the greedy chain tau (k = 4, the decode loop's rounds replayed) on those
same answers before and after. Not a measure of generalisation; a check of the features, scales, init and losses.

    PYTHONPATH=py python py/scripts/head_fit_check.py --gen GEN.npz --champion CHAMPION.gguf --answers 6 --steps 200 \
        [--lr 2e-3] [--export HEAD.gguf]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch

from exactspec.drafters.head import HeadConfig
from exactspec.formats import sha256_file
from exactspec_train.accept import simulate_runs
from exactspec_train.head import HeadNet, chain_runs, export_head, frequency_subset, head_loss
from exactspec_train.model import TorchLlama


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen", required=True)
    ap.add_argument("--champion", required=True)
    ap.add_argument("--answers", type=int, default=6)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--subset", type=int, default=2048)
    ap.add_argument("--export", default=None)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    g = np.load(a.gen)
    idx = [i for i in np.flatnonzero(g["done"] & ~g["refused"]) if g["temps"][i] == 0][:a.answers]
    seqs, P = [], []
    for i in idx:
        p = g["prompt_ids"][g["prompt_off"][i]:g["prompt_off"][i + 1]].astype(np.int64)
        y = g["ids"][g["off"][i]:g["off"][i + 1]].astype(np.int64)
        seqs.append(np.concatenate([p, y]))
        P.append(len(p))
    champ = TorchLlama.from_gguf(a.champion).eval()
    t0 = time.time()
    with torch.no_grad():
        feats = [champ(torch.from_numpy(s)[None], return_features=True)[0] for s in seqs]   # (n, dim) each
    ids = frequency_subset([s[p:] for s, p in zip(seqs, P)], champ.config.vocab_size, a.subset, always=[0, 2])
    cfg = HeadConfig.for_champion(champ.config, champion_sha256=sha256_file(a.champion), window=1024)
    net = HeadNet(cfg, champ.w("token_embd.weight"), champ.w("output_norm.weight"), ids)
    allf = torch.cat(feats)
    net.init_weights(1, float(allf.pow(2).mean(-1).sqrt().mean()))
    sigma = allf.std(0).clamp_min(1e-3 * float(allf.std()))
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, betas=(0.9, 0.95))

    def tau():
        em = ro = 0
        with torch.no_grad():
            for s, f, p in zip(seqs, feats, P):
                r = chain_runs(net, f[None], torch.from_numpy(s)[None], torch.arange(len(s))[None], 4)[0].numpy()
                sim = simulate_runs(r[p:], 4, len(s) - p, s[-1] == 2)
                em += sim["emitted"]
                ro += sim["rounds"]
        return em / ro

    print(f"{len(seqs)} answers, {sum(len(s) - p for s, p in zip(seqs, P))} answer tokens; tau k=4 before: "
          f"{tau():.3f}", flush=True)
    for step in range(a.steps):
        j = step % len(seqs)
        s, f, p = seqs[j], feats[j], P[j]
        w = torch.where(torch.arange(len(s)) + 1 >= p, 1.0, 0.1)
        w[-1] = 0
        loss, st = head_loss(net, f[None], torch.from_numpy(s)[None], torch.arange(len(s))[None], w[None], depth=2,
                             sigma=sigma, noise=0.0, feat_weight=0.5, decay=0.8)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {float(loss.detach()):.3f} ce0 {st[0]['ce']:.3f} feat0 {st[0]['feat']:.3f} "
                  f"{time.time() - t0:.0f}s", flush=True)
    print(f"tau k=4 after {a.steps} steps, on the same answers: {tau():.3f}", flush=True)
    if a.export:
        export_head(a.export, net, cfg, "Q8_0", {"variant": "cpu fit check"})
        print(f"wrote {a.export}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
