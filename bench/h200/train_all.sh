#!/bin/bash
# ONE H200 call training both drafts side by side (device machine, about 8.5 minutes): the draft head and its
# ablations (bench/h200/train_head.sh: the champion's answers for GEN_S, then the variants for TRAIN_S each, in
# parallel) and the foreign-vocabulary draft (bench/h200/foreign_train.sh, which joins the champion's answers when
# they appear).
#   staged first (warm machine, back-to-back calls): the champion's parts in /tmp/exactspec/champ by
#   `bash bench/h200/product_run.sh --stage` with .devcarry/champ0, champ1, champ2 carried (product_prep.sh's split)
#   carry: .devcarry/head/data (train_head_prep.sh, ~17 MB) and .devcarry/vocab/data (foreign_prep.sh, ~20 MB)
#   writes to $OUT (8 files at most, what the device tool returns): head_full.gguf and the three ablations, head_run.json,
#   draft_llama2.gguf, foreign_run.json, logs.tar.gz (both logs); and keeps /tmp/head/out (head_full.gguf there is what
#   bench/h200/product_run.sh measures on the engine in the next call).
#   env: GEN_S (default 140), TRAIN_S (default 260), FOREIGN_S (default 480), TINY=1 (CPU smoke test, here),
#        CHECKS=1: beside the training (same GPU; correctness only, no timings), the engine's exactness tests on the
#        H200's own subgroups (tests/gpu: batched step, decode loop on the engine, invariance/parity incl. SmolLM2)
#        and the product bench's quick slice (bench/h200/product_run.sh --quick: Pyodide + the decode loop on Dawn;
#        answers identical?) — needs the staging calls of product_prep.sh's header first; outputs in logs.tar.gz
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/train_out}
X=${X:-/tmp/exactspec}
mkdir -p "$O" /tmp/champ /tmp/head/out /tmp/foreign/out
C=$X/champion.gguf
if [ -z "$TINY" ]; then
  bash bench/h200/product_run.sh --stage
  [ -f $C ] || cat $X/champ/p0 $X/champ/p1 $X/champ/p2 > $C
  ln -sf $C /tmp/champ/champ.gguf
else
  ln -sf $PWD/static/models/smollm2-135m-instruct-q4_1.gguf /tmp/champ/champ.gguf
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
if [ -n "$CHECKS" ] && [ -x $X/node/node ]; then
  (mkdir -p node_modules static/models /tmp/checks
   [ -e static/models/smollm2-135m-instruct-q4_1.gguf ] || ln -s $C static/models/smollm2-135m-instruct-q4_1.gguf
   source bench/h200/staged_env.sh vulkan             # node, Dawn, NVIDIA's Vulkan ICD
   timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_batched_engine.py tests/gpu/test_decode_on_engine.py \
     tests/gpu/test_gpu_engine.py > /tmp/checks/pytest_h200.txt 2>&1
   echo "pytest rc $?" >> /tmp/checks/pytest_h200.txt
   OUT=/tmp/checks timeout 150 bash bench/h200/product_run.sh --quick > /tmp/checks/product_quick_log.txt 2>&1
   echo "product quick rc $?" >> /tmp/checks/product_quick_log.txt) &
  CHECKS_PID=$!
fi
(GEN_S=${GEN_S:-140} TRAIN_S=${TRAIN_S:-260} OUT=/tmp/head/out bash bench/h200/train_head.sh > /tmp/head/log_all.txt 2>&1
 echo "train_head rc $?" >> /tmp/head/log_all.txt) &
HEAD_PID=$!
OUT=/tmp/foreign/out BUDGET_S=${FOREIGN_S:-480} bash bench/h200/foreign_train.sh > /tmp/foreign/log_all.txt 2>&1
echo "foreign_train rc $?" >> /tmp/foreign/log_all.txt
wait $HEAD_PID
tail -n 5 /tmp/head/log_all.txt /tmp/foreign/log_all.txt
for v in full no-multistep no-subset no-filter; do cp /tmp/head/out/head_$v.gguf "$O/" 2>/dev/null; done
cp /tmp/head/out/run.json "$O/head_run.json" 2>/dev/null
cp /tmp/foreign/out/draft_llama2.gguf "$O/" 2>/dev/null
cp /tmp/foreign/out/run.json "$O/foreign_run.json" 2>/dev/null
[ -n "$CHECKS_PID" ] && wait $CHECKS_PID      # (its own timeouts end it before the training's end, ~465 s)
tar -czf "$O/logs.tar.gz" -C / tmp/head/log_all.txt tmp/head/out/log.txt tmp/foreign/log_all.txt tmp/foreign/out/log.txt \
  $(cd / && ls -d tmp/checks 2>/dev/null) 2>/dev/null
tail -n 3 /tmp/checks/pytest_h200.txt /tmp/checks/product_quick_log.txt 2>/dev/null
ls -la "$O"
