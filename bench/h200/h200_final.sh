#!/bin/bash
# One budget H200 call that measures the engine default vs fused, most important first (so a cut-off run still
# returns the key files); carry .devcarry/gpu. (Speculation end to end is measured through the product's own loop:
# bench/h200/product_run.sh; the JS re-implementation of the loop this script used to run is retired.)
#   bench_h200.txt        unfused engine (FUSE=0): matmul bandwidth, T_verify(k)/T_single, decode tok/s
#   bench_fuse_h200.txt   FUSE=1 (3 dispatches per layer; the default since 2026-11-29 15:45 UTC), model only
#   pytest_h200.txt       fused engine invariance + parity on the H200's own 32-wide subgroups
#   variants_h200.txt     fused variants (FUSE=attn, slice 32, FFN workgroup 1024, head pairs 8, prologue WG 128)
set -e
O=${OUT:-/tmp}
source bench/h200/h200_setup.sh
set +e
source bench/h200/staged_env.sh vulkan                  # node on PATH, Dawn's backend (after h200_setup.sh)
FUSE=0 timeout 90 node bench/gpu/bench.mjs --backend vulkan 2>&1 | grep -v "artificially reduced" > $O/bench_h200.txt
grep -v '^JSON' $O/bench_h200.txt
echo "== FUSE=1 (fused engine, 3 dispatches per layer), model only" > $O/bench_fuse_h200.txt
FUSE=1 timeout 45 node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 | grep -v "artificially reduced" >> $O/bench_fuse_h200.txt
grep -v '^JSON' $O/bench_fuse_h200.txt
for v in '{"fuse": true}'; do
  echo "== pytest invariance + parity, fused engine on the GPU's own subgroups: EXACTSPEC_ENGINE_OPTS=$v" | tee -a $O/pytest_h200.txt
  EXACTSPEC_ENGINE_OPTS="$v" timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_engine.py -k "invariance_parity_truncate or gpu_path or test_micro_gqa_partial_rope_untied or fused" 2>&1 | tail -4 | tee -a $O/pytest_h200.txt
done
{
  for v in "FUSE=attn" "FUSE=1 FUSE_SLICE=32" "FUSE=1 FUSE_WG=1024" "FUSE=1 FUSE_HEAD_PAIRS=8" "FUSE=1 FUSE_MM_WG=128"; do
    echo "== variant $v, model only"
    env $v timeout 25 node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 | grep -E "T_single|T_verify|decode|Error"
  done
} 2>&1 | tee $O/variants_h200.txt
exit 0
