#!/bin/bash
# Prepare (here) the H200 run of the product's own loop: `bench product --host node --backend vulkan`
# (py/bench/product.py driving bench/product/node_host.mjs: Pyodide + exactspec's decode loop + bridge.py +
# app/gpu/engine.js under Node, Dawn over Vulkan). Writes git-ignored .devcarry folders, each well under the 64 MiB a
# call may carry:
#   .devcarry/gpu       node (xz), Dawn's webgpu package, the Vulkan loader + glvnd debs (bench/h200/h200_prep.sh) ~28 MiB
#   .devcarry/product   pyodide.tar.xz: the Pyodide runtime (node_modules/pyodide: pyodide.mjs, .asm.js, .asm.wasm,
#                       python_stdlib.zip, pyodide-lock.json, package.json) + the numpy / micropip / packaging wheels
#                       (static/pyodide/<version>/); exactspec.whl (the tree's, for reference: product.py rebuilds it
#                       there from the tree, so the measured code is the tree's)                          ~7 MiB
#   .devcarry/champ0 .. champ4   the 98 MB champion in parts of SPLIT_MB (10, 22, 22, 22 MiB and the rest; sha256 checked there)
# The shipped draft (static/models/draft-smollm2-kd.gguf) and the workload (tests/data/workload.jsonl) are tracked
# files: they travel with the working tree (the run prints their sha256). static/rules.js is rebuilt there.
#
# Then the lead, on the device machine, SIX calls back to back (a warm machine keeps /tmp between calls; the first
# five only stage what they carry into /tmp/exactspec, ~10 s each). The tree itself (~40 MiB since the foreign draft
# was tracked, 2026-12-02) travels with every call, so each call carries at most ~23 MiB beside it:
#   1. run(command="bash bench/h200/product_run.sh --stage", carry=[".devcarry/gpu_node"], timeout_s=120)
#   2. run(command="bash bench/h200/product_run.sh --stage", carry=[".devcarry/gpu_rest", ".devcarry/product", ".devcarry/champ0"], timeout_s=120)
#   3-5. run(command="bash bench/h200/product_run.sh --stage", carry=[".devcarry/champN"], timeout_s=120), N = 1, 2, 3
#   6. run(command="bash bench/h200/product_run.sh", carry=[".devcarry/champ4"], timeout_s=600)
#      (or `bash bench/h200/product_run.sh --quick` for the quick slice only, ~1 minute)
#      (or `bash bench/h200/product_run.sh --matrix`: the preregistered bench matrix, subsets full and gpu, whose
#      answers also give bench product's figures: $OUT/matrix-full/, $OUT/matrix-gpu/, ~6 minutes; it can also follow
#      call 5 as a sixth call with carry=[] while the machine is warm)
#      (or `bash bench/h200/cover.sh`: all 136 prompts, the CPU benches in shards beside the product's loop)
# .devcarry/gpu_node and .devcarry/gpu_rest are .devcarry/gpu (bench/h200/h200_prep.sh, which the engine scripts
# carry whole) in two halves: node.xz alone, and Dawn's webgpu package with the debs.
# The last call stops with a message naming the calls to repeat if the machine was given back in between.
# Usage here: bash bench/h200/product_prep.sh   (after `python build.py setup`; needs apt-get download for the debs)
set -e
cd "$(dirname "$0")/../.."
C=static/models/smollm2-135m-instruct-q4_1.gguf
WANT=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
[ -f .devcarry/gpu/node.xz ] && [ -f .devcarry/gpu/webgpu.tar.xz ] || bash bench/h200/h200_prep.sh
V=$(node -p "require('./node_modules/pyodide/package.json').version")
P=.devcarry/product
mkdir -p $P
T=$(mktemp -d)
mkdir -p $T/pyodide
cp node_modules/pyodide/{pyodide.mjs,pyodide.asm.js,pyodide.asm.wasm,python_stdlib.zip,pyodide-lock.json,package.json} $T/pyodide/
cp static/pyodide/$V/*.whl $T/pyodide/
tar -C $T -cJf $P/pyodide.tar.xz pyodide
rm -rf $T
python3 -c "import sys; sys.path.insert(0, 'py'); from exactspec_build.wheel import build_exactspec_wheel; print(build_exactspec_wheel())" \
  | tail -1 | xargs -I{} cp {} $P/exactspec.whl
echo "$WANT  $C" | sha256sum -c
MiB=$((1 << 20))
# the tree travels with every call (~40 MiB on 2026-12-02), so the parts are sized for what is left of 64 MiB beside
# it: call 1 carries node (~23 MiB), call 2 the rest of gpu (~5 MiB) + product (~8 MiB) + part 0, calls 3-5 parts
# 1-3, call 6 the rest (~18 MiB)
SPLIT_MB=${SPLIT_MB:-"10 22 22 22"}    # MiB per part; the last part is what remains
rm -rf .devcarry/gpu_node .devcarry/gpu_rest
mkdir -p .devcarry/gpu_node .devcarry/gpu_rest
ln .devcarry/gpu/node.xz .devcarry/gpu_node/
ln .devcarry/gpu/webgpu.tar.xz .devcarry/gpu/*.deb .devcarry/gpu_rest/
rm -rf .devcarry/champ[0-9]*
off=0; i=0
for mb in $SPLIT_MB; do
  mkdir -p .devcarry/champ$i
  tail -c +$((off + 1)) $C | head -c $((mb * MiB)) > .devcarry/champ$i/p$i
  off=$((off + mb * MiB)); i=$((i + 1))
done
mkdir -p .devcarry/champ$i && tail -c +$((off + 1)) $C > .devcarry/champ$i/p$i
parts=$(for j in $(seq 0 $i); do echo .devcarry/champ$j/p$j; done)
cat $parts | sha256sum | grep -q $WANT
du -sh .devcarry/gpu_node .devcarry/gpu_rest .devcarry/product .devcarry/champ[0-9]*
echo "$((i + 1)) parts (NPARTS=$((i + 1)) for product_run.sh); tree $(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {printf "%.1f", s / 1048576}') MiB tracked (+ untracked, not ignored files)"
