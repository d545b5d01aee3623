#!/bin/bash
# One H200 call after the staging calls of bench/h200/chain_diag.sh's header (those three carry node, Dawn, and the
# champion in NPARTS parts; the first also .devcarry/product: Pyodide), 2026-12-05 (second session):
#   1. chain_diag.sh: the head's rounds one a submission vs chains of 4 and 8, and the loops without Python
#   2. bench product, drafters none and head, k 1 and 2, all strata x 2 prompts, 3 runs: A the defaults (chains of 4),
#      B chainRounds 0 (one round a submission), C chainRounds 8
#   3. bench product, the champion alone: A the defaults, B fuseQkvAttn (30 dispatches fewer a pass, slower on the GPU)
# Everything goes into $OUT/all.tgz (a call returns 8 files at most); the tables are printed.
#   run(command="NPARTS=3 bash bench/h200/chain_call.sh", carry=[".devcarry/champ2"], timeout_s=600)
set -u
cd "$(dirname "$0")/../.."
O0=${OUT:-/tmp/out}
mkdir -p $O0
export NPARTS=${NPARTS:-3}
OUT=/tmp/o1 bash bench/h200/chain_diag.sh > /tmp/o1.log 2>&1
echo "diag: rc $?"
OUT=/tmp/o2 AB_DRAFTERS=none,head AB_KS=1,2 AB_PER=2 AB_OPTS='{"chainRounds":0}' AB_C_OPTS='{"chainRounds":8}' \
  AB_SIDES="A B C" AB_DEADLINE=${DL2:-100} AB_TIMEOUT=${TO2:-150} bash bench/h200/product_run.sh --ab > /tmp/o2.log 2>&1
echo "product A/B/C: rc $?"
OUT=/tmp/o3 AB_DRAFTERS=none AB_KS=1 AB_PER=2 AB_OPTS='{"fuseQkvAttn":true}' AB_SIDES="A B" AB_DEADLINE=${DL3:-60} \
  AB_TIMEOUT=${TO3:-100} bash bench/h200/product_run.sh --ab > /tmp/o3.log 2>&1
echo "product alone, fuseQkvAttn: rc $?"
tar -C /tmp -czf $O0/all.tgz o1 o2 o3 o1.log o2.log o3.log
cat /tmp/o1/chain_diag_ts.txt /tmp/o1/chain_diag.txt /tmp/o1/chain_diag8.txt
for f in /tmp/o2/product_ab_*.txt /tmp/o3/product_ab_*.txt; do echo "== $f"; grep -E "^[a-z_]+ +(greedy|head) " $f | cut -c1-150; done
