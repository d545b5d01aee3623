#!/bin/bash
# The product's own loop on the H200 (device machine): `bench product --host node --backend vulkan`, i.e.
# py/bench/product.py driving bench/product/node_host.mjs (Pyodide + exactspec's decode loop + bridge.py +
# app/gpu/engine.js under Node, Dawn over Vulkan on the NVIDIA GPU). Prepared here by bench/h200/product_prep.sh;
# the six calls of product_prep.sh's header, back to back (the champion in NPARTS = 5 parts, its SPLIT_MB): five
# `--stage` calls carrying gpu_node; gpu_rest + product + champ0; champ1; champ2; champ3; then the measuring call
# carrying champ4, e.g.
#   run(command="bash bench/h200/product_run.sh", carry=[".devcarry/champ4"], timeout_s=600)
#      or, for the preregistered bench matrix and bench product's figures from the same answers:
#      run(command="bash bench/h200/product_run.sh --matrix", carry=[".devcarry/champ4"], timeout_s=600)
# --join    stage, check and join the champion into $X/champion.gguf (sha256 checked), nothing else (cover.sh)
# --stage   only unpack what this call carries into $X (/tmp/exactspec): node, Dawn, the Vulkan loader debs (into /,
#           then ldconfig, on the GPU host), the Pyodide runtime + wheels, champion parts. Idempotent.
# (none)    stage, check everything is there (else name the call to repeat), join the champion and check its
#           sha256, then write to $OUT (each a .json report + a .txt table; progress goes to the call's output):
#   product_quick.*    --quick: 1 prompt per stratum, 16 tokens, k 1 and 4, none/ngram/model, greedy + coupled
#                      (seeds 0, 1), 1 run                                                          ~1 min
#   product_h200.*     all 11 strata x 3 prompts, drafters none/ngram/model, k = 1..4, greedy, 64 new tokens, 3 runs
#                      (the figures), a deadline of 240 s (whole strata only: each finished stratum has its 3 runs)
#   product_coupled.*  coupled mode (T 0.7), seeds 0 and 1, 1 prompt per stratum, k 2 and 4, 1 run     ~1 min
# --quick   stage, check, and only the quick slice.
# --head    stage, check, then the draft head (HEAD_FILE, default static/models/head-smollm2.gguf; without it a random
#           head of the trained one's shape, made there for the champion: the pass times only, its tau is ~1):
#   head_engine.*    py/bench/head_engine.py: one head pass vs one champion pass (wall and GPU timestamps, per kind
#                    of dispatch), the on-device round k = 1..4, indexed vs masked LM head, GPU memory     ~1 min
#   product_head.*   bench product, drafters none/model/head (the head beside the draft model), k = 1..4, greedy,
#                    2 prompts per stratum, 64 new tokens, 3 runs, a deadline of 240 s
#   product_head_coupled.*  coupled (T 0.7), seeds 0 and 1, none/head, k 2 and 4, 1 prompt per stratum, 1 run
#   env: HEAD_ENGINE=0 skips head_engine; HEAD_DRAFTERS (none,model,head) for product_head; HEAD_KS (1,2,3,4), HEAD_DEADLINE (240), HEAD_TIMEOUT (330) for product_head
#   (as the measuring call: run(command="bash bench/h200/product_run.sh --head", carry=[".devcarry/champ4"],
#   timeout_s=600); the head file travels with the tree when tracked, else carry it)
# --ab      stage, check, then bench product twice (all strata, 1 prompt each, none/ngram/model, k 2 and 4, greedy,
#           3 runs, 64 tokens): A with the engine's defaults, B with createEngine options AB_OPTS (JSON; default
#           '{"fuseMatmulWg":64}', the qkv prologue's workgroup before 2026-12-02's sweep), AB_THIRD=1 adds A again,
#           AB_C_OPTS (JSON) a side C with those options, AB_D_ARGS (bench product options) a side D of the defaults
#           with them (e.g. "--adaptive on"), AB_SIDES which of A B A2 C D run (default all that are asked for);
#           AB_DRAFTERS (none,ngram,model; with head: the shipped head, bench product's default --head), AB_KS (2,4),
#           AB_PER (prompts per stratum, 1), AB_DEADLINE (120 s), AB_TIMEOUT (170 s), AB_PYTEST (test files to run on
#           this GPU after the sides, e.g. tests/gpu/test_spec_chain_engine.py); AB_LONG=1: then A and B
#           again with 256-token answers (casual chat, rewrites, repetitive text; none and ngram k 4): long_{A,B}.*
#           (AB_LONG_SIDES: which, default "A B"; A2 again the defaults); AB_SIDES=- skips the 64-token sides;
#           side I (in AB_SIDES or AB_LONG_SIDES): ONE run with the defaults and `--ab-engine-opts $AB_OPTS`, a second
#           host whose champion-alone answers alternate with the first's (the report's "engine A/B" table: B / A per
#           answer pair), which noisy hosts cannot blur as they blur separate sides, e.g.
#           AB_SIDES=I AB_DRAFTERS=none,ngram AB_KS=4 AB_LONG=1 AB_LONG_SIDES=I AB_OPTS='{"contSplits":0}';
#           product_ab_{A,B}.{json,txt}, ab.log                                                     ~5 minutes
# --diag    stage, check, then bench/gpu/bench.mjs --model-only with ABLATE=1 (GPU time per pass with each kind of
#           dispatch left out, and the dispatch count's floor: bench_ablate.txt), then --ab with AB_OPTS
#           '{"aheadThen":false}' (decodeAhead's continuations off in B) and AB_DRAFTERS none,ngram      ~6 minutes
# --matrix  stage, check, then the preregistered bench matrix (py/bench/matrix.py, bench/matrix/spec.json) instead of
#           the three runs above; its answers also give bench product's figures (product.txt: measured next to
#           predicted speedup, per stratum, drafter and k), so this one call replaces them. Writes (8 files at most
#           come back):
#   matrix-full/{matrix.json,report.html,product.txt}  subset full (every stratum, greedy + coupled, k 3, 24 tokens,
#                      3 runs, cold TTFT): the CPU fallback's matrix, here on the GPU           ~1.5 min, cut at 200 s
#   matrix-gpu/{matrix.json,report.html,product.txt}   subset gpu (2 prompts per stratum, k = 1..4, 64 tokens,
#                      greedy + coupled, 3 runs, cold TTFT), a deadline of 200 s (whole strata only; the report says
#                      where it stopped)                                                        ~4.5 min, cut at 330 s
#   matrix.log         both runs' progress
#   Whole call: about 6 minutes. Redraw a report here: python build.py bench matrix --redraw DIR
# --all     stage, check, then the second wave's one measurement call (CALL_BUDGET 330 s): the bench matrix's gpu
#           subset with the draft head beside the other drafters at k = MATRIX_KS (2,4; departures from the spec that
#           its report names), a deadline of MATRIX_DEADLINE (160 s, whole strata); the head's step
#           (py/bench/head_engine.py); then, while time is left, the shaders' A/B, fused (bench/h200/shaders_ab.sh,
#           carry .devcarry/shaders_30c877a, prepared by `bash bench/h200/shaders_ab.sh --prep`). Writes
#           matrix-gpu/{matrix.json,report.html,product.txt}, head_engine.{json,txt}, shaders_ab.txt, all.log.
#           After the five staging calls: run(command="bash bench/h200/product_run.sh --all",
#           carry=[".devcarry/champ4", ".devcarry/shaders_30c877a"], timeout_s=400)
# Whole --all call: about 6 minutes (measured on llvmpipe and extrapolated: see the README's bench product section).
# Testing here (llvmpipe): BACKEND=opengl X=/tmp/exactspec-test OUT=/tmp/out EXTRA="--strata repetitive --max-new-tokens 8"
#   bash bench/h200/product_run.sh --quick      (EXTRA: bench product options appended to every command)
set -u
cd "$(dirname "$0")/../.."
X=${X:-/tmp/exactspec}
O=${OUT:-/tmp}
BACKEND=${BACKEND:-vulkan}
MODE=${1:-run}
NPARTS=${NPARTS:-5}      # the champion's parts p0 .. p(NPARTS-1), as product_prep.sh splits it (SPLIT_MB: 5 by default)
C=$X/champion.gguf
WANT=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p $X/champ $O

