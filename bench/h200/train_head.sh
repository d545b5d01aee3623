#!/bin/bash
# The draft head's H200 job in ONE call (about 9.5 minutes): the champion's answers, then the head and its ablations
# trained in parallel processes on the one GPU, each evaluated (greedy chain tau, k = 1..8, exact per-start
# simulation of the decode loop's rounds on held-out greedy answers) and exported.
#
#   carry: .devcarry/head/data   (made here by bench/h200/train_head_prep.sh, ~17 MB)
#   needs: /tmp/champ/champ.gguf (the champion, sha256 b179c952..., joined by earlier calls, or
#          /tmp/exactspec/champion.gguf from product_prep.sh's staging calls + product_run.sh --join); python3 with torch,
#          numpy (no registry)
#   env:   GEN_S (answer generation, default 140 s), TRAIN_S (each variant's training, default 300 s),
#          VARIANTS (default full,no-multistep,no-subset,no-filter), AFTER_GEN (a shell command started beside the
#          training once /tmp/gen/gen.npz exists, e.g. the vocab helper's trainer), RESUME=1 (a second call: answer
#          more prompts for GEN_S, continue every variant from /tmp/head/ckpt), TINY=1 (CPU smoke test),
#          GEN_DIR / CKPT_DIR (instead of /tmp/gen, /tmp/head/ckpt)
#   writes to $OUT (6 files): head_full.gguf, head_no-multistep.gguf, head_no-subset.gguf, head_no-filter.gguf
#          (Q8_0, ~4.5 MB each), run.json (every variant: config, steps, losses, eval, sha256s; the answers'
#          summary), log.txt; and /tmp/gen/gen.npz (the champion's answers with their prompts, for the vocab helper),
#          /tmp/head/ckpt/*.pt (checkpoints for RESUME=1).
set -e
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/head/out}
G=${GEN_DIR:-/tmp/gen}
K=${CKPT_DIR:-/tmp/head/ckpt}
mkdir -p "$O" "$G" "$K"
C=/tmp/champ/champ.gguf
# the champion joined by `bash bench/h200/product_run.sh --join` (after product_prep.sh's five staging calls) serves too
[ -f $C ] || { [ -f /tmp/exactspec/champion.gguf ] && mkdir -p /tmp/champ && ln -sf /tmp/exactspec/champion.gguf $C; }
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $C" | sha256sum -c
PY=$(command -v python3)
export PYTHONPATH=$PWD/py OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
EXTRA=()
[ -n "$RESUME" ] && EXTRA+=(--resume)
[ -n "$TINY" ] && EXTRA+=(--tiny --max-new 16 --max-steps 3 --log-every 1)
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
$PY -m exactspec_train.head_run all --champion $C --data .devcarry/head/data --workload tests/data/workload.jsonl \
  --gen-out "$G/gen.npz" --gen-budget-s "${GEN_S:-140}" --budget-s "${TRAIN_S:-300}" --out "$O" \
  --ckpt-dir "$K" --variants "${VARIANTS:-full,no-multistep,no-subset,no-filter}" \
  --after-gen "${AFTER_GEN:-}" "${EXTRA[@]}"
ls -la "$O"
