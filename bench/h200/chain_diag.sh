#!/bin/bash
# The draft head's rounds on the H200 engine, one submission per round (specRound) against R rounds a submission
# (specChain), and both loops the decode loop runs, without Python: py/bench/head_engine.py (bench/gpu/head_bench.mjs)
# twice, with GPU timestamps (one chain timed alone: its GPU time, the host's encode + submit) and without (chains back
# to back, each hinting the next; the champion alone's decodeAhead runs likewise). Needs node, Dawn and the champion
# staged by product_run.sh --stage (no Pyodide). Here: the champion in NPARTS parts (.devcarry/champN as
# product_prep.sh makes them, SPLIT_MB); there, back to back on one warm machine, e.g. (2026-12-05, tree without the
# draft models: 20.5 MiB):
#   run(command="NPARTS=3 bash bench/h200/product_run.sh --stage", carry=[".devcarry/gpu_node", ".devcarry/gpu_rest", ".devcarry/champ0"])
#   run(command="NPARTS=3 bash bench/h200/product_run.sh --stage", carry=[".devcarry/champ1"])
#   run(command="NPARTS=3 bash bench/h200/chain_diag.sh", carry=[".devcarry/champ2"])
#   -> $OUT/chain_diag_ts.{txt,json}, $OUT/chain_diag.{txt,json}, $OUT/chain_diag8.{txt,json} (chains of 8 rounds)
set -u
cd "$(dirname "$0")/../.."
X=${X:-/tmp/exactspec}
O=${OUT:-/tmp}
NPARTS=${NPARTS:-5}
BACKEND=${BACKEND:-vulkan}
C=$X/champion.gguf
mkdir -p $O
NPARTS=$NPARTS bash bench/h200/product_run.sh --stage
if [ ! -f $C ]; then cat $(seq -f "$X/champ/p%g" 0 $((NPARTS - 1))) > $C.part && mv $C.part $C; fi
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $C" | sha256sum -c || { rm -f $C; exit 3; }
source bench/h200/staged_env.sh $BACKEND             # node, Dawn, NVIDIA's Vulkan ICD
H="python3 py/bench/head_engine.py --backend $BACKEND --node $X/node/node --champion $C --head ${HEAD_FILE:-static/models/head-smollm2.gguf} --variants indexed --reps ${REPS:-10} --ks ${KS:-1,2,4} ${EXTRA:-}"
timeout 200 $H --timestamps --json $O/chain_diag_ts.json > $O/chain_diag_ts.txt 2>&1; echo "timestamps: rc $?"
timeout 200 $H --json $O/chain_diag.json > $O/chain_diag.txt 2>&1; echo "no timestamps: rc $?"
timeout 200 $H --chain-rounds 8 --engine-opts '{"chainRounds":8}' --json $O/chain_diag8.json > $O/chain_diag8.txt 2>&1
echo "8 rounds a chain, no timestamps: rc $?"
cat $O/chain_diag_ts.txt $O/chain_diag.txt $O/chain_diag8.txt