stage() {
  for p in .devcarry/champ*/p*; do
    [ -f "$p" ] && [ ! -f "$X/champ/$(basename $p)" ] && cp "$p" "$X/champ/" && echo "staged $p"
  done
  mkdir -p $X/node $X/node_modules
  for d in .devcarry/gpu .devcarry/gpu_node; do   # node (the whole gpu folder, or its half gpu_node)
    if [ -f $d/node.xz ] && [ ! -x $X/node/node ]; then
      xz -T4 -dc $d/node.xz > $X/node/node.part && chmod +x $X/node/node.part && mv $X/node/node.part $X/node/node
      echo "staged node $($X/node/node --version)"
    fi
  done
  for d in .devcarry/gpu .devcarry/gpu_rest; do   # Dawn and the debs (the whole gpu folder, or its half gpu_rest)
    if [ -f $d/webgpu.tar.xz ] && [ ! -f $X/node_modules/webgpu/package.json ]; then
      tar -C $X/node_modules -xJf $d/webgpu.tar.xz
      if [ -e /usr/local/nvidia ]; then      # the GPU host: NVIDIA's ICD needs the Vulkan loader and glvnd
        for f in $d/*.deb; do dpkg -x $f /; done
        ldconfig
      fi
      echo "staged Dawn (webgpu), Vulkan loader debs"
    fi
  done
  if [ -f .devcarry/product/pyodide.tar.xz ] && [ ! -f $X/pyodide/pyodide.asm.wasm ]; then
    tar -C $X -xJf .devcarry/product/pyodide.tar.xz
    echo "staged the Pyodide runtime + wheels: $(ls $X/pyodide | tr '\n' ' ')"
  fi
}

stage
[ "$MODE" = "--stage" ] && exit 0

missing=""
[ -x $X/node/node ] || missing="$missing node (call 1)"
[ -f $X/node_modules/webgpu/package.json ] || missing="$missing Dawn (call 2)"
[ -f $X/pyodide/pyodide.asm.wasm ] || missing="$missing Pyodide (call 2)"
for i in $(seq 0 $((NPARTS - 1))); do [ -f $X/champ/p$i ] || missing="$missing champion part $i"; done
if [ -n "$missing" ]; then
  echo "missing in $X:$missing. The machine was probably given back between calls: repeat the staging calls (product_prep.sh's header)." | tee $O/product_error.txt
  exit 3
fi
if [ ! -f $C ]; then cat $(seq -f "$X/champ/p%g" 0 $((NPARTS - 1))) > $C.part && mv $C.part $C; fi
echo "$WANT  $C" | sha256sum -c || { echo "champion sha256 mismatch: repeat the staging calls" | tee $O/product_error.txt; rm -f $C; exit 3; }
[ "$MODE" = "--join" ] && exit 0
sha256sum static/models/draft-smollm2-kd.gguf tests/data/workload.jsonl
source bench/h200/staged_env.sh $BACKEND             # node, Dawn, NVIDIA's Vulkan ICD
export EXACTSPEC_PYODIDE_DIR=$X/pyodide EXACTSPEC_PYODIDE_PACKAGES=$X/pyodide
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null || true
B="python3 py/bench/product.py --host node --backend $BACKEND --node $X/node/node --champion $C"
M="python3 py/bench/matrix.py --host node --backend $BACKEND --node $X/node/node --champion $C"
EXTRA=${EXTRA:-}

if [ "$MODE" = "--head" ]; then
  HEADF=${HEAD_FILE:-static/models/head-smollm2.gguf}
  if [ ! -f "$HEADF" ]; then
    HEADF=$X/head-random.gguf
    python3 py/bench/head_engine.py --make-random $HEADF --champion $C || exit 3
    echo "no trained head: a random one of its shape ($HEADF)"
  fi
  sha256sum $HEADF
  if [ "${HEAD_ENGINE:-1}" = 1 ]; then
    echo "== head step $(date -u +%T)"
    timeout 150 python3 py/bench/head_engine.py --backend $BACKEND --node $X/node/node --champion $C --head $HEADF \
      --variants indexed,masked --reps 20 --ks 1,2,3,4 --timestamps --json $O/head_engine.json | tee $O/head_engine.txt
    echo "head step: rc $?"
  fi
  echo "== product with the head $(date -u +%T)"
  timeout ${HEAD_TIMEOUT:-330} $B --strata all --per-stratum 2 --drafters ${HEAD_DRAFTERS:-none,model,head} --head $HEADF \
    --ks ${HEAD_KS:-1,2,3,4} --modes greedy --runs 3 --max-new-tokens 64 --deadline ${HEAD_DEADLINE:-240} \
    --out $O/product_head.json --table $O/product_head.txt $EXTRA
  echo "product with the head: rc $?"
  echo "== coupled with the head $(date -u +%T)"
  timeout 100 $B --strata all --per-stratum 1 --drafters none,head --head $HEADF --ks 2,4 --modes coupled --seeds 0,1 \
    --runs 1 --max-new-tokens 64 --deadline 45 --out $O/product_head_coupled.json --table $O/product_head_coupled.txt $EXTRA
  echo "coupled with the head: rc $? $(date -u +%T)"
  ls -la $O/head_engine.* $O/product_head*
  exit 0
fi

if [ "$MODE" = "--all" ]; then
  HEADF=${HEAD_FILE:-static/models/head-smollm2.gguf}
  export PYTHONUNBUFFERED=1
  T0=$(date +%s)
  sha256sum $HEADF
  {
    echo "== matrix, subset gpu, with the head $(date -u +%T)"
    timeout ${MATRIX_TIMEOUT:-230} $M --subset gpu --drafters none,ngram,model,head --head $HEADF --ks ${MATRIX_KS:-2,4} \
      --deadline ${MATRIX_DEADLINE:-160} --out $O/matrix-gpu $EXTRA
    rc=$?
    echo "matrix gpu: rc $rc $(date -u +%T)"
    if [ $rc -ne 0 ] && [ $(( $(date +%s) - T0 )) -lt 90 ]; then   # failed early: the matrix without the head
      echo "== matrix, subset gpu, without the head (rc $rc above)"
      timeout ${MATRIX_TIMEOUT:-230} $M --subset gpu --ks ${MATRIX_KS:-2,4} --deadline ${MATRIX_DEADLINE:-160} \
        --out $O/matrix-gpu $EXTRA
      echo "matrix gpu without the head: rc $? $(date -u +%T)"
    fi
    echo "== head step $(date -u +%T)"
    timeout ${HEAD_TIMEOUT:-60} python3 py/bench/head_engine.py --backend $BACKEND --node $X/node/node --champion $C \
      --head $HEADF --variants indexed,masked --reps 10 --ks 1,2,3,4 --timestamps --json $O/head_engine.json > $O/head_engine.txt 2>&1
    echo "head step: rc $? $(date -u +%T)"
    tail -40 $O/head_engine.txt
    left=$(( ${CALL_BUDGET:-330} - ($(date +%s) - T0) ))
    rounds=$(( left / 60 )); [ $rounds -gt 3 ] && rounds=3
    if [ -d .devcarry/shaders_30c877a ] && [ $rounds -ge 1 ]; then
      echo "== shaders A/B, fused, $rounds round(s) $(date -u +%T) ($left s left)"
      SETUP=0 NODE_DIR=$X/node FUSES=1 ROUNDS=$rounds RUN_TIMEOUT=30 OUT=$O bash bench/h200/shaders_ab.sh
      echo "shaders A/B: rc $? $(date -u +%T)"
    else
      echo "no shaders A/B ($left s left, or .devcarry/shaders_30c877a not carried)"
    fi
  } 2>&1 | tee $O/all.log
  rm -f $O/matrix-gpu/product.json $O/matrix-gpu/*.part
  ls -la $O $O/matrix-gpu
  exit 0
fi

if [ "$MODE" = "--diag" ]; then   # where a pass's GPU time goes, and the continuations' A/B through the product's loop
  export PYTHONUNBUFFERED=1
  {
    echo "== engine ablation (synthetic SmolLM2-shaped weights) $(date -u +%T)"
    ABLATE=1 timeout ${ABLATE_TIMEOUT:-150} $X/node/node bench/gpu/bench.mjs --backend $BACKEND --model-only
    echo "engine ablation: rc $? $(date -u +%T)"
  } > $O/bench_ablate.txt 2>&1
  grep -v '^JSON' $O/bench_ablate.txt
  AB_OPTS='{"aheadThen":false}' AB_DRAFTERS=${AB_DRAFTERS:-none,ngram} bash "$0" --ab
  exit 0
fi

if [ "$MODE" = "--ab" ]; then   # the engine's defaults (A) against AB_OPTS (B), the same bench product run each
  export PYTHONUNBUFFERED=1
  AB_OPTS=${AB_OPTS:-'{"fuseMatmulWg":64}'}   # (JSON without spaces)
  AB="--strata all --per-stratum ${AB_PER:-1} --drafters ${AB_DRAFTERS:-none,ngram,model} --ks ${AB_KS:-2,4} --modes greedy --runs 3 --max-new-tokens 64 --deadline ${AB_DEADLINE:-120}"
  {
    for side in ${AB_SIDES:-A B A2 C D}; do
      [ "$side" = - ] && continue   # (AB_SIDES=-: none of the 64-token sides, e.g. only AB_LONG's)
      [ "$side" = A2 ] && [ "${AB_THIRD:-0}" != 1 ] && continue
      [ "$side" = C ] && [ -z "${AB_C_OPTS:-}" ] && continue
      [ "$side" = D ] && [ -z "${AB_D_ARGS:-}" ] && continue
      opts=""; [ "$side" = B ] && opts="--engine-opts $AB_OPTS"; [ "$side" = C ] && opts="--engine-opts $AB_C_OPTS"
      [ "$side" = I ] && opts="--ab-engine-opts $AB_OPTS"
      [ "$side" = D ] && opts="$AB_D_ARGS"
      echo "== product $side ${opts:-(the defaults)} $(date -u +%T)"
      timeout ${AB_TIMEOUT:-170} $B $AB $opts --out $O/product_ab_$side.json --table $O/product_ab_$side.txt $EXTRA
      echo "product $side: rc $? $(date -u +%T)"
    done
    if [ "${AB_LONG:-0}" = 1 ]; then   # longer answers (256 tokens) on three strata, A and B (AB_LONG_SIDES: e.g. A B A2)
      for side in ${AB_LONG_SIDES:-A B}; do
        opts=""; [ "$side" = B ] && opts="--engine-opts $AB_OPTS"; [ "$side" = I ] && opts="--ab-engine-opts $AB_OPTS"
        echo "== product $side, 256 tokens ${opts:-(the defaults)} $(date -u +%T)"
        timeout 120 $B --strata casual_chat,rewrites,repetitive --per-stratum 1 --drafters none,ngram --ks 4 --modes greedy \
          --runs 3 --max-new-tokens 256 --deadline 80 $opts --out $O/long_$side.json --table $O/long_$side.txt $EXTRA
        echo "product $side, 256 tokens: rc $? $(date -u +%T)"
      done
    fi
    if [ -n "${AB_PYTEST:-}" ]; then   # bitwise checks on this GPU (test files named), after the sides
      echo "== pytest $AB_PYTEST $(date -u +%T)"
      PATH=$X/node:$PATH EXACTSPEC_DAWN_BACKEND=$BACKEND timeout ${AB_PYTEST_TIMEOUT:-150} python3 -m pytest -q \
        -p no:cacheprovider $AB_PYTEST 2>&1 | tail -8
      echo "pytest: rc $? $(date -u +%T)"
    fi
  } 2>&1 | tee $O/ab.log
  exit 0
fi

if [ "$MODE" = "--matrix" ]; then
  export PYTHONUNBUFFERED=1
  {
    echo "== matrix, subset full $(date -u +%T)"
    timeout 200 $M --subset full --deadline ${MATRIX_FULL_DEADLINE:-150} --out $O/matrix-full $EXTRA
    echo "matrix full: rc $? $(date -u +%T)"
    echo "== matrix, subset gpu $(date -u +%T)"
    timeout 330 $M --subset gpu --deadline ${MATRIX_DEADLINE:-200} --out $O/matrix-gpu $EXTRA
    echo "matrix gpu: rc $? $(date -u +%T)"
  } 2>&1 | tee $O/matrix.log
  rm -f $O/matrix-full/product.json $O/matrix-gpu/product.json $O/matrix-*/*.part
  ls -la $O/matrix-full $O/matrix-gpu
  exit 0
fi

echo "== quick slice $(date -u +%T)"
timeout 110 $B --quick --strata all --drafters none,ngram,model --modes greedy,coupled --seeds 0,1 \
  --out $O/product_quick.json --table $O/product_quick.txt $EXTRA
echo "quick slice: rc $?"
[ "$MODE" = "--quick" ] && exit 0

echo "== main run $(date -u +%T)"
timeout 330 $B --strata all --per-stratum 3 --drafters none,ngram,model --ks 1,2,3,4 --modes greedy --runs 3 \
  --max-new-tokens 64 --deadline 240 --out $O/product_h200.json --table $O/product_h200.txt $EXTRA
echo "main run: rc $?"

echo "== coupled $(date -u +%T)"
timeout 100 $B --strata all --per-stratum 1 --drafters none,ngram,model --ks 2,4 --modes coupled --seeds 0,1 \
  --runs 1 --max-new-tokens 64 --deadline 45 --out $O/product_coupled.json --table $O/product_coupled.txt $EXTRA
echo "coupled: rc $? $(date -u +%T)"
ls -la $O/product_*
exit 0
