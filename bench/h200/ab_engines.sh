#!/bin/bash
# ONE device call: engine option sets against each other in one process, rounds interleaved (bench/gpu/ab_engines.mjs:
# T_single wall / GPU / submit and the champion alone's path, decodeAhead chained), at a short and a long position;
# it also stages what the product's loop needs but two champion parts (as attn_blocks.sh), so that the product's A/B
# then takes one staging call and the measuring one.
#   here (once): bash bench/h200/h200_prep.sh && bash bench/h200/product_prep.sh (.devcarry/gpu_node, gpu_rest, product,
#                champ0..2 with NPARTS=3); then bash bench/h200/slim.sh --out, and
#   run(command="bash bench/h200/ab_engines.sh", carry=[".devcarry/gpu_node", ".devcarry/gpu_rest", ".devcarry/product",
#       ".devcarry/champ2"], timeout_s=600), then bash bench/h200/slim.sh --back (never committing in between)
#   -> $OUT/ab_engines_short.{txt,json} (KV at 64, capacity 1,024), $OUT/ab_engines_long.{txt,json} (KV at LONG_POS,
#      default 1,800, capacity 2,048)
#   env: AB_VARIANTS (JSON for ab_engines.mjs; default the defaults, attnBlock 0, the defaults again: the third shows
#        what the same options differ by within one process), SHORT=0 / LONG=0 skip a set, ROUNDS (5), SETUP=0 (staged
#        already: a warm machine), BACKEND (vulkan)
#   then, warm: run(command="NPARTS=3 bash bench/h200/product_run.sh --stage", carry=[".devcarry/champ0"]) and the
#   measuring call carrying champ1 (e.g. product_run.sh --ab with AB_LONG=1: the champion alone at 256 tokens).
# Dry run here (llvmpipe, one layer, emulated subgroups, fused):
#   SETUP=0 BACKEND=opengl EMULATE_SG=1 FUSE=1 SYNTH_LAYERS=1 ROUNDS=1 ITERS=2 AHEAD_RUNS=2 OUT=/tmp/abe
#   AB_VARIANTS='[{"name":"kb0","opts":{"attnBlock":0}},{"name":"kb512","opts":{"attnBlock":512}}]' bash bench/h200/ab_engines.sh
set -u
O=${OUT:-/tmp}
mkdir -p $O
B=${BACKEND:-vulkan}
if [ "${SETUP:-1}" = 1 ]; then
  NPARTS=3 bash bench/h200/product_run.sh --stage || exit 3      # node, Dawn + debs, Pyodide into /tmp/exactspec
  mkdir -p /tmp/nb && cp /tmp/exactspec/node/node /tmp/nb/node && chmod +x /tmp/nb/node
  GPU_CARRY=.devcarry/gpu_rest source bench/h200/h200_setup.sh
fi
source bench/h200/staged_env.sh $B                  # node, Dawn, NVIDIA's Vulkan ICD
V=${AB_VARIANTS:-'[{"name":"default","opts":{}},{"name":"kb0","opts":{"attnBlock":0}},{"name":"default2","opts":{}}]'}
run_set() {   # $1 name, then env
  local name=$1; shift
  echo "== $name $(date -u +%T)" | tee $O/ab_engines_$name.txt
  env "$@" timeout ${AB_TIMEOUT:-240} node bench/gpu/ab_engines.mjs --backend $B "$V" > /tmp/ab_$name.txt 2>&1
  echo "rc=$? $(date -u +%T)" >> /tmp/ab_$name.txt
  grep -v '^JSON\|^Warning' /tmp/ab_$name.txt | tee -a $O/ab_engines_$name.txt
  grep '^JSON' /tmp/ab_$name.txt | sed 's/^JSON //' > $O/ab_engines_$name.json
}
[ "${SHORT:-1}" = 1 ] && run_set short BENCH_POS=64 BENCH_SEQ=1024
[ "${LONG:-1}" = 1 ] && run_set long BENCH_POS=${LONG_POS:-1800} BENCH_SEQ=2048
exit 0
