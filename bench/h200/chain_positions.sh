#!/bin/bash
# ONE device call after product_run.sh's staging calls (node and Dawn in /tmp/exactspec): bench/gpu/bench.mjs CHAIN=1
# (VERIFY_ONLY: T_single, T_verify(k), the n-gram chain's GPU ms per round) at each of POSITIONS, through
# bench/h200/verify_rows.sh with its VARIANTS (NAME=ENGINE_OPTS_JSON ...) alternating ROUNDS times; SmolLM2-shaped
# synthetic weights, a KV cache of BENCH_SEQ (2,048).
#   there: run(command="VARIANTS='default rowsz={\"attnRowsZ\":true}' bash bench/h200/chain_positions.sh")
#   -> $OUT/positions.tgz (pos$P/verify_rows.txt, .json per position), $OUT/positions.txt (every position's
#      chain lines and T_single / T_verify lines, in the order run)
# The twenty-first session (bench/h200/results/2026-12-07d): the attention's grid with rows in z (engine option
# attnRowsZ) against the default, positions 64, 512, 1,024 and 1,870.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}
mkdir -p $O
source bench/h200/staged_env.sh                      # node, Dawn, NVIDIA's Vulkan ICD
rm -rf /tmp/positions && mkdir -p /tmp/positions
for P in ${POSITIONS:-64 512 1024 1870}; do
  echo "== position $P $(date -u +%T)" | tee -a $O/positions.txt
  mkdir -p /tmp/positions/pos$P
  SETUP=0 ROUNDS=${ROUNDS:-2} PYTEST=0 VTIMEOUT=${VTIMEOUT:-90} VARIANTS="${VARIANTS:-default}" \
    EXTRA_ENV="CHAIN=1 CHAIN_KS=${CHAIN_KS:-3,4} CHAIN_ROWWISE=0 BENCH_POS=$P BENCH_SEQ=${BENCH_SEQ:-2048}" \
    OUT=/tmp/positions/pos$P bash bench/h200/verify_rows.sh > /tmp/positions/pos$P.log 2>&1
  echo "rc=$?" >> /tmp/positions/pos$P.log
  grep -E "^== |T_single|T_verify\(k=4\)|T_verify\(k=8\)|chain \(|Error|rc=" /tmp/positions/pos$P/verify_rows.txt | tee -a $O/positions.txt
  tail -n 1 /tmp/positions/pos$P.log | tee -a $O/positions.txt
done
tar -C /tmp/positions -czf $O/positions.tgz .
