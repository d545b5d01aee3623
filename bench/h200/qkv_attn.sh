#!/bin/bash
# H200, 2026-12-04 (second session): a decode pass's qkv + attention in one dispatch (engine option fuseQkvAttn,
# attention.wgsl QKV) against the two dispatches before it. One call after nothing else (it stages node + Dawn itself):
#   run(command="bash bench/h200/qkv_attn.sh", carry=[".devcarry/gpu_node", ".devcarry/gpu_rest"], timeout_s=600)
# (.devcarry/ prepared here by `SPLIT_MB="26 34" bash bench/h200/product_prep.sh`.) Writes to $OUT:
# TAG (default qkv_attn) names the files: call 1 ran the first kernel (its cache a read_write binding), call 2
# (TAG=qkv_attn2) the one whose cache binding is read only (k, v at pos copied by the FFN, ffn_sg.wgsl KVCOPY), call 3
# (TAG=qkv_attn3 SIDES="A B") with the cache loads unguarded (select instead of a branch per key / value load).
#   $TAG_pytest.txt  bitwise checks on the GPU's own 32-lane subgroups: tests/gpu/test_gpu_engine.py's invariance
#                        (one-row passes == the same rows in verify blocks and prefill chunks), parity with numpy and
#                        the tile policies, with the merged dispatch (default), without it, and at 512 invocations
#   $TAG_bench.txt   bench/gpu/bench.mjs --model-only (SmolLM2-shaped weights, GPU timestamps), 3 rounds of
#                        A ({"fuseQkvAttn": true}: merged, 1,024 invocations), B (the default: 3 dispatches a layer;
#                        calls 1-3 ran while the merged kernel was the default, so there A was {} and B
#                        {"fuseQkvAttn": false}), C (merged at 512 invocations), D (at 256) alternating (SIDES picks); round 1 of A and B with ABLATE=1 (where the time goes)
set -u
cd "$(dirname "$0")/../.."
X=${X:-/tmp/exactspec}
O=${OUT:-/tmp}
T=${TAG:-qkv_attn}
mkdir -p $O
bash bench/h200/product_run.sh --stage > /dev/null 2>&1 || { echo "staging failed"; bash bench/h200/product_run.sh --stage; }
source bench/h200/staged_env.sh vulkan               # node, Dawn, NVIDIA's Vulkan ICD
export XDG_RUNTIME_DIR=/tmp
node --version
{
  for v in '{"fuse": true, "fuseQkvAttn": true}' '{"fuse": true}' '{"fuse": true, "fuseQkvAttn": true, "fuseQkvAttnWg": 512}'; do
    echo "== pytest, EXACTSPEC_ENGINE_OPTS=$v"
    EXACTSPEC_ENGINE_OPTS="$v" timeout ${PYTEST_S:-80} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_engine.py \
      -k "invariance_parity_truncate or gpu_path or test_micro_gqa_partial_rope_untied or tile_policies" 2>&1 | tail -4
  done
} 2>&1 | tee $O/${T}_pytest.txt
{
  for r in 1 2 3; do
    for side in ${SIDES:-A B C}; do
      case $side in A) o='{"fuseQkvAttn":true}';; B) o='{}';; C) o='{"fuseQkvAttn":true,"fuseQkvAttnWg":512}';;
        D) o='{"fuseQkvAttn":true,"fuseQkvAttnWg":256}';; esac
      ab=0; [ $r = 1 ] && [ $side != C ] && ab=1
      echo "== round $r side $side EXACTSPEC_ENGINE_OPTS=$o ABLATE=$ab"
      EXACTSPEC_ENGINE_OPTS="$o" ABLATE=$ab AHEAD_NS=8,16 timeout ${BENCH_S:-75} node bench/gpu/bench.mjs --backend vulkan --model-only 2>&1 \
        | grep -v "^JSON" | grep -E "kernels|T_single|T_verify\(k=[148]\)|decodeAhead n=(8|16) greedy|specRound\(k=[124],|ablation|dispatches|Error|error"
    done
  done
} 2>&1 | tee $O/${T}_bench.txt
exit 0
