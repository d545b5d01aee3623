#!/bin/bash
# Two measurements on the device machine, 2026-12-05 (third session), in the staging calls of
# bench/h200/chain_diag.sh's header (node + Dawn + Pyodide; then the champion in NPARTS parts):
#   1. (--tiles, or all) verify_rows.sh: the tile policies (which kinds run every row of a verify block in its own
#      workgroup, up to how many rows, and tiles of 4 or 8 rows past that), GPU time, SmolLM2-shaped weights (no
#      champion needed), ROUNDS alternating rounds: the first staging call can run it
#   2. (--pays, or all) bench product, drafters none and head, k = KS (2), all strata x 2 prompts, 3 runs, forced and
#      "only while it pays" (--adaptive both) in the same run: the head as chains (the default) with the scheduler on
# Everything goes into $OUT/tiles.tgz / $OUT/pays.tgz (a call returns 8 files at most); the tables are printed.
#   run(command="NPARTS=3 bash bench/h200/product_run.sh --stage && bash bench/h200/tiles_pays_call.sh --tiles",
#       carry=[".devcarry/gpu_node", ".devcarry/gpu_rest", ".devcarry/product"], timeout_s=400)
#   run(command="NPARTS=3 bash bench/h200/product_run.sh --stage", carry=[".devcarry/champ0"]), the same with champ1
#   run(command="NPARTS=3 bash bench/h200/tiles_pays_call.sh --pays", carry=[".devcarry/champ2"], timeout_s=400)
# Dry run here (llvmpipe; after product_prep.sh): BACKEND=opengl X=/tmp/exactspec-test VR_ENV="EMULATE_SG=1
#   SYNTH_LAYERS=1" ROUNDS=1 VARIANTS="default rowmax4" EXTRA="--strata repetitive --max-new-tokens 8"
#   OUT=/tmp/tp bash bench/h200/tiles_pays_call.sh
set -u
cd "$(dirname "$0")/../.."
O0=${OUT:-/tmp/out}
X=${X:-/tmp/exactspec}
BACKEND=${BACKEND:-vulkan}
export NPARTS=${NPARTS:-3} X BACKEND
MODE=${1:-all}
mkdir -p $O0 /tmp/o1 /tmp/o2
source bench/h200/staged_env.sh $BACKEND             # node, Dawn, NVIDIA's Vulkan ICD
if [ "$MODE" != --pays ]; then
  [ -x $X/node/node ] && [ -f $X/node_modules/webgpu/package.json ] || { echo "node or Dawn not staged in $X"; exit 3; }
  echo "== tile policies $(date -u +%T)"
  PATH=$X/node:$PATH SETUP=0 ROUNDS=${ROUNDS:-2} PYTEST=0 OUT=/tmp/o1 EXTRA_ENV="${VR_ENV:-}" \
    VARIANTS="${VARIANTS:-default rows_qkv rows_ffn rowmax4 rowmax4_t4 rowmax2}" timeout ${VR_TIMEOUT:-280} \
    bash bench/h200/verify_rows.sh > /tmp/o1.log 2>&1
  echo "tile policies: rc $? $(date -u +%T)"
  tar -C /tmp -czf $O0/tiles.tgz o1 o1.log
  grep -E "^== |T_single|T_verify\(k=(2|4|8)|GPU us per kind \(n=(1|5), pos 64" /tmp/o1/verify_rows.txt | cut -c1-200
fi
if [ "$MODE" != --tiles ]; then
  echo "== head, forced and only while it pays $(date -u +%T)"
  OUT=/tmp/o2 AB_DRAFTERS=none,head AB_KS=${KS:-2} AB_PER=${PER:-2} AB_SIDES=A AB_DEADLINE=${DL2:-150} \
    AB_TIMEOUT=${TO2:-200} EXTRA="--adaptive both ${EXTRA:-}" bash bench/h200/product_run.sh --ab > /tmp/o2.log 2>&1
  echo "head, adaptive both: rc $? $(date -u +%T)"
  tar -C /tmp -czf $O0/pays.tgz o2 o2.log
  for f in /tmp/o2/product_ab_*.txt; do echo "== $f"; grep -E "^[a-z_]+ +(greedy|head) " $f | cut -c1-170; done
fi
