#!/bin/bash
# One device call after the staging calls of bench/h200/chain_call.sh's header (node, Dawn, Pyodide, the champion in
# NPARTS parts): where the product's loop spends a chain's time. The engine's timeline (EXACTSPEC_TRACE, createEngine's
# `trace`) of (1) bench product, the champion alone and the head at k = 1, 4 strata x 2 prompts, 1 run, and (2) the
# same chains in plain JS (py/bench/head_engine.py: chains back to back, no Python); then
# bench/h200/trace_summary.py over both (host gap between calls, time in a call, submit).
#   run(command="NPARTS=3 bash bench/h200/trace_call.sh", carry=[".devcarry/champ2"], timeout_s=600)
#   -> $OUT/trace_summary.txt, $OUT/traces.tgz (the timelines, the product report)
set -u
cd "$(dirname "$0")/../.."
X=${X:-/tmp/exactspec}
O=${OUT:-/tmp/out}
T=/tmp/traces
mkdir -p $O $T
export NPARTS=${NPARTS:-3}
BACKEND=${BACKEND:-vulkan}
EXACTSPEC_TRACE=$T/product.jsonl OUT=$T AB_DRAFTERS=none,head AB_KS=1 AB_PER=2 AB_SIDES=A AB_DEADLINE=120 AB_TIMEOUT=170 \
  EXTRA="--strata casual_chat,rewrites,json_extraction,repetitive --runs 1 ${EXTRA:-}" \
  bash bench/h200/product_run.sh --ab > $T/product.log 2>&1
echo "product: rc $?"
source bench/h200/staged_env.sh $BACKEND             # node, Dawn, NVIDIA's Vulkan ICD
EXACTSPEC_TRACE=$T/js.jsonl timeout 200 python3 py/bench/head_engine.py --backend $BACKEND --node $X/node/node \
  --champion $X/champion.gguf --head ${HEAD_FILE:-static/models/head-smollm2.gguf} --variants indexed --reps 5 --ks 1 \
  ${HE_EXTRA:-} > $T/js.txt 2>&1
echo "js loop: rc $?"
python3 bench/h200/trace_summary.py $T/product.jsonl $T/js.jsonl | tee $O/trace_summary.txt
cat $T/js.txt >> $O/trace_summary.txt
grep -E "^[a-z_]+ +(greedy|head) " $T/product_ab_A.txt >> $O/trace_summary.txt
tar -C /tmp -czf $O/traces.tgz traces
