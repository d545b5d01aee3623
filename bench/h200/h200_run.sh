#!/bin/bash
# H200 bench (device machine, over Vulkan): unpack what bench/h200/h200_prep.sh put in .devcarry/gpu, then run
#   1. bench/gpu/bench.mjs, unfused (FUSE=0; the default is fused) (matmul bandwidth, T_verify(k)/T_single, tokens/s,
#      per-kernel GPU time)                                                                  -> $OUT/bench_h200.txt
#   2. the tests/gpu pytest suite on the real GPU (EXACTSPEC_DAWN_BACKEND=vulkan)            -> $OUT/pytest_h200.txt
#      (if it fails: the invariance tests again with each matmul tile variant off, to name the culprit;
#      then the invariance tests with two subgroups per matmul row pair, ksplit 2)
#   3. the model part with the fused engine (FUSE=1: 3 dispatches per layer; model only; with the GPU time per kind
#      of dispatch)                                                                          -> $OUT/bench_fuse_h200.txt
#   4. the invariance tests on the real GPU's subgroups with the fused engine forced (EXACTSPEC_ENGINE_OPTS fuse
#      true, then 'attn')                                                                    -> $OUT/pytest_h200.txt
#   5. the model part again with variants: fused (FUSE=attn: 4 per layer; FFN slices of 32 / 128 hidden units;
#      FFN workgroups of 256 / 1024; the head's prologue matmul with 1 / 8 pairs per subgroup; qkv prologue matmul
#      workgroups of 128), then the older ones (2 or 4
#      subgroups per matmul row pair; one command buffer per forward; no 1-row / 8-row tiles; matmul workgroups of
#      128) and head- and gate/up-shaped matmuls                                             -> $OUT/variants_h200.txt
# Whole run: about 4-5 minutes. Usage there: bash bench/h200/h200_run.sh   (carry .devcarry/gpu)
set -e
O=${OUT:-/tmp}
source bench/h200/h200_setup.sh
set +e
FUSE=0 timeout 100 /tmp/nb/node bench/gpu/bench.mjs --backend vulkan "$@" 2>&1 | grep -v "artificially reduced" > $O/bench_h200.txt
grep -v '^JSON' $O/bench_h200.txt
source bench/h200/staged_env.sh vulkan                  # node on PATH, Dawn's backend (after h200_setup.sh)
echo "== FUSE=1 (fused engine, 3 dispatches per layer), model only" > $O/bench_fuse_h200.txt
FUSE=1 timeout 60 /tmp/nb/node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 | grep -v "artificially reduced" >> $O/bench_fuse_h200.txt
grep -v '^JSON' $O/bench_fuse_h200.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu -k "not smollm2" 2>&1 | tail -25 > $O/pytest_h200.txt
cat $O/pytest_h200.txt
if ! tail -1 $O/pytest_h200.txt | grep -q " passed" || tail -1 $O/pytest_h200.txt | grep -q "failed"; then
  for v in '{"tile1": false}' '{"tile8": false}' '{"tile1": false, "tile8": false}' '{"splits": 1}'; do
    echo "== pytest invariance with EXACTSPEC_ENGINE_OPTS=$v"
    EXACTSPEC_ENGINE_OPTS="$v" timeout 40 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_engine.py -k "invariance and not smollm2" 2>&1 | tail -2
  done 2>&1 | tee -a $O/pytest_h200.txt
fi
echo "== pytest invariance with EXACTSPEC_ENGINE_OPTS={\"ksplit\": 2} (two subgroups per matmul row pair)" | tee -a $O/pytest_h200.txt
EXACTSPEC_ENGINE_OPTS='{"ksplit": 2}' timeout 40 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_engine.py -k "invariance and not smollm2 and not fused" 2>&1 | tail -2 | tee -a $O/pytest_h200.txt
for v in '{"fuse": true}' '{"fuse": "attn"}'; do
  echo "== pytest invariance + parity, fused engine on the GPU's own subgroups: EXACTSPEC_ENGINE_OPTS=$v" | tee -a $O/pytest_h200.txt
  EXACTSPEC_ENGINE_OPTS="$v" timeout 40 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_engine.py -k "invariance_parity_truncate or gpu_path or test_micro_gqa_partial_rope_untied" 2>&1 | tail -4 | tee -a $O/pytest_h200.txt
done
{
  for v in "FUSE=attn" "FUSE=1 FUSE_SLICE=32" "FUSE=1 FUSE_SLICE=128" "FUSE=1 FUSE_WG=256" "FUSE=1 FUSE_WG=1024" \
           "FUSE=1 FUSE_HEAD_PAIRS=1" "FUSE=1 FUSE_HEAD_PAIRS=8" "FUSE=1 FUSE_MM_WG=128" "FUSE=1 FUSE_WG=1024 FUSE_SLICE=32"; do
    echo "== variant $v, model only"
    env $v timeout 30 /tmp/nb/node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 | grep -E "T_single|T_verify|decode|command buffers|GPU us per kind|Error"
  done
  for v in "KSPLIT=2" "KSPLIT=4 MATMUL_WG=128" "SPLITS=1" "TILE1=0" "TILE8=0" "MATMUL_WG=128"; do
    echo "== variant $v, model only"
    env $v timeout 20 /tmp/nb/node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 | grep -E "T_single|T_verify|decode|command buffers"
  done
  echo "== head-shaped matmul (49152 x 576 Q8_0) and SmolLM2 gate/up-shaped (3072 x 576 Q4_1)"
  MM_N=49152 MM_K=576 MM_TYPES=Q8_0 timeout 20 /tmp/nb/node bench/gpu/bench.mjs --backend vulkan --matmul-only 2>&1 | grep "^matmul"
  MM_N=3072 MM_K=576 MM_TYPES=Q4_1 timeout 20 /tmp/nb/node bench/gpu/bench.mjs --backend vulkan --matmul-only 2>&1 | grep "^matmul"
  echo "== SmolLM2 gate/up-shaped matmul with two subgroups per row pair (KSPLIT=2)"
  KSPLIT=2 MM_N=3072 MM_K=576 MM_TYPES=Q4_1 timeout 20 /tmp/nb/node bench/gpu/bench.mjs --backend vulkan --matmul-only 2>&1 | grep "^matmul"
  echo "== 8192 x 4096 matmuls with 128-invocation workgroups"
  MATMUL_WG=128 timeout 20 /tmp/nb/node bench/gpu/bench.mjs --backend vulkan --matmul-only 2>&1 | grep "^matmul"
} 2>&1 | tee $O/variants_h200.txt
exit 0
