#!/bin/bash
# The n-gram drafter's rounds through the product's own loop on the H200: bench product (Pyodide + the Python decode
# loop + bridge.py + app/gpu/engine.js under Node, Dawn over Vulkan), the champion alone and with the n-gram drafter,
# the same run interleaved, for three versions of the decode loop, one after another in one call:
#   A   the tree: matches of 2+ tokens (drafters/ngram.py MIN_NGRAM), an empty round runs ahead up to 4 passes
#       (decode.py AHEAD_WITH_DRAFTER) and hints the next run, which the device queues
#   B   before (py/exactspec/decode.py and drafters/ngram.py of revision $BEFORE, carried in .devcarry/ngram_before):
#       1-token matches, runs of up to 4, no hints
#   C, F, E   A with runs of 1, 2, 8 (AHEAD_WITH_DRAFTER = 1, 2, 8)
# (The calls of bench/h200/results/2026-12-04c/ ran this script at earlier states of the tree, with other letters:
# its README says which setting each file measured.)
# Prepared here:  bash bench/h200/ngram_ab.sh --prep   (writes .devcarry/ngram_before from git)
# On the device, after product_run.sh's staging calls (the champion in NPARTS parts):
#   run(command="NPARTS=3 bash bench/h200/ngram_ab.sh", carry=[".devcarry/champ2", ".devcarry/ngram_before"])
# Writes $OUT/ngram${NG_TAG}_{A,B,C,...}.{json,txt} and ngram${NG_TAG}_ab.log. Env: NG_ARGS (bench product's
# selection), NG_SIDES ("A B C"), NG_TIMEOUT (s per side), NG_TAG (a prefix for the files, e.g. _coupled).
set -u
cd "$(dirname "$0")/../.."
BEFORE=${BEFORE:-f8232b4}
if [ "${1:-}" = "--prep" ]; then
  mkdir -p .devcarry/ngram_before
  git show $BEFORE:py/exactspec/decode.py > .devcarry/ngram_before/decode.py
  git show $BEFORE:py/exactspec/drafters/ngram.py > .devcarry/ngram_before/ngram.py
  echo "$BEFORE" > .devcarry/ngram_before/REVISION
  ls -la .devcarry/ngram_before
  exit 0
fi
O=${OUT:-/tmp}
bash bench/h200/product_run.sh --join || exit 3
X=${X:-/tmp/exactspec}
C=$X/champion.gguf
source bench/h200/staged_env.sh ${BACKEND:-vulkan}   # node, Dawn, NVIDIA's Vulkan ICD
export EXACTSPEC_PYODIDE_DIR=$X/pyodide EXACTSPEC_PYODIDE_PACKAGES=$X/pyodide PYTHONUNBUFFERED=1
B="python3 py/bench/product.py --host node --backend ${BACKEND:-vulkan} --node $X/node/node --champion $C"
ARGS=${NG_ARGS:-"--strata all --per-stratum 2 --drafters none,ngram --ks 4 --modes greedy --runs 3 --max-new-tokens 64 --deadline 120"}
D=py/exactspec/decode.py
N=py/exactspec/drafters/ngram.py
cp $D /tmp/decode.A.py; cp $N /tmp/ngram.A.py
{
  for side in ${NG_SIDES:-A B C}; do
    cp /tmp/decode.A.py $D; cp /tmp/ngram.A.py $N
    case $side in
      B) cp .devcarry/ngram_before/decode.py $D; cp .devcarry/ngram_before/ngram.py $N ;;
      C|E|F) run=$(case $side in C) echo 1;; E) echo 8;; F) echo 2;; esac)
        sed -i "s/^AHEAD_WITH_DRAFTER = 4\$/AHEAD_WITH_DRAFTER = $run/" $D; grep -n '^AHEAD_WITH_DRAFTER' $D ;;
    esac
    echo "== side $side $(date -u +%T): $(sha256sum $D $N | cut -c1-12 | tr '\n' ' ')"
    timeout ${NG_TIMEOUT:-175} $B $ARGS --out $O/ngram${NG_TAG:-}_$side.json --table $O/ngram${NG_TAG:-}_$side.txt
    echo "side $side: rc $? $(date -u +%T)"
  done
  cp /tmp/decode.A.py $D; cp /tmp/ngram.A.py $N
} 2>&1 | tee $O/ngram${NG_TAG:-}_ab.log
ls -la $O
