#!/bin/bash
# verify's continuation on the H200 through the product's own loop (bench product: Pyodide + the Python decode loop +
# bridge.py + app/gpu/engine.js under Node, Dawn over Vulkan): the n-gram drafter's verify rounds with the device going
# on by itself from a rejected proposal (V, the default: verify's `then`) against verify rounds after which the device
# waits for the decode loop (N: createEngine option verifyThen false), each side with the champion alone in the same
# process, sides interleaved: V N at 64 tokens, then V N at 256 tokens. (Run at b10543c, this script measured the
# first design, verify_ahead: m passes after EVERY verify in its submission, bench/h200/results/2026-12-04e/ calls 4-5.)
# On the device, after product_run.sh's three staging calls (NPARTS=3: `bash bench/h200/product_run.sh --stage`
# carrying .devcarry/gpu_node + .devcarry/gpu_rest; .devcarry/product + .devcarry/champ0; .devcarry/champ1):
#   run(command="NPARTS=3 bash bench/h200/verify_ahead_ab.sh", carry=[".devcarry/champ2"], timeout_s=600)
# Writes $OUT/va_{V,N}.{json,txt} (64 tokens), $OUT/va_long_{V,N}.{json,txt} (256 tokens), va.log.
# Env: VA_ARGS / VA_LONG_ARGS (bench product's selection), VA_TIMEOUT / VA_LONG_TIMEOUT (s per side).
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}
bash bench/h200/product_run.sh --join || exit 3
X=${X:-/tmp/exactspec}
C=$X/champion.gguf
mkdir -p node_modules
[ -e node_modules/webgpu ] || ln -s $X/node_modules/webgpu node_modules/webgpu
[ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export EXACTSPEC_PYODIDE_DIR=$X/pyodide EXACTSPEC_PYODIDE_PACKAGES=$X/pyodide PYTHONUNBUFFERED=1
B="python3 py/bench/product.py --host node --backend ${BACKEND:-vulkan} --node $X/node/node --champion $C"
S=${VA_ARGS:-"--strata all --per-stratum 2 --drafters none,ngram --ks 4 --adaptive both --modes greedy --runs 3 --max-new-tokens 64 --deadline 130"}
L=${VA_LONG_ARGS:-"--strata summaries,rewrites,repetitive --per-stratum 1 --drafters none,ngram --ks 4 --adaptive both --modes greedy --runs 3 --max-new-tokens 256 --deadline 45"}
{
  for run in short long; do
    for side in V N; do
      opts=""; [ $side = N ] && opts='--engine-opts {"verifyThen":false}'
      args=$S; tag=va; t=${VA_TIMEOUT:-185}
      [ $run = long ] && { args=$L; tag=va_long; t=${VA_LONG_TIMEOUT:-85}; }
      echo "== $tag side $side ${opts:-(the defaults)} $(date -u +%T)"
      timeout $t $B $args $opts --out $O/${tag}_$side.json --table $O/${tag}_$side.txt
      echo "$tag side $side: rc $? $(date -u +%T)"
    done
  done
} 2>&1 | tee $O/va.log
ls -la $O
