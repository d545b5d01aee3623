#!/bin/bash
# The draft head trained longer, with its ablations at equal training time, in ONE process (exactspec_train.head_multi:
# the champion, the answers and their features loaded once), over two back-to-back H200 calls.
#
# Staging (each call carries what the ~64 MiB limit leaves beside the tree; product_prep.sh with SPLIT_MB="33 26"
# makes the champion's three parts; the tree is ~12.5 MiB when the two tracked drafts, 28 MiB, are moved out of the
# working tree for these calls and put back after them: `git checkout -- static/models/`; so are the heads committed
# under bench/h200/results/*/head_*.gguf, put back with `git checkout -- bench/h200/results/`):
#   1. run(command="bash bench/h200/train_head_multi.sh --stage", carry=[".devcarry/head/data", ".devcarry/champ0"])
#   2. run(command="bash bench/h200/train_head_multi.sh --stage", carry=[".devcarry/gpu_node", ".devcarry/champ1"])
#   3. run(command="bash bench/h200/train_head_multi.sh", carry=[".devcarry/champ2", ".devcarry/gpu_rest",
#          ".devcarry/product"], timeout_s=600)          the champion's answers (GEN_S), then training, export
#   4. run(command="RESUME=1 bash bench/h200/train_head_multi.sh", timeout_s=600)   (warm: /tmp kept) more training
#   (then, warm, the product's loop with the trained head: product_run.sh with NPARTS=3 and HEAD_FILE, see below)
# Env: CALL_S (this call's seconds, default 570), GEN_S (answers, default 150; skipped when /tmp/gen/gen.npz exists),
#   EVAL_S (seconds kept for evaluation + export at the end, default 90), PLAN (exactspec_train.head_multi's plan;
#   default: full / no-multistep / no-subset / no-filter 50 s each in group 0, then `long` = full for 500 s), INIT
#   (NAME=HEAD.gguf,...: those runs start from a trained head, e.g. INIT=warm=static/models/head-smollm2.gguf with
#   PLAN=warm:full:300:0), TINY=1
#   (a CPU smoke test here: X=/tmp/x OUT=/tmp/o TINY=1 GEN_S=20 EVAL_S=40 CALL_S=150 PLAN=a:full:3:0,long:full:5:1
#   bash bench/h200/train_head_multi.sh, after copying the champion's parts to $X/champ/p0..p2 and node etc.).
# Writes to $OUT: head_<run>.gguf for every run (5), run.json, log.txt (8 files at most come back); keeps
#   /tmp/gen/gen.npz, /tmp/head/ckpt/<run>.pt (RESUME=1 continues them) and /tmp/head/out (a copy of $OUT).
set -e
T0=$(date +%s)
cd "$(dirname "$0")/../.."
export X=${X:-/tmp/exactspec}
O=${OUT:-/tmp/head/out}
mkdir -p $O /tmp/head/out /tmp/gen /tmp/head/ckpt /tmp/headdata
if [ -f .devcarry/head/data/prep.json ] && [ ! -f /tmp/headdata/prep.json ]; then
  cp -r .devcarry/head/data/. /tmp/headdata/ && echo "staged the head data ($(du -sh /tmp/headdata | cut -f1))"
fi
NPARTS=${NPARTS:-3} bash bench/h200/product_run.sh --stage
[ "$1" = "--stage" ] && exit 0
[ -f /tmp/headdata/prep.json ] || { echo "the head data are missing in /tmp/headdata: repeat call 1 (the machine was given back)"; exit 3; }
NPARTS=${NPARTS:-3} bash bench/h200/product_run.sh --join || { echo "repeat the staging calls"; exit 3; }
C=$X/champion.gguf
export PYTHONPATH=$PWD/py PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=4
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
GEXTRA=()
[ -n "$TINY" ] && GEXTRA=(--tiny --max-new 16)
COMMON=(--champion $C --data /tmp/headdata --workload tests/data/workload.jsonl)
if [ ! -f /tmp/gen/gen.npz ]; then
  python3 -m exactspec_train.head_run gen "${COMMON[@]}" --gen-out /tmp/gen/gen.npz --budget-s ${GEN_S:-150} "${GEXTRA[@]}"
fi
PLAN=${PLAN:-full:full:50:0,no-multistep:no-multistep:50:0,no-subset:no-subset:50:0,no-filter:no-filter:50:0,long:full:500:1}
STOP=$(( T0 + ${CALL_S:-570} - ${EVAL_S:-90} ))
EXTRA=()
[ -n "$RESUME" ] && EXTRA+=(--resume)
[ -n "${INIT:-}" ] && EXTRA+=(--init "$INIT")
[ -n "$TINY" ] && EXTRA+=(--tiny --log-every 1 --workload-max-new 8)
python3 -m exactspec_train.head_run multi "${COMMON[@]}" --gen /tmp/gen/gen.npz --plan "$PLAN" --budget-s 3600 \
  --stop-at $STOP --out /tmp/head/out --ckpt-dir /tmp/head/ckpt "${EXTRA[@]}"
cp /tmp/head/out/*.gguf /tmp/head/out/run.json $O/ 2>/dev/null || true
cp /tmp/head/out/log.txt $O/log.txt 2>/dev/null || true
cp /tmp/gen/gen_log.txt $O/ 2>/dev/null && cat $O/gen_log.txt >> $O/log.txt && rm $O/gen_log.txt || true
ls -la $O
echo "call took $(( $(date +%s) - T0 )) s"
