#!/bin/bash
# ONE H200 call (device machine, Dawn over Vulkan): the engine's tile policies and batched-step variants, each measured
# by bench/gpu/bench.mjs --model-only on SmolLM2-135M-shaped synthetic weights (KV at 64), most important first so a
# run cut short still returns the key figures; then the new exactness tests on the H200's own 32-wide subgroups.
#   $OUT/engine_variants.txt  per variant: dispatches, T_single (wall, GPU), T_verify(k)/T_single k = 1..8 (wall, GPU),
#                             GPU us per kind of dispatch, decode tok/s (one forward + readback per token),
#                             decodeAhead tok/s + GPU ms per pass for n = 4, 8, 16, 32 (greedy ids only; coupled with
#                             rows), specRound(k)/T_single with a 2-layer draft (k = 1..8)
#   $OUT/engine_variants.json the bench's JSON line per variant (all figures)
#   $OUT/pytest_variants.txt  bitwise checks on the H200: batched step == passes one by one, picks == numpy, the
#                             decode loop end to end on the engine, tile policies == default bits, HF folders
# VTIMEOUT: seconds per variant instead of 60. Prepare here once: bash bench/h200/h200_prep.sh (node, Dawn, Vulkan loader debs -> .devcarry/gpu, ~29 MB).
# Run there: bash bench/h200/engine_variants.sh   (carry .devcarry/gpu; about 6-8 minutes; nothing else needed)
# Variants (env of bench.mjs, see its header): the default (fused, multi-row tiles); ROW_TILES: every chunk row of
# a dispatch of <= ROW_TILES_MAX (16) rows in its own workgroup with the 1-row tile (qkv + FFN; + the head; all); ATTN_SPLIT:
# attention + O projection over 2 / 4 workgroups per head; HEAD_SUM: the fused head's input (r + 48 FFN partials)
# summed once by residual.wgsl instead of in each of the head's 768 workgroups; PASS_SPLITS: command buffers per further pass of a
# batched step; FUSE_MM_WG=128 (the prologue matmuls); FUSE_QKV_PAIRS / FUSE_MM_WG (qkv_*: weight rows per staging of
# the qkv prologue's x, r + 48 FFN partials per chunk row, restaged by every workgroup: 240 of them by default);
# FUSE=0 for comparison.
# Dry run here (llvmpipe, 1-layer model, subgroups emulated, a few variants):
#   SETUP=0 BACKEND=opengl BENCH_ARGS=--quick EXTRA_ENV="EMULATE_SG=1 SYNTH_LAYERS=1 AHEAD_NS=2" VARIANTS="default rows_qkv_ffn" \
#   PYTEST=0 OUT=/tmp bash bench/h200/engine_variants.sh
# (the pytest part runs here too with SETUP=0 BACKEND=opengl VARIANTS=none, except its last two runs: rowTiles needs
# real subgroups, llvmpipe refuses it by name)
O=${OUT:-/tmp}
B=${BACKEND:-vulkan}
[ "${SETUP:-1}" = 1 ] && source bench/h200/h200_setup.sh
source bench/h200/staged_env.sh $B                  # node on PATH, Dawn's backend (after h200_setup.sh)
: > $O/engine_variants.txt
: > $O/engine_variants.json
run() {   # run "NAME" "ENV..." TIMEOUT
  case " ${VARIANTS:-$1} " in *" $1 "*) ;; *) return ;; esac
  echo "== variant $1: $2" | tee -a $O/engine_variants.txt
  env $2 ${EXTRA_ENV:-} timeout ${VTIMEOUT:-$3} node bench/gpu/bench.mjs --backend $B --model-only ${BENCH_ARGS:-} > /tmp/variant.txt 2>&1
  echo "rc=$?" >> /tmp/variant.txt
  grep -E "kernels:|dispatches/forward|T_single|T_verify|GPU us per kind|decode alone|decodeAhead|specRound|command buffers|Error|rc=" /tmp/variant.txt | tee -a $O/engine_variants.txt
  grep '^JSON' /tmp/variant.txt | sed "s/^JSON /{\"variant\": \"$1\", \"result\": /; s/\$/}/" >> $O/engine_variants.json
}
run default "FUSE=1" 60
run rows_qkv_ffn "FUSE=1 ROW_TILES=qkv,ffn" 60
run rows_qkv_ffn_head "FUSE=1 ROW_TILES=qkv,ffn,logits" 60
run head_sum "FUSE=1 HEAD_SUM=1" 60
run attn_split2 "FUSE=1 ATTN_SPLIT=2" 60
run rows_attn_split2_head_sum "FUSE=1 ROW_TILES=qkv,ffn ATTN_SPLIT=2 HEAD_SUM=1" 60
run attn_split4 "FUSE=1 ATTN_SPLIT=4" 60
run rows_max8 "FUSE=1 ROW_TILES=qkv,ffn ROW_TILES_MAX=8" 60
run pass_splits0 "FUSE=1 PASS_SPLITS=0" 60
run pass_splits2 "FUSE=1 PASS_SPLITS=2" 60
run prologue_wg128 "FUSE=1 FUSE_MM_WG=128" 60
run qkv_p2 "FUSE=1 FUSE_QKV_PAIRS=2" 60
run qkv_p4 "FUSE=1 FUSE_QKV_PAIRS=4" 60
run qkv_wg128_p2 "FUSE=1 FUSE_MM_WG=128 FUSE_QKV_PAIRS=2" 60
run qkv_wg256 "FUSE=1 FUSE_MM_WG=256" 60
run qkv_wg256_p2 "FUSE=1 FUSE_MM_WG=256 FUSE_QKV_PAIRS=2" 60
run qkv_wg256_p4 "FUSE=1 FUSE_MM_WG=256 FUSE_QKV_PAIRS=4" 60
run slice64_wg256_p2 "FUSE=1 FUSE_SLICE=64 FUSE_MM_WG=256 FUSE_QKV_PAIRS=2" 60
run mm_wg512 "FUSE=1 FUSE_MM_WG=512" 60
run mm_wg64 "FUSE=1 FUSE_MM_WG=64" 60
run ffn_wg1024 "FUSE=1 FUSE_WG=1024" 60
run ffn_wg256 "FUSE=1 FUSE_WG=256" 60
run attn_wg128 "FUSE=1 ATTN_WG=128" 60
run attn_wg512 "FUSE=1 ATTN_WG=512" 60
run attn_split3 "FUSE=1 ATTN_SPLIT=3" 60
run matmul_wg256 "FUSE=1 MATMUL_WG=256" 60
run unfused "FUSE=0" 60
run unfused_rows "FUSE=0 ROW_TILES=all" 60
[ "${PYTEST:-1}" = 1 ] || exit 0
t() { timeout $1 python3 -m pytest -q -p no:cacheprovider "${@:2}" 2>&1 | tail -4; }
{
  echo "== the batched step on the H200's default engine (fused, real subgroups): == passes one by one, picks == numpy"
  t 120 tests/gpu/test_batched_engine.py -k "cpu_path or refusals or ids_only or device_loss"
  echo "== the decode loop end to end on the engine (JsBackend), batched == per forward"
  t 90 tests/gpu/test_decode_on_engine.py
  echo "== tile policies give the default's bits; HF folders; kept features"
  t 90 tests/gpu/test_gpu_engine.py -k "tile_polic or hf_folder or features"
  for v in '{"rowTiles": "all", "attnSplit": 2, "headSum": true}' '{"rowTiles": ["qkv", "ffn", "logits"], "rowTilesMax": 8}'; do
    echo "== invariance + parity with EXACTSPEC_ENGINE_OPTS=$v"
    EXACTSPEC_ENGINE_OPTS="$v" t 60 tests/gpu/test_gpu_engine.py -k "invariance_parity_truncate or test_micro_gqa_partial_rope_untied"
  done
} 2>&1 | tee $O/pytest_variants.txt
exit 0
