#!/bin/bash
# H200 bench (device machine, over Vulkan): unpack what tests/gpu/h200_prep.sh put in .devcarry/gpu, then run
#   1. tests/gpu/bench.mjs (matmul bandwidth, T_verify(k)/T_single, tokens/s, per-kernel GPU time) -> $OUT/bench_h200.txt
#   2. the tests/gpu pytest suite on the real GPU (EXACTSPEC_DAWN_BACKEND=vulkan)            -> $OUT/pytest_h200.txt
#   3. the model part again with variants: workgroup-tree matmul (SUBGROUPS=0), matmul workgroups of 128 / 256
set -e
D=.devcarry/gpu
mkdir -p /tmp/nb node_modules
[ -x /tmp/nb/node ] || xz -dc $D/node.xz > /tmp/nb/node
chmod +x /tmp/nb/node
for f in $D/*.deb; do dpkg -x $f /; done; ldconfig
tar -C node_modules -xJf $D/webgpu.tar.xz
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
timeout 200 /tmp/nb/node tests/gpu/bench.mjs --backend vulkan "$@" 2>&1 | grep -v "artificially reduced" | tee ${OUT:-/tmp}/bench_h200.txt
export PATH=/tmp/nb:$PATH EXACTSPEC_DAWN_BACKEND=vulkan
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu -k "not smollm2" 2>&1 | tail -15 | tee ${OUT:-/tmp}/pytest_h200.txt || true
for v in "SUBGROUPS=0" "MATMUL_WG=128" "MATMUL_WG=256"; do
  echo "== variant $v, model only"
  env $v timeout 60 /tmp/nb/node tests/gpu/bench.mjs --backend vulkan --model-only 2>&1 | grep -E "kernels|T_single|T_verify|decode|GPU us"
done
