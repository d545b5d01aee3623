"""Where a draft-head training step's time goes (exactspec_train.head.head_loss + backward + AdamW), on SmolLM2's
shapes with random weights and features (no champion needed), by torch.profiler: the step time per configuration
(depth, subset, filter), then the top CUDA kernels of the multi-step one. An H200 benchmark, not a test.

    PYTHONPATH=py python3 bench/h200/head_step_profile.py [--steps 8] [--tokens 12288] [--T 1024]
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "py"))
from exactspec.drafters.head import HeadConfig  # noqa: E402
from exactspec.micro import micro_config  # noqa: E402
from exactspec_train.head import HeadNet, head_loss  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=12288)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--configs", default="4:16384:0.2,1:16384:0.2,4:0:0.2,4:16384:0,2:16384:0.2,3:16384:0.2")
    ap.add_argument("--vary", default="", help="PAD,...: also steps whose T is drawn in 64..T each step, padded up "
                    "to a multiple of PAD (1: unpadded), as the trainer's batches vary")
    ap.add_argument("--no-profile", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    c = micro_config(dim=576, hidden_dim=1536, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64, vocab_size=49152,
                     seq_len=8192, rope_theta=100000.0)
    B, T = max(1, a.tokens // a.T), a.T
    g = torch.Generator(device="cpu").manual_seed(0)
    embed = torch.randn(c.vocab_size, c.dim, generator=g) * 0.05
    feats = (torch.randn(B, T, c.dim, generator=g) * 2.0).to(dev)                          # (B, T, dim)
    if dev.type == "cuda":
        feats = feats.to(torch.bfloat16)                # (the trainer keeps features in bf16 on the GPU)
    tokens = torch.randint(0, c.vocab_size, (B, T), generator=g).to(dev)                  # (B, T)
    pos = torch.arange(T, device=dev)[None].expand(B, T).contiguous()                     # (B, T)
    w = torch.ones(B, T, device=dev)                                                      # (B, T)
    sigma = torch.ones(c.dim, device=dev)
    amp = dev.type == "cuda"
    print(f"device {dev}, B {B} x T {T}", flush=True)

    def run(depth, subset, filt, steps, prof=None, pad=0):
        cfg = HeadConfig.for_champion(c, window=1024)
        ids = torch.arange(subset) if subset else None
        net = HeadNet(cfg, embed, torch.ones(c.dim), ids).to(dev)
        net.init_weights(1, 2.0)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        times = []
        for i in range(steps):
            if amp:
                torch.cuda.synchronize()
            t0 = time.time()
            fb, tb, pb, wb = feats, tokens, pos, w
            if pad:
                Tn = int(torch.randint(64, T + 1, (1,), generator=g))
                Tp = min(T, -(-Tn // pad) * pad)
                Bn = max(1, a.tokens // Tp)
                fb, tb, pb, wb = (x[:1].expand(Bn, *x.shape[1:])[:, :Tp].contiguous() for x in (feats, tokens, pos, w))
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=amp):
                loss, _ = head_loss(net, fb, tb, pb, wb, depth=depth, sigma=sigma, noise=0.05,
                                    feat_weight=0.5, decay=0.8, filter_frac=filt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if amp:
                torch.cuda.synchronize()
            times.append(time.time() - t0)
            if prof is not None:
                prof.step()
        return times

    for spec in a.configs.split(","):
        d, s, f = spec.split(":")
        t = run(int(d), int(s), float(f), a.steps)
        t = sorted(t[2:])
        mem = torch.cuda.max_memory_allocated() / 2**30 if amp else 0
        print(f"depth {d} subset {s} filter {f}: step {1e3 * t[len(t) // 2]:.1f} ms (median of {len(t)}, "
              f"min {1e3 * t[0]:.1f}), peak {mem:.1f} GiB", flush=True)
    for pad in [int(x) for x in a.vary.split(",") if x]:
        for cudnn in (True, False):
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
            t = sorted(run(4, 16384, 0.2, a.steps, pad=pad)[2:])
            print(f"depth 4, T varying, padded to {pad}, cudnn sdpa {cudnn}: step {1e3 * t[len(t) // 2]:.1f} ms "
                  f"(median of {len(t)}, min {1e3 * t[0]:.1f}, max {1e3 * t[-1]:.1f})", flush=True)
        torch.backends.cuda.enable_cudnn_sdp(True)
    if a.no_profile:
        return 0
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if amp else [])
    with profile(activities=acts) as prof:
        run(4, 16384, 0.2, 3)
    key = "cuda_time_total" if amp else "cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
