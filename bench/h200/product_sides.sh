#!/bin/bash
# ONE device call after product_run.sh's staging calls: bench product under Node (Pyodide, the decode loop,
# bridge.py, engine.js) once per side, each side its engine options, sides in the order given (alternate them), each
# with the engine's timeline (EXACTSPEC_TRACE); then bench/h200/sides_summary.py over all of them.
#   here: bash bench/h200/slim.sh --out; then, on a fresh machine,
#   run(command="NPARTS=3 bash bench/h200/product_run.sh --stage", carry=[".devcarry/gpu_node", ".devcarry/gpu_rest",
#       ".devcarry/product", ".devcarry/champ2"]), run(command="NPARTS=3 bash bench/h200/product_run.sh --stage",
#       carry=[".devcarry/champ0"]), run(command="NPARTS=3 SIDES='A={} B={\"preKeep\":6} A={} B={\"preKeep\":6}' bash
#       bench/h200/product_sides.sh", carry=[".devcarry/champ1"], timeout_s=600); then bash bench/h200/slim.sh --back
#   -> $OUT/sides_summary.txt (sides_summary.py, sides_speedups.py, sides_per_prompt.py), $OUT/sides.tgz (every
#      side's report and timeline, the log)
#   env: SIDES (NAME=ENGINE_OPTS_JSON ..., no spaces inside a JSON), SIDES_ARGS (bench product options; default the
#        champion alone on 5 strata, 1 prompt, 3 runs, 256 tokens at most), OVERLAYS (a folder: where OVERLAYS/NAME
#        exists, its files, at their paths in the tree, replace the tree's for that side's run and are put back after
#        it: a variant of the decode loop's code measured beside the tree's; bench product builds the wheel it runs
#        from the tree at each start; a git-ignored folder such as .devcarry/overlays travels as a carry, e.g. the one
#        bench/h200/results/2026-12-06e/overlays.sh writes)
# Dry run here (llvmpipe): X=/tmp/exactspec-test NPARTS=4 BACKEND=opengl OUT=/tmp/sides SIDES='A={} B={"preKeep":6}'
#   SIDES_ARGS="--strata repetitive --max-new-tokens 8 --runs 1 --drafters none" bash bench/h200/product_sides.sh
set -u
cd "$(dirname "$0")/../.."
X=${X:-/tmp/exactspec}
O=${OUT:-/tmp/out}
T=/tmp/sides
BACKEND=${BACKEND:-vulkan}
rm -rf $T && mkdir -p $O $T
bash bench/h200/product_run.sh --join > $T/join.log 2>&1 || { cat $T/join.log; exit 3; }
source bench/h200/staged_env.sh $BACKEND             # node, Dawn, NVIDIA's Vulkan ICD
export EXACTSPEC_PYODIDE_DIR=$X/pyodide EXACTSPEC_PYODIDE_PACKAGES=$X/pyodide PYTHONUNBUFFERED=1
ARGS=${SIDES_ARGS:-"--strata casual_chat,ambiguity,summaries,rewrites,repetitive --per-stratum 1 --runs 3 --max-new-tokens 256 --drafters none"}
i=0
for side in ${SIDES:?SIDES=NAME=JSON ...}; do
  i=$((i + 1))
  name=${side%%=*}
  opts=${side#*=}
  echo "== side $i: $name $opts $(date -u +%T)" | tee -a $T/log.txt
  ov=${OVERLAYS:+$OVERLAYS/$name}
  [ -n "$ov" ] && [ -d "$ov" ] || ov=
  if [ -n "$ov" ]; then       # the tree's files kept in $T/saved (each overlay file replaces one the tree has)
    rm -rf $T/saved && mkdir -p $T/saved && (cd $ov && find . -type f) > $T/overlay.txt
    while read -r f; do
      [ -f "$f" ] || { echo "overlay $ov: $f is not in the tree" | tee -a $T/log.txt; exit 4; }
    done < $T/overlay.txt
    while read -r f; do
      mkdir -p "$T/saved/$(dirname "$f")" && cp "$f" "$T/saved/$f" && cp "$ov/$f" "$f"
    done < $T/overlay.txt
    echo "   overlay $ov:" $(cd $ov && xargs sha256sum < $T/overlay.txt | cut -c1-16,65-) | tee -a $T/log.txt
  fi
  EXACTSPEC_TRACE=$T/trace_${i}_$name.jsonl timeout 200 python3 py/bench/product.py --host node --backend $BACKEND \
    --node $X/node/node --champion $X/champion.gguf --modes greedy --deadline 150 --engine-opts "$opts" $ARGS \
    --out $T/product_${i}_$name.json --table $T/product_${i}_$name.txt >> $T/log.txt 2>&1
  echo "side $i: rc $? $(date -u +%T)" | tee -a $T/log.txt
  if [ -n "$ov" ]; then
    while read -r f; do cp "$T/saved/$f" "$f"; done < $T/overlay.txt
  fi
  # the sides so far, in case the call's limit cuts the rest (2026-12-07e call 10 lost its summary so): the summaries
  # can be made again from it here (the three scripts below, over the unpacked sides/)
  tar -C /tmp -czf $O/sides.tgz sides
done
python3 bench/h200/sides_summary.py $T | tee $O/sides_summary.txt
# speculation's speedups per side and stratum, and each name's time per prompt over the first side's name
{ echo; python3 bench/h200/sides_speedups.py $T; echo; python3 bench/h200/sides_per_prompt.py "${SIDES%%=*}" $T; } \
  | tee -a $O/sides_summary.txt
tar -C /tmp -czf $O/sides.tgz sides
