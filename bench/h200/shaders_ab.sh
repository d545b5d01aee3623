#!/bin/bash
# A/B of the WGSL as compiled, in ONE device call (the VM's drift then hits both sides alike): today's shaders/
# (kernel files + shaders/lib/ fragments, expanded by app/gpu/wgsl.js) against the kernel files of revision 30c877a
# (before the split: matmul_sg_pro.wgsl, attn_o.wgsl), alternating, fused (FUSE=1, the default) and unfused (FUSE=0).
# The expanded text equals 30c877a's token for token (tests/gpu/test_wgsl_golden.py), so both sides should agree
# within noise; a gap would mean the compiler saw something else.
#   here:       bash bench/h200/h200_prep.sh; bash bench/h200/shaders_ab.sh --prep     (writes .devcarry/shaders_30c877a)
#   on the GPU: bash bench/h200/shaders_ab.sh       carry .devcarry/gpu and .devcarry/shaders_30c877a; ROUNDS (default 2)
#               rounds of 4 runs (~20 s each, RUN_TIMEOUT 45 s at most): 3-6 minutes with the setup; FUSES=1: fused only
#   -> $OUT/shaders_ab.txt: per run, T_single (wall and GPU), T_verify(k)/T_single, decode tok/s
# REV=<revision> (default 30c877a): another revision's shaders/ as side "old" (.devcarry/shaders_<REV>); e.g. REV=e2a88be,
# the kernels before attention.wgsl's latency change of 2026-12-04. ABLATE=1: each run also prints bench.mjs's ablation
# (a kind's GPU time inside the pass, positions 64 and 512) and its decodeAhead lines.
set -e
cd "$(dirname "$0")/../.."
REV=${REV:-30c877a}
OLD=.devcarry/shaders_$REV
if [ "$1" = --prep ]; then
  rm -rf $OLD && mkdir -p $OLD
  git archive $REV shaders | tar -x -C $OLD --strip-components=1
  [ "$REV" = 30c877a ] || { ls -la $OLD; exit 0; }   # (a revision after the split: the layout the engine reads)
  # a variant that was a file of its own is now a define of the file the engine asks for (app/gpu/kernels.js)
  wrap() {
    { echo "// #if $2"; cat $OLD/$3.wgsl; echo; echo "// #else"; cat $OLD/$1.wgsl; echo; echo "// #endif"; } > $OLD/$1.tmp
    mv $OLD/$1.tmp $OLD/$1.wgsl
  }
  wrap matmul_sg PRO matmul_sg_pro
  wrap attention O_PROJ attn_o
  ls -la $OLD
  exit 0
fi
O=${OUT:-/tmp}
[ "${SETUP:-1}" = 1 ] && source bench/h200/h200_setup.sh   # SETUP=0: node + Dawn staged already (product_run.sh --all)
set +e
export PATH=${NODE_DIR:-/tmp/nb}:$PATH
for round in $(seq ${ROUNDS:-2}); do
  for fuse in ${FUSES:-1 0}; do
    for side in new old; do
      base=""
      [ $side = old ] && base=$PWD/$OLD
      echo "== round $round, FUSE=$fuse, shaders: $side"
      SHADER_BASE=$base FUSE=$fuse timeout ${RUN_TIMEOUT:-45} node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 \
        | grep -E "kernels:|T_single|T_verify|decode alone|Error|ablation|decodeAhead n=16"
    done
  done
done 2>&1 | tee $O/shaders_ab.txt
exit 0
