#!/bin/bash
# ONE device call after product_run.sh's staging calls (node, Dawn, the champion's parts in /tmp/exactspec): the
# engine's GPU tests on the device's own subgroups (Dawn over Vulkan; the tests' un-emulated engines take the
# defaults measured on the H200 / H100: fused, attnRowsZ, qkvRowsDense, chainStepDirect, ...), the champion joined
# and linked where the SmolLM2 tests look for it. Each pytest run has its own time limit; what ran is in the files.
#   there: run(command="NPARTS=3 bash bench/h200/product_run.sh --stage; NPARTS=3 bash bench/h200/gpu_tests.sh",
#              carry=[the last champion part])   (NPARTS: the champion's parts, as staged; product_run.sh's default is 5)
#   -> $OUT/gpu_tests_1.txt, gpu_tests_2.txt (pytest -q -rs output)
#   env: TESTS1 (default: the chain, batched and spec-chain engine tests), TESTS2 + K2 (default: test_gpu_engine.py's
#        invariance / parity / tile-policy / key-block / SmolLM2 tests), T1 / T2 (time limits, 150 / 150 s)
set -u
cd "$(dirname "$0")/../.."
X=${X:-/tmp/exactspec}
O=${OUT:-/tmp/out}
mkdir -p $O
bash bench/h200/product_run.sh --join > $O/gpu_tests_join.log 2>&1 || { cat $O/gpu_tests_join.log; exit 3; }
CH=static/models/smollm2-135m-instruct-q4_1.gguf
[ -e $CH ] || ln -s $X/champion.gguf $CH
source bench/h200/staged_env.sh                      # node, Dawn, NVIDIA's Vulkan ICD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee $O/gpu_tests_device.txt
sha256sum app/gpu/options.js app/gpu/model.js shaders/chain.wgsl | tee -a $O/gpu_tests_device.txt   # (the tree's code: the
# device's git metadata is not this tree's, its `git log` named an older revision)
timeout ${T1:-150} python3 -m pytest -q -rs ${TESTS1:-tests/gpu/test_chain_engine.py tests/gpu/test_batched_engine.py tests/gpu/test_spec_chain_engine.py} \
  > $O/gpu_tests_1.txt 2>&1
echo "rc=$?" >> $O/gpu_tests_1.txt
timeout ${T2:-150} python3 -m pytest -q -rs ${TESTS2:-tests/gpu/test_gpu_engine.py} \
  -k "${K2:-invariance_parity_truncate or tile_polic or key_blocks or smollm2}" > $O/gpu_tests_2.txt 2>&1
echo "rc=$?" >> $O/gpu_tests_2.txt
tail -n 4 $O/gpu_tests_1.txt $O/gpu_tests_2.txt
