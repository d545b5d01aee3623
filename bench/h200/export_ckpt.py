"""Export draft-head checkpoints (/tmp/head/ckpt/VARIANT.pt, written by exactspec_train.head_run train) to GGUF
without training further: for a run cut off before its export (device machine).
    PYTHONPATH=py python3 bench/h200/export_ckpt.py CHAMPION.gguf OUTDIR VARIANT..."""
import json
import sys
from pathlib import Path

import torch

from exactspec.drafters.head import HeadConfig
from exactspec_train import data as D
from exactspec_train.head import HeadNet, export_head
from exactspec_train.model import TorchLlama

champion, out = sys.argv[1], Path(sys.argv[2])
sha = D.sha256_file(champion)
champ = TorchLlama.from_gguf(champion)
for v in sys.argv[3:]:
    st = torch.load(f"/tmp/head/ckpt/{v}.pt", map_location="cpu", weights_only=False)
    hp = st["hp"]
    cfg = HeadConfig.for_champion(champ.config, champion_sha256=sha, window=hp["window"])
    net = HeadNet(cfg, champ.w("token_embd.weight"), champ.w("output_norm.weight"), st["ids"])
    net.load_state_dict(st["net"])
    rec = {"variant": v, "hp": hp, "steps": st["step"], "seconds": st["seconds"], "seed": 4321,
           "note": "exported from the checkpoint of a run cut off by the call's time limit (not evaluated there)"}
    export_head(out / f"head_{v}.gguf", net, cfg, "Q8_0", rec)
    (out / f"head_{v}.json").write_text(json.dumps({**rec, "history": st["hist"]}))
    print("exported", v, st["step"], "steps", round(st["seconds"]), "s")
