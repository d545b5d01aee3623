#!/bin/bash
# All 136 workload prompts in one or two H200 calls (issues 11 and 14): the CPU-bound reference benches split into
# shards over the host's 16 cores while the GPU runs the product's own loop on every prompt.
#   CPU (python3 there, numpy, OPENBLAS_NUM_THREADS=1, JOBS processes at a time, a queue of shard tasks):
#     py/bench/foreign.py --shard I/NF           the foreign draft through tli and slem, greedy and coupled, k = 4,
#                                                64 tokens (issue 14; --same '' --no-rejection: the same-vocabulary
#                                                draft's tau on these prompts comes from the product run below, tli's
#                                                rejection mode from the tests' distribution checks)
#     py/bench/head_acceptance.py --shard I/NH   the shipped head (+ the standalone draft): every k = 1..8, schedules,
#                                                the real loop checked on the first prompt of every stratum (issue 11)
#   GPU (foreground): py/bench/product.py --host node --backend vulkan on all 136 prompts, drafters none/model/head,
#     k = 4, greedy and coupled (seed 0), 1 run, 64 tokens: every answer identical on the engine, tau per stratum.
# Shards write $S/<name>.json only when finished, and a later call skips those, so a second call (same command,
# the machine still warm) finishes what the first one's deadline cut. When every shard of a bench is there, it is
# merged (--merge) into $OUT/<bench>.json + .txt; $OUT/shards.tar.gz holds every finished shard either way.
# Calls (after the five staging calls of bench/h200/product_prep.sh's header, which this reuses):
#   run(command="bash bench/h200/cover.sh", carry=[".devcarry/champ4"], timeout_s=600)
#   (again with carry=[] while warm, if its output says shards are left; GPU=0 skips the product run)
# Env: CALL_S (seconds of work in this call, default 540), JOBS (default 14), NF (34), NH (17), GPU (1),
#   PRODUCT_S (the product run's timeout, default 420), AFTER_GPU (a command run once the product run is done, with
#   the time left, e.g. the engine sweep: AFTER_GPU="VARIANTS='default qkv_p4' bash bench/h200/engine_variants.sh";
#   it gets SETUP=0 PYTEST=0 OUT=$X/shards and node on PATH; its engine_variants.{txt,json} come back).
# Back in $OUT (8 files at most): foreign.json, head_acceptance.json (merged), product_cover.{json,txt},
#   engine_variants.{txt,json} (AFTER_GPU), cover.log (this call's output), logs.tar.gz (every finished shard's JSON
#   and log, the merged reports' tables, the product run's log).
# Test here (llvmpipe, a 3-prompt workload): X=/tmp/exactspec-test OUT=/tmp/cover BACKEND=opengl CALL_S=200 \
#   WORKLOAD=/tmp/wl3.jsonl NF=2 NH=2 EXTRA_CPU="--max-new-tokens 8" EXTRA_GPU="--max-new-tokens 8" bash bench/h200/cover.sh
set -u
cd "$(dirname "$0")/../.."
X=${X:-/tmp/exactspec}
O=${OUT:-/tmp}
S=$X/shards
BACKEND=${BACKEND:-vulkan}
CALL_S=${CALL_S:-540}
JOBS=${JOBS:-14}
NF=${NF:-34}
NH=${NH:-17}
WORKLOAD=${WORKLOAD:-tests/data/workload.jsonl}
T0=$(date +%s)
mkdir -p $S $O
{
echo "cores: $(nproc)"
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
bash bench/h200/product_run.sh --join || exit 3
C=$X/champion.gguf
M=static/models/smollm2-135m-instruct-q4_1.gguf
[ -f $M ] || ln -sf $C $M          # the benches' default champion path (git-ignored in the tree)
sha256sum static/models/draft-llama2.gguf static/models/draft-smollm2-kd.gguf static/models/head-smollm2.gguf $WORKLOAD
python3 -c "import numpy, sys; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"

# the queue: head shards first (their trajectory cache fills while the foreign ones run), interleaved
tasks=$S/tasks.txt
: > $tasks
for i in $(seq 0 $((NH > NF ? NH - 1 : NF - 1))); do
  [ $i -lt $NH ] && echo "head $i" >> $tasks
  [ $i -lt $NF ] && echo "foreign $i" >> $tasks
done
left=$(( CALL_S - ($(date +%s) - T0) - 25 ))
cat > $S/task.sh <<EOF
#!/bin/bash
# one shard: \$1 = head | foreign, \$2 = its index; skipped when its JSON exists
kind=\$1; i=\$2; f=$S/\${kind}_\$i.json
[ -f \$f ] && exit 0
end=\$(( $T0 + $CALL_S - 25 )); t=\$(( end - \$(date +%s) )); [ \$t -lt 20 ] && exit 0
if [ \$kind = head ]; then
  timeout \$t python3 py/bench/head_acceptance.py --head static/models/head-smollm2.gguf --workload $WORKLOAD \
    --cache $S/head-cache --shard \$i/$NH --json \$f.part ${EXTRA_CPU:-} > $S/\${kind}_\$i.log 2>&1
else
  timeout \$t python3 py/bench/foreign.py --champion $C --workload $WORKLOAD --shard \$i/$NF --json \$f.part \
    --same "" --no-rejection ${EXTRA_CPU:-} > $S/\${kind}_\$i.log 2>&1
fi
rc=\$?
[ -f \$f.part ] && mv \$f.part \$f
echo "\$kind \$i rc \$rc \$(( \$(date +%s) - $T0 ))s"
EOF
chmod +x $S/task.sh
echo "== shards: $JOBS at a time, $(wc -l < $tasks) tasks, $left s $(date -u +%T)"
( xargs -P $JOBS -L 1 $S/task.sh < $tasks > $S/done.log 2>&1 ) &
QPID=$!

if [ "${GPU:-1}" = 1 ] && [ ! -f $S/product_cover.json ]; then
  source bench/h200/staged_env.sh $BACKEND           # node, Dawn, NVIDIA's Vulkan ICD
  export EXACTSPEC_PYODIDE_DIR=$X/pyodide EXACTSPEC_PYODIDE_PACKAGES=$X/pyodide
  pt=${PRODUCT_S:-420}; [ $pt -gt $left ] && pt=$left
  echo "== product, all prompts, none/model/head k 4, greedy + coupled $(date -u +%T) (timeout $pt s)"
  timeout $pt python3 py/bench/product.py --host node --backend $BACKEND --node $X/node/node --champion $C \
    --workload $WORKLOAD --strata all --per-stratum 99 --drafters none,model,head --ks 4 --modes greedy,coupled \
    --seeds 0 --runs 1 --max-new-tokens 64 --timing-reps 2 --deadline $((pt - 40)) \
    --out $S/product_cover.json.part --table $S/product_cover.txt ${EXTRA_GPU:-} > $S/product_cover.log 2>&1
  echo "product: rc $? $(date -u +%T)"
  [ -f $S/product_cover.json.part ] && mv $S/product_cover.json.part $S/product_cover.json
  tail -60 $S/product_cover.txt 2>/dev/null
fi

if [ -n "${AFTER_GPU:-}" ]; then
  at=$(( CALL_S - ($(date +%s) - T0) - 30 ))
  echo "== after the product run ($at s): $AFTER_GPU $(date -u +%T)"
  [ $at -gt 30 ] && PATH=$X/node:$PATH SETUP=0 PYTEST=0 OUT=$S timeout $at bash -c "$AFTER_GPU"
  echo "after: rc $? $(date -u +%T)"
fi

wait $QPID
cat $S/done.log
nh=$(ls $S/head_*.json 2>/dev/null | wc -l); nf=$(ls $S/foreign_*.json 2>/dev/null | wc -l)
echo "== shards done: head $nh/$NH, foreign $nf/$NF $(date -u +%T)"
if [ $nh -eq $NH ]; then
  python3 py/bench/head_acceptance.py --merge $(ls $S/head_*.json) --json $O/head_acceptance.json > $S/head_acceptance.txt 2>&1
  echo "head merge: rc $?"; tail -45 $S/head_acceptance.txt
fi
if [ $nf -eq $NF ]; then
  python3 py/bench/foreign.py --merge $(ls $S/foreign_*.json) --json $O/foreign.json > $S/foreign.txt 2>&1
  echo "foreign merge: rc $?"; cat $S/foreign.txt
fi
[ $nh -lt $NH ] || [ $nf -lt $NF ] && echo "shards are left: run this call again (carry=[]) while the machine is warm"
cp $S/product_cover.json $S/product_cover.txt $S/engine_variants.txt $S/engine_variants.json $O/ 2>/dev/null
tar -C $S -czf $O/logs.tar.gz $(cd $S && ls *.json *.log *.txt 2>/dev/null | grep -v -e '^product_cover.json$' -e '^tasks.txt$' -e '^engine_variants') 2>/dev/null
ls -la $O
exit 0
} 2>&1 | tee $O/cover.log
