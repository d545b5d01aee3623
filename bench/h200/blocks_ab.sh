#!/bin/bash
# The measuring call after bench/h200/attn_blocks.sh (which staged node, Dawn, Pyodide and the champion's part 2) and
# one staging call (champ0), the tree slimmed (bench/h200/slim.sh), the machine still warm:
#   run(command="BLOCKS_OPTS='{\"attnBlock\":256,\"attnSplit\":1}' bash bench/h200/blocks_ab.sh",
#       carry=[".devcarry/champ1"], timeout_s=600)
# 1. (if BLOCKS_OPTS is set) the product's loop (bench product under Node, Dawn over Vulkan) with the engine's
#    defaults (A, then A2 again) against BLOCKS_OPTS (B): STRATA (long_context,casual_chat; or all), BLOCKS_PER (3)
#    prompts each, drafters none and ngram, k = 4, greedy, 64 new tokens, 3 runs a side -> $OUT/blocks_ab.tgz
#    (product_ab_{A,B,A2}.*, ab.log)
# 2. JSON mode with the n-gram drafter after the eighth session's host work: strict JSON extraction in JSON mode,
#    JSON_PER (4) prompts, drafters none and ngram, k = 2 and 4, 3 runs -> $OUT/json_ab.tgz
# The tenth session's second lease (attnBlock 512 the default since then; B turns it off):
#   BLOCKS_OPTS='{"attnBlock":0}' STRATA=all BLOCKS_PER=2 JSON_PER=12 JSON_DEADLINE=150 bash bench/h200/blocks_ab.sh
# Each part is cut by its own deadline so the call ends inside its 600 s.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}
export NPARTS=3
if [ -n "${BLOCKS_OPTS:-}" ]; then
  rm -rf /tmp/tab && mkdir -p /tmp/tab
  OUT=/tmp/tab AB_OPTS="$BLOCKS_OPTS" AB_SIDES="A B A2" AB_THIRD=1 AB_DRAFTERS=none,ngram AB_KS=4 AB_PER=${BLOCKS_PER:-3} \
    AB_DEADLINE=${AB_DEADLINE:-100} AB_TIMEOUT=${AB_TIMEOUT:-130} EXTRA="--strata ${STRATA:-long_context,casual_chat}" \
    bash bench/h200/product_run.sh --ab 2>&1 | tail -40
  tar -C /tmp/tab -czf $O/blocks_ab.tgz .
fi
if [ "${JSON:-1}" = 1 ]; then
  rm -rf /tmp/tjson && mkdir -p /tmp/tjson
  OUT=/tmp/tjson AB_SIDES=A AB_DRAFTERS=none,ngram AB_KS=2,4 AB_PER=${JSON_PER:-4} AB_DEADLINE=${JSON_DEADLINE:-90} AB_TIMEOUT=$((${JSON_DEADLINE:-90} + 30)) \
    EXTRA="--strata json_extraction --json-mode" bash bench/h200/product_run.sh --ab 2>&1 | tail -20
  tar -C /tmp/tjson -czf $O/json_ab.tgz .
fi
