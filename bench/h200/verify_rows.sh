#!/bin/bash
# ONE H200 call (Dawn over Vulkan): what a verify block costs with the FFN and the qkv matmul run, for dispatches of
# more than one row, at their own workgroup size / row pairs per subgroup (engine options fuseWgRows,
# fuseMatmulWgRows, fuseQkvPairsRows; one-row passes keep the defaults, so T_single does not move). Each variant is
# bench/gpu/bench.mjs --model-only with VERIFY_ONLY=1 (SmolLM2-135M-shaped synthetic weights, KV at 64): T_single,
# T_verify(k) / T_single for k = 1..8 in GPU time, the GPU time per kind of dispatch for 1 and 5 rows; ROUNDS (default
# 2) rounds with the variants alternating. Then the bitwise checks with the chosen variant on the H200's 32-lane
# subgroups (CHECK_OPTS, JSON): invariance + parity + the tile policies.
#   here:  bash bench/h200/h200_prep.sh   (node, Dawn, the Vulkan loader -> .devcarry/gpu)
#   there, two calls back to back (the tree and all of .devcarry/gpu exceed a call's 64 MiB):
#     run(command="mkdir -p /tmp/nb && xz -T4 -dc .devcarry/gpu_node/node.xz > /tmp/nb/node && chmod +x /tmp/nb/node", carry=[".devcarry/gpu_node"])
#     run(command="GPU_CARRY=.devcarry/gpu_rest bash bench/h200/verify_rows.sh", carry=[".devcarry/gpu_rest"])   (~4-6 minutes)
#   -> $OUT/verify_rows.txt (per run: the kernels line, T_single, T_verify, GPU us per kind), $OUT/verify_rows.json,
#      $OUT/verify_rows_pytest.txt
# Why (bench/h200/results/2026-12-04/bench_ablate.txt): T_verify(k)/T_single steps up at 3, 5, 6 and 9 rows (1.01,
# 1.11, 1.13, 1.30, 1.44, 1.45, 1.47, 1.78 for k = 1..8), as if the row-parallel workgroups (FFN: 48 of 512
# invocations a row; qkv: 60 of 256) ran in more than one wave once their count passes what the SMs hold at once.
# 2026-12-05 (seventh session): VARIANTS="default touch" ROUNDS=3 ABLATE_AFTER=1 CHECK_OPTS='{"fuseTouch":true}': the fused
# kernels' early weight loads (engine option fuseTouch, lib/touch) against the default.
# 2026-12-05 (eighth session): VARIANTS="default hstage hstage_p2 hstage_p8 ..." the head staged in workgroup memory
# (engine option headStage: matmul_sg PRO without partials, fuseHeadWg / fuseHeadPairs) and the plain head's workgroup
# size (matmulWg) against the default plain matmul_sg head of 64 invocations.
# 2026-12-05 (ninth session; bench/h200/attn_blocks.sh runs both sets): VARIANTS="default kb128 kb256 ..." with EXTRA_ENV="BENCH_POS=2000 BENCH_SEQ=2048": the
# attention's keys in blocks (engine option attnBlock) at a long position, and at 64 (what the blocks past a short
# row's position cost: their workgroups return at once).
# Dry run here: SETUP=0 BACKEND=opengl EXTRA_ENV="EMULATE_SG=1 SYNTH_LAYERS=1" ROUNDS=1 PYTEST=0 OUT=/tmp bash bench/h200/verify_rows.sh
O=${OUT:-/tmp}
B=${BACKEND:-vulkan}
[ "${SETUP:-1}" = 1 ] && source bench/h200/h200_setup.sh
source bench/h200/staged_env.sh $B                  # node on PATH, Dawn's backend (after h200_setup.sh)
: > $O/verify_rows.txt
: > $O/verify_rows.json
declare -A V=(
  [default]='{}'
  [ffn256]='{"fuseWgRows":256}'
  [ffn1024]='{"fuseWgRows":1024}'
  [qkvp2]='{"fuseQkvPairsRows":2}'
  [qkv128]='{"fuseMatmulWgRows":128}'
  [qkv512]='{"fuseMatmulWgRows":512}'
  [ffn256_qkvp2]='{"fuseWgRows":256,"fuseQkvPairsRows":2}'
  [ffn256_qkv128]='{"fuseWgRows":256,"fuseMatmulWgRows":128}'
  [rows_qkv]='{"rowTiles":["qkv"]}'
  [rows_ffn]='{"rowTiles":["ffn"]}'
  [rowmax4]='{"rowTilesMax":4}'
  [rowmax4_t4]='{"rowTilesMax":4,"tile8":false}'
  [rowmax2]='{"rowTilesMax":2}'
  [touch]='{"fuseTouch":true}'
  [touch_qa]='{"fuseTouch":["qkv","attn"]}'
  [touch_qal]='{"fuseTouch":["qkv","attn","logits"]}'
  [touch_qad]='{"fuseTouch":["qkv","attn","ffn_down"]}'
  [touch_qag]='{"fuseTouch":["qkv","attn","ffn_gate_up"]}'
  [off]='{"fuseTouch":false}'
  [hstage]='{"headStage":true}'
  [hstage_p2]='{"headStage":true,"fuseHeadPairs":2}'
  [hstage_p8]='{"headStage":true,"fuseHeadPairs":8}'
  [hstage_p16]='{"headStage":true,"fuseHeadPairs":16}'
  [hstage_w512]='{"headStage":true,"fuseHeadWg":512}'
  [hstage_w1024_p8]='{"headStage":true,"fuseHeadWg":1024,"fuseHeadPairs":8}'
  [hstage_w128]='{"headStage":true,"fuseHeadWg":128}'
  [hstage_touch]='{"headStage":true,"fuseTouch":["qkv","attn","logits"]}'
  [mm128]='{"matmulWg":128}'
  [mm256]='{"matmulWg":256}'
  [kb0]='{"attnBlock":0}'
  [kb4096]='{"attnBlock":4096}'
  [kb64]='{"attnBlock":64}'
  [kb128]='{"attnBlock":128}'
  [kb256]='{"attnBlock":256}'
  [kb512]='{"attnBlock":512}'
  [kb256_s1]='{"attnBlock":256,"attnSplit":1}'
  [kb128_s1]='{"attnBlock":128,"attnSplit":1}'
  [kb512_s1]='{"attnBlock":512,"attnSplit":1}'
  [kb64_s1]='{"attnBlock":64,"attnSplit":1}'
  [down]='{"lightDown":true}'
  [nodown]='{"lightDown":false}'
  [down_q512]='{"lightDown":true,"fuseMatmulWgRows":512}'
  [down_q1024]='{"lightDown":true,"fuseMatmulWgRows":1024}'
  [f576d]='{"lightDown":true,"fuseWgRows":576}'
  [f576d_q1024]='{"lightDown":true,"fuseWgRows":576,"fuseMatmulWgRows":1024}'
  [q1024]='{"fuseMatmulWgRows":1024}'
  [qkvp2_r58]='{"fuseQkvPairsRows":2,"qkvRowsMin":5,"qkvRowsMax":8}'
  [q1024_r58]='{"fuseMatmulWgRows":1024,"qkvRowsMin":5,"qkvRowsMax":8}'
  [one576]='{"fuseWg":576}'
  [one_q1024]='{"fuseMatmulWg":1024}'
  [one576_q1024]='{"fuseWg":576,"fuseMatmulWg":1024,"lightDown":true}'
  [t8off]='{"tile8":false}'
  [t8at5]='{"tile8Rows":5}'
)
ORDER=${VARIANTS:-"default ffn256 qkvp2 ffn256_qkvp2 ffn1024 qkv128 qkv512 ffn256_qkv128"}
# (the second call of 2026-12-05: VARIANTS="default rows_qkv rows_ffn rowmax4 rowmax4_t4 rowmax2": the tile policies,
# i.e. which kinds run every row in its own workgroup, up to how many rows, and tiles of 4 or 8 rows past that)
# (a VARIANTS entry NAME=JSON names its own options, e.g. old={"shaderBase":"file://$PWD/oldshaders/"}: another
#  revision's kernels, from a folder of its shaders/ that travels with the tree untracked)
for v in $ORDER; do [[ $v == *=* ]] && { V[${v%%=*}]=${v#*=}; }; done
ORDER=$(for v in $ORDER; do echo -n "${v%%=*} "; done)
for r in $(seq 1 ${ROUNDS:-2}); do
  for v in $ORDER; do
    echo "== round $r variant $v: ${V[$v]}" | tee -a $O/verify_rows.txt
    env VERIFY_ONLY=1 EXACTSPEC_ENGINE_OPTS="${V[$v]}" ${EXTRA_ENV:-} timeout ${VTIMEOUT:-60} \
      node bench/gpu/bench.mjs --backend $B --model-only > /tmp/variant.txt 2>&1
    echo "rc=$?" >> /tmp/variant.txt
    grep -E "kernels:|T_single|T_verify|GPU us per kind|chain \(|Error|rc=" /tmp/variant.txt | tee -a $O/verify_rows.txt
    grep '^JSON' /tmp/variant.txt | sed "s/^JSON /{\"round\": $r, \"variant\": \"$v\", \"result\": /; s/\$/}/" >> $O/verify_rows.json
  done
done
# ABLATE_AFTER=1: then each variant once more with the ablation (bench.mjs ABLATE=1: GPU ms a pass running ahead,
# decodeAhead n = AHEAD_NS (16), with each kind of dispatch left out), no specRound
if [ "${ABLATE_AFTER:-0}" = 1 ]; then
  for v in $ORDER; do
    echo "== ablation, variant $v: ${V[$v]}" | tee -a $O/verify_rows.txt
    env ABLATE=1 SPEC_ROUND=0 AHEAD_NS=${AHEAD_NS:-16} EXACTSPEC_ENGINE_OPTS="${V[$v]}" ${EXTRA_ENV:-} timeout ${VTIMEOUT:-90} \
      node bench/gpu/bench.mjs --backend $B --model-only > /tmp/variant.txt 2>&1
    echo "rc=$?" >> /tmp/variant.txt
    grep -E "T_single|decode alone|decodeAhead|ablation|Error|rc=" /tmp/variant.txt | tee -a $O/verify_rows.txt
    grep '^JSON' /tmp/variant.txt | sed "s/^JSON /{\"ablation\": true, \"variant\": \"$v\", \"result\": /; s/\$/}/" >> $O/verify_rows.json
  done
fi
[ "${PYTEST:-1}" = 1 ] || exit 0
{
  echo "== invariance + parity + tile policies with EXACTSPEC_ENGINE_OPTS=${CHECK_OPTS:-${V[ffn256_qkvp2]}}"
  EXACTSPEC_ENGINE_OPTS="${CHECK_OPTS:-${V[ffn256_qkvp2]}}" timeout 150 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_gpu_engine.py -k "invariance_parity_truncate or test_micro_gqa_partial_rope_untied or tile_polic" 2>&1 | tail -4
} | tee $O/verify_rows_pytest.txt
