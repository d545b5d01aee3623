#!/bin/bash
# ONE device call: the attention's keys in blocks (engine option attnBlock) against the default, GPU time of the
# engine's passes at a long and a short position, and the bitwise tests of the option; it also stages what the
# product's loop needs but the champion (node, Dawn, the Vulkan loader debs, Pyodide: product_run.sh --stage), so that
# the product's A/B on the long-context stratum then takes one staging call and the measuring one (slim.sh).
#   here (once): bash bench/h200/h200_prep.sh && bash bench/h200/product_prep.sh   (.devcarry/gpu_node, gpu_rest,
#                product, champ0..2 with NPARTS=3)
#   there: bash bench/h200/slim.sh --out (here: the tree then takes ~3 MB of the call), then
#          run(command="bash bench/h200/attn_blocks.sh", carry=[".devcarry/gpu_node", ".devcarry/gpu_rest",
#          ".devcarry/product", ".devcarry/champ2"], timeout_s=600), then bash bench/h200/slim.sh --back
#          (never committing in between). champ2 is the champion's last part, staged for the calls below.
#   -> $OUT/blocks_long.{txt,json} (KV at LONG_POS, default 2,000, capacity 2,048), $OUT/blocks_short.{txt,json} (KV at
#      64), $OUT/blocks_pytest.txt; variants LONG_VARIANTS / SHORT_VARIANTS (names of bench/h200/verify_rows.sh), ROUNDS
#      (2) alternating rounds each.
#   then, while the machine is warm (slimmed again), if a variant wins at the long position and costs nothing at 64
#   (e.g. kb256_s1):
#     run(command="NPARTS=3 bash bench/h200/product_run.sh --stage", carry=[".devcarry/champ0"])
#     run(command="BLOCKS_OPTS='{\"attnBlock\":256,\"attnSplit\":1}' bash bench/h200/blocks_ab.sh",
#         carry=[".devcarry/champ1"], timeout_s=600)   (the product's A/B on long context + casual chat, then JSON mode)
# Since the tenth session attnBlock is on by default ('auto': 512); its variants "default kb0" compare it with blocks
# off. (The tenth session prepared LONG_VARIANTS="kb4096" SHORT_VARIANTS="default kb0 kb4096" to explain why the
# default ran 1.7-2.7% slower than kb0 at position 64; it could not have: at the bench's capacities, 1,024 and 2,048,
# blocks of 4,096 give the model attnBlock 0, i.e. kb0 itself. The eleventh session's bench/h200/ab_engines.sh runs
# the options in one process instead.)
# Dry run here (llvmpipe, one layer, emulated subgroups, fused):
#   SETUP=0 BACKEND=opengl EXTRA_ENV="EMULATE_SG=1 FUSE=1 SYNTH_LAYERS=1" LONG_POS=600 LONG_VARIANTS="default kb256"
#   SHORT_VARIANTS="default kb256" ROUNDS=1 PYTEST=0 OUT=/tmp/blk bash bench/h200/attn_blocks.sh
set -u
O=${OUT:-/tmp}
mkdir -p $O
if [ "${SETUP:-1}" = 1 ]; then
  NPARTS=3 bash bench/h200/product_run.sh --stage || exit 3      # node, Dawn + debs, Pyodide into /tmp/exactspec
  mkdir -p /tmp/nb && cp /tmp/exactspec/node/node /tmp/nb/node && chmod +x /tmp/nb/node
fi
export GPU_CARRY=.devcarry/gpu_rest
run_set() {   # $1 name, $2 variants, $3 extra env
  OUT=$O VARIANTS="$2" ROUNDS=${ROUNDS:-2} PYTEST=0 VTIMEOUT=${VTIMEOUT:-90} EXTRA_ENV="${EXTRA_ENV:-} $3" \
    bash bench/h200/verify_rows.sh > /dev/null 2>&1
  mv $O/verify_rows.txt $O/blocks_$1.txt
  mv $O/verify_rows.json $O/blocks_$1.json
  grep -E "variant|T_single|k=4\)|k=8\)|n=1, pos" $O/blocks_$1.txt | sed 's/encode+submit.*//'
}
run_set long "${LONG_VARIANTS:-default kb128 kb256 kb512 kb128_s1 kb256_s1 kb512_s1 kb64_s1}" \
  "BENCH_POS=${LONG_POS:-2000} BENCH_SEQ=${LONG_SEQ:-2048}"
run_set short "${SHORT_VARIANTS:-default kb256 kb256_s1 kb512 kb512_s1}" ""
if [ "${PYTEST:-1}" = 1 ]; then
  source bench/h200/staged_env.sh ${BACKEND:-vulkan}   # node, Dawn, NVIDIA's Vulkan ICD
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_engine.py -k "key_blocks or tile_policies or refusals" \
    2>&1 | tail -6 | tee $O/blocks_pytest.txt
fi
