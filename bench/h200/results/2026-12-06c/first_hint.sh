#!/bin/bash
# ONE device call after product_run.sh's staging calls: the champion alone through the product's loop (bench product
# under Node: Pyodide, the decode loop, bridge.py, engine.js) with the decode loop's hint after an answer's first run
# ("after", the tree as it is) and without it ("before": py/exactspec/decode.py with that one condition put back, in
# this copy of the tree only), sides alternating after / before / after / before, each with the engine's timeline
# (EXACTSPEC_TRACE); then bench/h200/first_hint_summary.py over all four.
#   here: bash bench/h200/slim.sh --out; then, on a fresh machine,
#   run(command="NPARTS=3 bash bench/h200/product_run.sh --stage", carry=[".devcarry/gpu_node", ".devcarry/gpu_rest",
#       ".devcarry/product", ".devcarry/champ2"]), run(command="NPARTS=3 bash bench/h200/product_run.sh --stage",
#       carry=[".devcarry/champ0"]), run(command="NPARTS=3 bash bench/h200/first_hint.sh", carry=[".devcarry/champ1"],
#       timeout_s=600); then bash bench/h200/slim.sh --back
#   -> $OUT/first_hint_summary.txt, $OUT/first_hint.tgz (the four sides' reports and timelines, the log)
#   env: FH_ARGS (bench product options; default 5 strata, 1 prompt, 3 runs, 256 tokens at most), FH_SIDES ("after
#        before after before")
# Dry run here (llvmpipe): X=/tmp/exactspec-test BACKEND=opengl OUT=/tmp/fh FH_ARGS="--strata repetitive
#   --max-new-tokens 8 --runs 1" bash bench/h200/first_hint.sh
set -u
cd "$(dirname "$0")/../.."
X=${X:-/tmp/exactspec}
O=${OUT:-/tmp/out}
T=/tmp/first_hint
BACKEND=${BACKEND:-vulkan}
mkdir -p $O $T
bash bench/h200/product_run.sh --join > $T/join.log 2>&1 || { cat $T/join.log; exit 3; }
mkdir -p node_modules
[ -e node_modules/webgpu ] || ln -s $X/node_modules/webgpu node_modules/webgpu
[ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export EXACTSPEC_PYODIDE_DIR=$X/pyodide EXACTSPEC_PYODIDE_PACKAGES=$X/pyodide PYTHONUNBUFFERED=1
ARGS=${FH_ARGS:-"--strata casual_chat,ambiguity,summaries,rewrites,repetitive --per-stratum 1 --runs 3 --max-new-tokens 256"}
D=py/exactspec/decode.py
cp $D $T/decode_after.py
python3 - $D $T/decode_before.py <<'EOF'
import sys
s = open(sys.argv[1]).read()
new = '(n.ahead_passes or cfg.drafter == "none")'
assert s.count(new) == 1, "the first run's hint condition is not in decode.py"
open(sys.argv[2], "w").write(s.replace(new, "n.ahead_passes"))
EOF
i=0
for side in ${FH_SIDES:-after before after before}; do
  i=$((i + 1))
  cp $T/decode_$side.py $D
  echo "== side $i: $side $(date -u +%T)" | tee -a $T/log.txt
  EXACTSPEC_TRACE=$T/trace_${i}_$side.jsonl timeout 200 python3 py/bench/product.py --host node --backend $BACKEND \
    --node $X/node/node --champion $X/champion.gguf --drafters none --modes greedy --deadline 150 $ARGS \
    --out $T/product_${i}_$side.json --table $T/product_${i}_$side.txt >> $T/log.txt 2>&1
  echo "side $i: rc $? $(date -u +%T)" | tee -a $T/log.txt
done
cp $T/decode_after.py $D
python3 bench/h200/first_hint_summary.py $T | tee $O/first_hint_summary.txt
tar -C /tmp -czf $O/first_hint.tgz first_hint
