#!/bin/bash
# One budget H200 call that measures the engine default vs fused AND speculation end to end, most important first
# (so a cut-off run still returns the key files). Third of three back-to-back calls (see bench/h200/h200_spec_prep.sh:
# calls 1 and 2 put champion parts p0, p1 in /tmp/champ); carry .devcarry/gpu and .devcarry/spec2.
#   bench_h200.txt        unfused engine (FUSE=0): matmul bandwidth, T_verify(k)/T_single, decode tok/s
#   bench_fuse_h200.txt   FUSE=1 (3 dispatches per layer; the default since 2026-11-29 15:45 UTC), model only
#   pytest_h200.txt       fused engine invariance + parity on the H200's own 32-wide subgroups
#   spec_h200.txt         champion + shipped draft on the engine, default and fused: tok/s alone and with speculation
#   variants_h200.txt     fused variants (FUSE=attn, slice 32, FFN workgroup 1024, head pairs 8, prologue WG 128)
set -e
O=${OUT:-/tmp}
source bench/h200/h200_setup.sh
C=static/models/smollm2-135m-instruct-q4_1.gguf
cat /tmp/champ/p0 /tmp/champ/p1 .devcarry/spec2/p2 > $C
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $C" | sha256sum -c
set +e
export PATH=/tmp/nb:$PATH EXACTSPEC_DAWN_BACKEND=vulkan
FUSE=0 timeout 90 node bench/gpu/bench.mjs --backend vulkan 2>&1 | grep -v "artificially reduced" > $O/bench_h200.txt
grep -v '^JSON' $O/bench_h200.txt
echo "== FUSE=1 (fused engine, 3 dispatches per layer), model only" > $O/bench_fuse_h200.txt
FUSE=1 timeout 45 node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 | grep -v "artificially reduced" >> $O/bench_fuse_h200.txt
grep -v '^JSON' $O/bench_fuse_h200.txt
for v in '{"fuse": true}'; do
  echo "== pytest invariance + parity, fused engine on the GPU's own subgroups: EXACTSPEC_ENGINE_OPTS=$v" | tee -a $O/pytest_h200.txt
  EXACTSPEC_ENGINE_OPTS="$v" timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_engine.py -k "invariance_parity_truncate or gpu_path or test_micro_gqa_partial_rope_untied or fused" 2>&1 | tail -4 | tee -a $O/pytest_h200.txt
done
P="Hi! What are three fun things to do on a rainy afternoon?"
for eo in '{"fuse": false}' '{}'; do
  echo "== speculation, engine options $eo" | tee -a $O/spec_h200.txt
  timeout 60 python3 py/bench/gpu_spec.py --backend vulkan --node /tmp/nb/node --prompt "$P" --max-new-tokens 64 \
    --ks 1,2,3,4 --engine-opts "$eo" 2>&1 | grep -v '^JSON' | tee -a $O/spec_h200.txt
done
{
  for v in "FUSE=attn" "FUSE=1 FUSE_SLICE=32" "FUSE=1 FUSE_WG=1024" "FUSE=1 FUSE_HEAD_PAIRS=8" "FUSE=1 FUSE_MM_WG=128"; do
    echo "== variant $v, model only"
    env $v timeout 25 node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 | grep -E "T_single|T_verify|decode|Error"
  done
} 2>&1 | tee $O/variants_h200.txt
exit 0
